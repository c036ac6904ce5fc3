package snapid_test

import (
	"os"
	"testing"
)

// TestMain keeps the name bindings of the tests' counters (see
// DefaultBindingDir) out of the host's directory: a counter in a test's
// temporary directory is bound in that test's own directory (see
// export_test.go), any other in a directory of this run, which child
// processes the tests start inherit.
func TestMain(m *testing.M) {
	if os.Getenv("SNAPID_BINDING_DIR") == "" {
		dir, err := os.MkdirTemp("", "snapid-bindings-")
		if err != nil {
			panic(err)
		}
		os.Setenv("SNAPID_BINDING_DIR", dir)
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}
