package cassandra

import (
	"fmt"

	"github.com/snapid/snapid/registry"
)

func invalidArg(format string, args ...any) error {
	return fmt.Errorf("snapid: %w: %s", registry.ErrInvalidOption, fmt.Sprintf(format, args...))
}

// checkOwner validates an owner token: 1 to 128 printable ASCII characters
// without spaces (snapid's tokens are 32 hex digits).
func checkOwner(owner string) error {
	if owner == "" {
		return invalidArg("empty owner token")
	}
	if len(owner) > 128 {
		return invalidArg("owner token of %d bytes (at most 128)", len(owner))
	}
	for i := 0; i < len(owner); i++ {
		if owner[i] <= ' ' || owner[i] > '~' {
			return invalidArg("owner token byte %d is %q (want printable ASCII)", i, owner[i])
		}
	}
	return nil
}

func checkField(what, v string) error {
	if len(v) > 1024 {
		return invalidArg("%s of %d bytes (at most 1024)", what, len(v))
	}
	return nil
}
