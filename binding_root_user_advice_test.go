package snapid_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Environment of the child of TestRootBoundNameAdviceForUsers.
const (
	envAdviceShared = "SNAPID_TEST_ADVICE_SHARED" // the host-wide directory
	envAdviceWork   = "SNAPID_TEST_ADVICE_WORK"   // the child's directory for counters
)

// Root ran the default command on the host (its counter in its own home,
// which no other user can reach) and bound the name host-wide. A user's
// run under the same name is refused with advice that user can follow:
// another name, or SNAPID_BINDING_DIR for a private trial; never "use
// root's counter" or "remove root's binding".
func TestRootBoundNameAdviceForUsers(t *testing.T) {
	if shared := os.Getenv(envAdviceShared); shared != "" {
		require.NotEqual(t, 0, os.Geteuid(), "the child runs as another user")
		ExportBindingDefaults(t, shared)
		work := os.Getenv(envAdviceWork)
		_, err := Open(filepath.Join(work, "vm.u64"), "vm")
		require.ErrorIs(t, err, ErrNameBound)
		require.ErrorIs(t, err, ErrNameBoundByRoot)
		for _, want := range []string{`root bound "vm"`, "use another name", "SNAPID_BINDING_DIR"} {
			assert.Contains(t, err.Error(), want)
		}
		assert.NotContains(t, err.Error(), "remove")
		assert.NotContains(t, err.Error(), "use that counter")
		_, err = os.Stat(filepath.Join(work, "vm.u64"))
		require.ErrorIs(t, err, os.ErrNotExist, "the refused Open created nothing")
		return
	}
	requireRoot(t)
	root, err := os.MkdirTemp("", "snapid-root-advice-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	require.NoError(t, os.Chmod(root, 0o755))
	shared := filepath.Join(root, "names")
	ExportBindingDefaults(t, shared)
	rootHome := filepath.Join(root, "roothome") // as /root: 0700
	require.NoError(t, os.Mkdir(rootHome, 0o700))
	rootCounter := filepath.Join(rootHome, "counter.u64")
	g, err := Open(rootCounter, "vm")
	require.NoError(t, err)
	require.NoError(t, g.Close())
	require.NoError(t, os.Chmod(shared, 0o755))

	work := filepath.Join(root, "work")
	require.NoError(t, os.Mkdir(work, 0o755))
	require.NoError(t, os.Chown(work, nobody, nobody))
	bin := filepath.Join(root, "snapid.test")
	copyExecutable(t, bin)
	cmd := exec.Command(bin, "-test.run", "^TestRootBoundNameAdviceForUsers$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), envAdviceShared+"="+shared, envAdviceWork+"="+work,
		"HOME="+work, "XDG_STATE_HOME=", "TMPDIR="+work, "SNAPID_BINDING_DIR=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the child, as uid %d:\n%s", nobody, out)
	require.Contains(t, string(out), "--- PASS: TestRootBoundNameAdviceForUsers")
}
