package cli

import (
	"os"
	"testing"

	"github.com/snapid/snapid/internal/testfs"
)

// TestMain keeps the name bindings of the tests' counters (see
// DefaultBindingDir) in a directory of this run, not the host's: tests
// open counters under the same names in many temporary directories. Child
// processes the tests start inherit it.
func TestMain(m *testing.M) {
	os.Exit(testfs.RunWithOwnBindings(m))
}
