package sim

import (
	"errors"
	"testing"

	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
)

// cliError finds the library's error in snapctl's message however
// snapctl wrapped it over lines.
func TestCLIErrorReadsWrappedMessage(t *testing.T) {
	for _, tc := range []struct {
		stderr string
		want   error
	}{
		{"snapctl: release \"n1\": reserved-up-to mark moved\n", registry.ErrMarkMoved},
		{"snapctl: release \"n1\": a long message about the registry and what it did, reserved-up-to\n    mark moved (from 10 to 20)\n  - nothing was released\n", registry.ErrMarkMoved},
		{"snapctl: registry error: connecting to Cassandra\n  - check that Cassandra is reachable\n", engine.ErrRegistry},
	} {
		err := cliError(tc.stderr)
		if !errors.Is(err, tc.want) {
			t.Errorf("cliError(%q) = %v, not %v", tc.stderr, err, tc.want)
		}
		if tc.want == engine.ErrRegistry && errors.Is(err, registry.ErrMarkMoved) {
			t.Errorf("cliError(%q) = %v: not a moved mark", tc.stderr, err)
		}
	}
}
