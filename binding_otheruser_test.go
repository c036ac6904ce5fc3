package snapid_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The other user's moves against name bindings (see docs/security.md),
// each played by a child of the test binary running as uid 65534. The
// child runs TestBindingAttacks with envAttackStep naming its move; the
// parent, root, checks what the move could and could not do.
const (
	envAttackStep   = "SNAPID_TEST_ATTACK_STEP"
	envAttackShared = "SNAPID_TEST_ATTACK_SHARED" // the host-wide directory
	envAttackWork   = "SNAPID_TEST_ATTACK_WORK"   // a directory of the other user's
)

// attackHost is a host for TestBindingAttacks: a host-wide directory of
// root's, a home and a work directory of the other user's, the test
// binary where the other user can run it.
type attackHost struct {
	root, shared, home, work, bin string
}

func newAttackHost(t *testing.T) *attackHost {
	t.Helper()
	requireRoot(t)
	root, err := os.MkdirTemp("", "snapid-attack-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	require.NoError(t, os.Chmod(root, 0o755))
	h := &attackHost{root: root, shared: filepath.Join(root, "lib", "names"),
		home: filepath.Join(root, "home"), work: filepath.Join(root, "work"), bin: filepath.Join(root, "snapid.test")}
	for _, d := range []string{h.home, h.work, filepath.Join(h.work, "tmp")} {
		require.NoError(t, os.Mkdir(d, 0o755))
		require.NoError(t, os.Chown(d, nobody, nobody))
	}
	copyExecutable(t, h.bin)
	ExportBindingDefaults(t, h.shared)
	return h
}

// child runs step as the other user and returns a function that waits
// for it (failing the test unless the step passed).
func (h *attackHost) child(t *testing.T, step string) (wait func()) {
	t.Helper()
	cmd := exec.Command(h.bin, "-test.run", "^TestBindingAttacks$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), envAttackStep+"="+step, envAttackShared+"="+h.shared, envAttackWork+"="+h.work,
		"HOME="+h.home, "XDG_STATE_HOME=", "TMPDIR="+filepath.Join(h.work, "tmp"), "SNAPID_BINDING_DIR=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	return func() {
		t.Helper()
		err := cmd.Wait()
		require.NoError(t, err, "the child (%s), as uid %d:\n%s", step, nobody, out.String())
		require.Contains(t, out.String(), "--- PASS: TestBindingAttacks")
	}
}

// run runs step as the other user to its end.
func (h *attackHost) run(t *testing.T, step string) {
	t.Helper()
	h.child(t, step)()
}

// rootOpen opens counter under name as root and closes it.
func rootOpen(t *testing.T, counter, name string) {
	t.Helper()
	g, err := Open(counter, name)
	require.NoError(t, err)
	require.NoError(t, g.Close())
}

func TestBindingAttacks(t *testing.T) {
	if step := os.Getenv(envAttackStep); step != "" {
		attackChild(t, step)
		return
	}
	// 1 and 5: the other user cannot write, replace or remove a binding
	// root reads, so it can neither make root's second counter under a
	// name look bound to the first nor bind a name root has not bound.
	t.Run("1 and 5: no binding root reads can be planted or removed", func(t *testing.T) {
		h := newAttackHost(t)
		first := filepath.Join(h.root, "vm.u64")
		rootOpen(t, first, "vm")
		h.run(t, "plant")
		requireBinding(t, h.shared, "vm", first)
		_, err := os.Lstat(filepath.Join(h.shared, "web"))
		require.ErrorIs(t, err, os.ErrNotExist, "nothing the other user made")
		rootOpen(t, filepath.Join(h.root, "web.u64"), "web") // not refused
		_, err = Open(filepath.Join(h.root, "vm2.u64"), "vm")
		require.ErrorIs(t, err, ErrNameBound, "root's binding of vm stays")
	})
	// 2: a user's own bindings count even where the host-wide directory
	// exists, is readable, or is still world-writable.
	t.Run("2: a user's own bindings always count", func(t *testing.T) {
		h := newAttackHost(t)
		rootOpen(t, filepath.Join(h.root, "db.u64"), "db")
		h.run(t, "own")
		require.NoError(t, os.Chmod(h.shared, os.ModeSticky|0o777)) // as an earlier version left it
		h.run(t, "own-again")
	})
	// 3: a FIFO with a writer held open, in the user's own directory or
	// (planted under an earlier version) in the host-wide one, never
	// blocks an Open.
	t.Run("3: a FIFO binding never blocks", func(t *testing.T) {
		h := newAttackHost(t)
		rootOpen(t, filepath.Join(h.root, "db.u64"), "db")
		require.NoError(t, os.Chmod(h.shared, os.ModeSticky|0o777)) // an earlier version's directory
		wait := h.child(t, "fifo")                                  // plants fifos, holds writers, checks its own Open
		waitFile(t, filepath.Join(h.work, "fifo-ready"))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		g, err := OpenContext(ctx, filepath.Join(h.root, "vm.u64"), "vm")
		require.NoError(t, err, "another user's FIFO is not root's binding: ignored and replaced")
		require.NoError(t, g.Close())
		assert.Less(t, time.Since(start), 2*time.Second)
		requireBinding(t, h.shared, "vm", filepath.Join(h.root, "vm.u64"))
		require.NoError(t, os.WriteFile(filepath.Join(h.work, "fifo-done"), nil, 0o644))
		wait()
	})
	// 4: the other user cannot open the bindings' lock; flocking the
	// directory (which it can read) or the counter (which it can read)
	// holds root's Open at most as long as its context, with an error
	// naming the holder.
	t.Run("4: no lock of another user holds a start past its context", func(t *testing.T) {
		h := newAttackHost(t)
		counter := filepath.Join(h.root, "vm.u64")
		rootOpen(t, counter, "vm")
		require.NoError(t, os.Chmod(counter, 0o644))
		wait := h.child(t, "lock")
		waitFile(t, filepath.Join(h.work, "lock-ready"))
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := OpenContext(ctx, counter, "vm")
		assert.Less(t, time.Since(start), 3*time.Second, "the context's deadline holds")
		require.ErrorIs(t, err, ErrLocked, "the counter is flocked by the other user")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "user nobody", "the holder is named")
		// The binding directory's flock held by the other user blocks
		// nothing: another name opens at once.
		rootOpen(t, filepath.Join(h.root, "web.u64"), "web")
		require.NoError(t, os.WriteFile(filepath.Join(h.work, "lock-done"), nil, 0o644))
		wait()

		// Root's own lock held (another Open in the middle of binding):
		// bounded by the context too.
		lf, err := os.OpenFile(filepath.Join(h.shared, ".lock"), os.O_RDWR, 0)
		require.NoError(t, err)
		defer lf.Close()
		require.NoError(t, unix.Flock(int(lf.Fd()), unix.LOCK_EX))
		ctx2, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel2()
		_, err = OpenContext(ctx2, filepath.Join(h.root, "db.u64"), "db")
		require.ErrorIs(t, err, ErrLocked)
		assert.Contains(t, err.Error(), "pid ")
	})
	// 6: the user owning a level above the host-wide directory replaces
	// it with a symbolic link: root follows nothing and writes nothing
	// there.
	t.Run("6: a level replaced by a link is refused", func(t *testing.T) {
		h := newAttackHost(t)
		rootOpen(t, filepath.Join(h.root, "db.u64"), "db")
		require.NoError(t, os.Chown(filepath.Dir(h.shared), nobody, nobody)) // the service user owns lib
		h.run(t, "symlink")
		_, err := Open(filepath.Join(h.root, "vm.u64"), "vm")
		require.ErrorIs(t, err, ErrUntrustedDir)
		assert.Contains(t, err.Error(), "nobody", "the owner is named")
		ents, err := os.ReadDir(filepath.Join(h.work, "target"))
		require.NoError(t, err)
		assert.Empty(t, ents, "nothing written where the link points")
		// With lib root's again, the link itself is refused.
		require.NoError(t, os.Chown(filepath.Dir(h.shared), 0, 0))
		_, err = Open(filepath.Join(h.root, "vm.u64"), "vm")
		require.ErrorIs(t, err, ErrUntrustedDir)
		assert.Contains(t, err.Error(), "symbolic link")
		ents, err = os.ReadDir(filepath.Join(h.work, "target"))
		require.NoError(t, err)
		assert.Empty(t, ents)
	})
	// 7: every new level of the other user's own directory is synced
	// into its parent before the next is made (as root's host-wide one
	// is: TestBindingHostWideDurable).
	t.Run("7: the user's binding directory is durable level by level", func(t *testing.T) {
		h := newAttackHost(t)
		h.run(t, "durable")
	})
}

// attackChild is the other user's side of TestBindingAttacks.
func attackChild(t *testing.T, step string) {
	require.NotEqual(t, 0, os.Geteuid(), "the child runs as another user")
	shared, work := os.Getenv(envAttackShared), os.Getenv(envAttackWork)
	ExportBindingDefaults(t, shared)
	own := filepath.Join(os.Getenv("HOME"), ".local", "state", "snapid", "names")
	switch step {
	case "plant":
		mine := filepath.Join(work, "mine.u64")
		for _, name := range []string{"vm", "web", ".lock"} {
			err := os.WriteFile(filepath.Join(shared, name), []byte(bindingFor(mine)), 0o644)
			assert.ErrorIs(t, err, os.ErrPermission, name)
			err = os.Symlink(mine, filepath.Join(shared, name))
			assert.True(t, errors.Is(err, os.ErrPermission) || errors.Is(err, os.ErrExist), "%v", err)
		}
		assert.ErrorIs(t, os.Remove(filepath.Join(shared, "vm")), os.ErrPermission)
		assert.ErrorIs(t, os.Rename(filepath.Join(shared, "vm"), filepath.Join(shared, "vm.old")), os.ErrPermission)
	case "own":
		first := filepath.Join(work, "first.u64")
		g, err := Open(first, "vm")
		require.NoError(t, err)
		require.NoError(t, g.Close())
		requireBinding(t, own, "vm", first)
		_, err = Open(filepath.Join(work, "second.u64"), "vm")
		require.ErrorIs(t, err, ErrNameBound, "the user's own binding refuses its second counter")
	case "own-again":
		// The host-wide directory is writable now: the user's own
		// binding still counts.
		_, err := Open(filepath.Join(work, "third.u64"), "vm")
		require.ErrorIs(t, err, ErrNameBound, "the user's own binding refuses its second counter")
	case "fifo":
		require.NoError(t, os.MkdirAll(own, 0o700))
		var writers []*os.File
		for _, p := range []string{filepath.Join(own, "vm"), filepath.Join(shared, "vm")} {
			require.NoError(t, unix.Mkfifo(p, 0o644))
			w, err := os.OpenFile(p, os.O_RDWR, 0)
			require.NoError(t, err)
			writers = append(writers, w)
		}
		defer func() {
			for _, w := range writers {
				w.Close()
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		_, err := OpenContext(ctx, filepath.Join(work, "vm.u64"), "vm")
		require.ErrorIs(t, err, ErrCorruptBinding, "a FIFO in the user's own directory is refused")
		assert.Contains(t, err.Error(), "FIFO")
		assert.Less(t, time.Since(start), 2*time.Second)
		require.NoError(t, os.WriteFile(filepath.Join(work, "fifo-ready"), nil, 0o644))
		waitFile(t, filepath.Join(work, "fifo-done"))
	case "lock":
		_, err := os.OpenFile(filepath.Join(shared, ".lock"), os.O_RDONLY, 0)
		require.ErrorIs(t, err, os.ErrPermission, "the bindings' lock is root's alone")
		d, err := os.Open(shared)
		require.NoError(t, err)
		defer d.Close()
		require.NoError(t, unix.Flock(int(d.Fd()), unix.LOCK_EX), "the directory can be flocked: it must block nothing")
		c, err := os.Open(filepath.Join(filepath.Dir(filepath.Dir(shared)), "vm.u64"))
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, unix.Flock(int(c.Fd()), unix.LOCK_SH))
		require.NoError(t, os.WriteFile(filepath.Join(work, "lock-ready"), nil, 0o644))
		waitFile(t, filepath.Join(work, "lock-done"))
	case "symlink":
		target := filepath.Join(work, "target")
		require.NoError(t, os.Mkdir(target, 0o777))
		require.NoError(t, os.Chmod(target, 0o777))
		require.NoError(t, os.Rename(shared, shared+".old"))
		require.NoError(t, os.Symlink(target, shared))
	case "durable":
		rec := &syncRecorder{}
		counter := filepath.Join(work, "vm.u64")
		g, err := Open(counter, "vm", ExportWithFS(rec))
		require.NoError(t, err)
		require.NoError(t, g.Close())
		requireBinding(t, own, "vm", counter)
		home := os.Getenv("HOME")
		want := []string{home, filepath.Join(home, ".local"), filepath.Join(home, ".local", "state"),
			filepath.Join(home, ".local", "state", "snapid"), own}
		var got []string
		for _, d := range rec.dirs {
			if strings.HasPrefix(d, home) && !slicesContains(got, filepath.Clean(d)) {
				got = append(got, filepath.Clean(d))
			}
		}
		require.GreaterOrEqual(t, len(got), len(want), "%v", rec.dirs)
		assert.Equal(t, want, got[:len(want)], "each new level synced into its parent, in order, then the binding's directory")
		for _, d := range want[1:] {
			st, err := os.Stat(d)
			require.NoError(t, err)
			assert.Equal(t, os.ModeDir|0o700, st.Mode(), d)
		}
	default:
		t.Fatal(errors.New("unknown step " + step))
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// waitFile waits (up to 20 s) until path exists.
func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s did not appear", path)
}
