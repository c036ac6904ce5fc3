package prometheus_test

import (
	"os"
	"testing"
)

// TestMain keeps the name bindings of this package's test counters (see
// snapid.DefaultBindingDir) in a directory of this run, not the host's.
func TestMain(m *testing.M) {
	if os.Getenv("SNAPID_BINDING_DIR") != "" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "snapid-bindings-")
	if err != nil {
		panic(err)
	}
	os.Setenv("SNAPID_BINDING_DIR", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
