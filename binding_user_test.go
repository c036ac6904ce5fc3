package snapid_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Environment of the child of TestBindingFallbackForOtherUsers.
const (
	envBindChild  = "SNAPID_TEST_BINDING_CHILD" // the host-wide directory
	envBindWork   = "SNAPID_TEST_BINDING_WORK"  // the child's directory for counters
	envBindExpect = "SNAPID_TEST_BINDING_VM"    // "refused" or "opened": what Open of "vm" must do
)

// nobody is the user the child runs as.
const nobody = 65534

// A program run by a user who cannot write the host-wide directory records
// its bindings in the user's state directory (~/.local/state/snapid/names)
// and still refuses a name the host-wide directory binds to another
// counter; a host-wide directory it cannot read refuses every name (root
// may have bound it there). The user's programs run as a child of this test binary with
// another uid.
func TestBindingFallbackForOtherUsers(t *testing.T) {
	if shared := os.Getenv(envBindChild); shared != "" {
		bindingChild(t, shared)
		return
	}
	requireRoot(t)
	// Directories the other user can reach: not under t.TempDir (0700).
	root, err := os.MkdirTemp("", "snapid-binding-user-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	require.NoError(t, os.Chmod(root, 0o755))
	shared := filepath.Join(root, "names")
	ExportBindingDefaults(t, shared)
	rootCounter := filepath.Join(root, "root.u64")
	g, err := Open(rootCounter, "vm") // root binds vm host-wide (mode 1777)
	require.NoError(t, err)
	require.NoError(t, g.Close())
	require.NoError(t, os.Chmod(shared, 0o755)) // readable, not writable, by others
	requireBinding(t, shared, "vm", rootCounter)

	home, work := filepath.Join(root, "home"), filepath.Join(root, "work")
	for _, d := range []string{home, work, filepath.Join(work, "tmp")} {
		require.NoError(t, os.Mkdir(d, 0o755))
		require.NoError(t, os.Chown(d, nobody, nobody))
	}
	bin := filepath.Join(root, "snapid.test")
	copyExecutable(t, bin)

	run := func(expectVM string) {
		t.Helper()
		cmd := exec.Command(bin, "-test.run", "^TestBindingFallbackForOtherUsers$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), envBindChild+"="+shared, envBindWork+"="+work, envBindExpect+"="+expectVM,
			"HOME="+home, "XDG_STATE_HOME=", "TMPDIR="+filepath.Join(work, "tmp"), "SNAPID_BINDING_DIR=")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "the child, as uid %d:\n%s", nobody, out)
		require.Contains(t, string(out), "--- PASS: TestBindingFallbackForOtherUsers")
	}
	run("refused")
	userDir := filepath.Join(home, ".local", "state", "snapid", "names")
	requireBinding(t, userDir, "web", filepath.Join(work, "web.u64"))
	_, err = os.Stat(filepath.Join(shared, "web"))
	require.ErrorIs(t, err, os.ErrNotExist, "nothing recorded in a directory the user cannot write")
	_, err = os.Stat(filepath.Join(work, "vm.u64"))
	require.ErrorIs(t, err, os.ErrNotExist, "the refused Open created nothing")

	// A host-wide directory the user cannot read refuses every name: root
	// may have bound it there.
	require.NoError(t, os.Chmod(shared, 0o700))
	run("unreadable")
	_, err = os.Stat(filepath.Join(work, "vm.u64"))
	require.ErrorIs(t, err, os.ErrNotExist, "the refused Open created nothing")
	_, err = os.Stat(filepath.Join(userDir, "vm"))
	require.ErrorIs(t, err, os.ErrNotExist, "the refused Open bound nothing")
	requireBinding(t, shared, "vm", rootCounter)
}

// bindingChild is the other user's side of TestBindingFallbackForOtherUsers.
func bindingChild(t *testing.T, shared string) {
	require.NotEqual(t, 0, os.Geteuid(), "the child runs as another user")
	work := os.Getenv(envBindWork)
	ExportBindingDefaults(t, shared)
	g, err := Open(filepath.Join(work, "vm.u64"), "vm")
	switch os.Getenv(envBindExpect) {
	case "refused":
		require.ErrorIs(t, err, ErrNameBound, "vm is bound host-wide to root's counter")
		g, err = Open(filepath.Join(work, "web.u64"), "web")
		require.NoError(t, err)
		id, err := g.UniqueID()
		require.NoError(t, err)
		assert.Equal(t, "web-1", id)
		require.NoError(t, g.Close())
	case "opened":
		require.NoError(t, err)
		require.NoError(t, g.Close())
	case "unreadable":
		require.ErrorIs(t, err, os.ErrPermission)
		require.Contains(t, err.Error(), "cannot read the host-wide name bindings directory")
		require.Contains(t, err.Error(), "chmod 755")
		assert.Contains(t, err.Error(), "SNAPID_BINDING_DIR to one directory that every program of the host uses",
			"a binding directory of this user's own would not keep its ids apart from root's")
		_, err = Open(filepath.Join(work, "web2.u64"), "web2")
		require.ErrorIs(t, err, os.ErrPermission, "every name is refused, not only root's")
	case "race":
		if err == nil {
			g.Close()
		}
		for i := range raceNames {
			name := fmt.Sprintf("r%d", i)
			g, err := Open(filepath.Join(work, name+".u64"), name)
			if err != nil {
				require.ErrorIs(t, err, ErrNameBound)
				fmt.Printf("RACE %s refused\n", name)
				continue
			}
			_, err = g.UniqueID()
			require.NoError(t, err)
			require.NoError(t, g.Close())
			fmt.Printf("RACE %s opened\n", name)
		}
	default:
		t.Fatal(errors.New("unknown expectation " + os.Getenv(envBindExpect)))
	}
}

// copyExecutable copies this test binary to dst, executable by everyone.
func copyExecutable(t *testing.T, dst string) {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	src, err := os.Open(self)
	require.NoError(t, err)
	defer src.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(out, src)
	require.NoError(t, err, fmt.Sprintf("copying %s", self))
	require.NoError(t, out.Close())
}

// A user bound a name in its own bindings directory (in its home from the
// password database) to a counter of its own and issued ids; root's first
// Open of that name with another counter must refuse it, naming the user,
// whichever of the two came first (root's bindings, host-wide, are read by
// the user). Once the user's counter is gone, root may use the name.
func TestBindingRootAfterUser(t *testing.T) {
	requireRoot(t)
	root, home := hostWithNobody(t, "snapid-rootafter-")

	zero := EncodeCounter(3) // the user issued vm-1..3
	require.NoError(t, os.WriteFile(filepath.Join(root, "zero"), zero[:], 0o644))
	userCounter := filepath.Join(home, "c.u64")
	names := filepath.Join(home, ".local", "state", "snapid", "names")
	testfs.AsOtherUser(t, "mkdir -p "+names+" && chmod 700 "+filepath.Join(home, ".local", "state", "snapid")+" "+names+
		" && cp "+filepath.Join(root, "zero")+" "+userCounter+
		" && printf 'snapid-binding 1\\n\"%s\"\\n' "+userCounter+" > "+filepath.Join(names, "vm"))

	rootCounter := filepath.Join(root, "rootc", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(rootCounter), 0o700))
	_, err := Open(rootCounter, "vm")
	require.ErrorIs(t, err, ErrNameBound, "root took a name a user of the host issues ids under")
	require.Contains(t, err.Error(), "nobody")
	_, serr := os.Stat(rootCounter)
	require.True(t, os.IsNotExist(serr), "the refused Open made the counter")

	require.NoError(t, os.Remove(userCounter))
	g, err := Open(rootCounter, "vm")
	require.NoError(t, err, "the user's counter is gone: the name is free")
	require.NoError(t, g.Close())
}

// raceNames is how many names TestBindingRootAndUserRace opens from each
// side.
const raceNames = 120

// Root and another user open the same names at the same moment, each with
// a counter of its own (as at boot): for no name may both sides issue
// ids. Each side checks the other's bindings again after recording its
// own, so at least one of the two sees the other whatever the order.
func TestBindingRootAndUserRace(t *testing.T) {
	requireRoot(t)
	root, shared, home, work, bin := raceWithNobody(t, "snapid-binding-race-")
	// Root's counters in a 0755 directory, as /var/lib/snapid is: the
	// user sees whether root's counter exists.
	mine := filepath.Join(root, "mine")
	require.NoError(t, os.Mkdir(mine, 0o755))

	cmd := exec.Command(bin, "-test.run", "^TestBindingFallbackForOtherUsers$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), envBindChild+"="+shared, envBindWork+"="+work, envBindExpect+"=race",
		"HOME="+home, "XDG_STATE_HOME=", "TMPDIR="+filepath.Join(work, "tmp"), "SNAPID_BINDING_DIR=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	rootOpened := map[string]bool{}
	for i := range raceNames {
		name := fmt.Sprintf("r%d", i)
		g, err := Open(filepath.Join(mine, name+".u64"), name)
		if err != nil {
			require.ErrorIs(t, err, ErrNameBound)
			continue
		}
		_, err = g.UniqueID()
		require.NoError(t, err)
		require.NoError(t, g.Close())
		rootOpened[name] = true
	}
	require.NoError(t, cmd.Wait(), "the child, as uid %d:\n%s", nobody, out.String())
	both, userOpened := 0, 0
	for _, line := range strings.Split(out.String(), "\n") {
		var name, how string
		if n, _ := fmt.Sscanf(line, "RACE %s %s", &name, &how); n == 2 && how == "opened" {
			userOpened++
			if rootOpened[name] {
				both++
				t.Errorf("root and uid %d both issued ids under %s", nobody, name)
			}
		}
	}
	t.Logf("%d names: root opened %d, the user %d, both %d", raceNames, len(rootOpened), userOpened, both)
}
