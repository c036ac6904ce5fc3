package registry

import (
	"fmt"

	"github.com/snapid/snapid/internal/nodename"
)

// MaxNameLen is the longest valid node name.
const MaxNameLen = nodename.MaxLen

// NameRule is the node name rule in words, as used in error messages.
const NameRule = nodename.Rule

// ValidateName reports whether s is a valid node name. The error wraps
// ErrInvalidName, says what is wrong and states the rule. A name is never
// altered to make it valid; see snapid.NameFromHostname for the one derivation
// snapid offers. Registries key their rows by names that follow it.
func ValidateName(s string) error {
	if why := nodename.Problem(s); why != "" {
		return fmt.Errorf("snapid: %w %q: %s; %s", ErrInvalidName, s, why, NameRule)
	}
	return nil
}
