package engine_test

import (
	"os"
	"testing"

	"github.com/snapid/snapid/internal/testfs"
)

// TestMain keeps the name bindings of the tests' counters (see
// DefaultBindingDir) out of the host's directory: a counter in a test's
// temporary directory is bound in that test's own directory (see
// export_test.go), any other in a directory of this run, which child
// processes the tests start inherit.
func TestMain(m *testing.M) {
	os.Exit(testfs.RunWithOwnBindings(m))
}
