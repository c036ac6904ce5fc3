package registrytest_test

import (
	"os"
	"testing"

	"github.com/snapid/snapid/internal/testfs"
)

// TestMain keeps the name records of this package's test counters (see
// /var/lib/snapid/records) in a directory of this run, not the host's:
// an Open that names no place of its own never writes the machine's
// /var/lib/snapid/records. The examples run in this binary too; each
// simulated host in them still names a place of its own (Config.BindingDir).
func TestMain(m *testing.M) {
	os.Exit(testfs.RunWithOwnBindings(m))
}
