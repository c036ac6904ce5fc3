package testfs

import (
	"os"
	"testing"
)

// RunWithOwnBindings runs m with the name bindings of its test counters
// (see /var/lib/snapid/records) in a directory of this run, not the
// host's: tests open counters under the same names in many temporary
// directories. Child processes the tests start inherit it through
// SNAPID_BINDING_DIR; a directory already set there is kept. It returns
// m.Run's exit code, for TestMain to pass to os.Exit.
func RunWithOwnBindings(m *testing.M) int {
	if os.Getenv("SNAPID_BINDING_DIR") != "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "snapid-bindings-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	os.Setenv("SNAPID_BINDING_DIR", dir)
	return m.Run()
}
