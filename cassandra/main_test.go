package cassandra

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/snapid/snapid/internal/testfs"
)

// Multi-process tests re-run this test binary as children, as Go's own
// lockedfile tests do: a child is started with SNAPID_TEST_CHILD set to a
// role registered in childRoles, runs that role instead of the tests and
// exits with its status.
const childEnv = "SNAPID_TEST_CHILD"

// childRoles maps a role name to its body; files register roles in init.
var childRoles = map[string]func() int{}

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		fn, ok := childRoles[role]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown child role %q\n", role)
			os.Exit(3)
		}
		os.Exit(fn())
	}
	// The name bindings of this package's test counters (see
	// /var/lib/snapid/records) go to a directory of this run, not the
	// host's; child processes inherit it.
	os.Exit(testfs.RunWithOwnBindings(m))
}

// childCommand returns a command that runs role in a child process with
// the extra environment env ("KEY=value").
func childCommand(tb testing.TB, role string, env ...string) *exec.Cmd {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(append(os.Environ(), childEnv+"="+role), env...)
	return cmd
}
