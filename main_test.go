package snapid_test

import (
	"os"
	"testing"

	"github.com/snapid/snapid/internal/testfs"
)

// TestMain keeps what the examples leave on the host to this run: their
// counters (in temporary directories under a directory of this run, kept
// until the run ends, so that no later example's counter takes a removed
// one's inode) and their names' records (see testfs.RunWithOwnBindings).
func TestMain(m *testing.M) {
	tmp, err := os.MkdirTemp("", "snapid-examples-")
	if err != nil {
		panic(err)
	}
	os.Setenv("TMPDIR", tmp)
	code := testfs.RunWithOwnBindings(m)
	os.RemoveAll(tmp)
	os.Exit(code)
}
