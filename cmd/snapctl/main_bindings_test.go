package main

import (
	"os"
	"testing"
)

// TestMain keeps the name bindings of the tests' counters (see
// DefaultBindingDir) in a directory of this run, not the host's: tests
// open counters under the same names in many temporary directories. Child
// processes the tests start inherit it.
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
