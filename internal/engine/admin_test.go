package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// `snapctl init --counter <dir of svc>/c.u64 --owner svc`, run as root,
// gives the counter to svc through the descriptor it checked and locked
// (fchown), never by path. The directory belongs to svc (the documented
// use: Init may make a counter in a service user's directory), so svc can
// rename the counter away and put a hard link to any file there
// (fs.protected_hardlinks=0: to a file of root's) while root holds the
// lock: root must not give that file to svc. Here svc holds its counter's
// lock so that root's init waits, lets it go, and swaps the path as soon
// as root holds the lock; the test needs a few swaps that land.
func TestInitOwnerGivesTheCheckedDescriptor(t *testing.T) {
	t.Parallel()
	skipShort(t)
	requireRoot(t)
	base := testfs.SharedTempDir(t, "snapid-chown-")
	bin := buildSnapctl(t, base)
	victim := filepath.Join(base, "victim")
	require.NoError(t, os.WriteFile(victim, []byte("root's secret\n"), 0o600))

	// nobody can make that hard link when fs.protected_hardlinks is 0.
	old, err := os.ReadFile("/proc/sys/fs/protected_hardlinks")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile("/proc/sys/fs/protected_hardlinks", []byte("0\n"), 0o644))
	t.Cleanup(func() { _ = os.WriteFile("/proc/sys/fs/protected_hardlinks", old, 0o644) })
	nb := filepath.Join(base, "nb")
	require.NoError(t, os.Mkdir(nb, 0o755))
	require.NoError(t, os.Chown(nb, nobody, nobody))
	testfs.AsOtherUser(t, "ln "+victim+" "+filepath.Join(nb, "proof")+" && rm "+filepath.Join(nb, "proof"))

	swaps := 0
	for attempt := 0; attempt < 60 && swaps < 3; attempt++ {
		svc := filepath.Join(base, fmt.Sprintf("svc%d", attempt))
		require.NoError(t, os.Mkdir(svc, 0o755))
		require.NoError(t, os.Chown(svc, nobody, nobody))
		counter := filepath.Join(svc, "c.u64")
		out, err := exec.Command(bin, "init", "--counter", counter, "--owner", strconv.Itoa(nobody)).CombinedOutput()
		require.NoError(t, err, "%s", out)

		// What svc does (its own counter, its own directory).
		f, err := os.OpenFile(counter, os.O_RDWR, 0)
		require.NoError(t, err)
		require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))
		cmd := exec.Command(bin, "init", "--counter", counter, "--start", "1000", "--owner", strconv.Itoa(nobody), "--timeout", "20s")
		cmd.Stdout, cmd.Stderr = nil, nil
		require.NoError(t, cmd.Start())
		time.Sleep(100 * time.Millisecond) // root waits for the lock
		require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_UN))
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
			if errors.Is(err, unix.EWOULDBLOCK) {
				// Root holds the lock: swap the path.
				if os.Rename(counter, counter+".old") == nil && os.Link(victim, counter) == nil {
					// Landed if root still holds the lock (it gives the
					// counter away under it).
					if errors.Is(unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB), unix.EWOULDBLOCK) {
						swaps++
					}
				}
				break
			}
			if err == nil {
				_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
			}
		}
		f.Close()
		_ = cmd.Wait()
		var st syscall.Stat_t
		require.NoError(t, syscall.Stat(victim, &st))
		if st.Uid == nobody {
			require.NoError(t, os.Chown(victim, 0, 0))
			t.Fatalf("attempt %d: root's snapctl init --owner gave %s (a file of root's, hard-linked at the counter's path by the directory's owner) to uid %d", attempt, victim, nobody)
		}
	}
	require.Positive(t, swaps, "the swap never landed while root held the lock in 60 attempts: the test proved nothing")
}

// buildSnapctl builds cmd/snapctl into dir.
func buildSnapctl(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "snapctl")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/snapid/snapid/cmd/snapctl").CombinedOutput()
	require.NoError(t, err, "go build ./cmd/snapctl:\n%s", out)
	return bin
}

// WithOwner gives the counter Init makes or raises (and Repair rewrites)
// to the user and group given; Open and ReadCounter refuse it, and ids
// out of range (or both left unchanged) are refused before anything is
// made.
func TestInitWithOwner(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "c.u64")
	tooLarge := int64(1)<<32 - 1 // "unchanged" to chown: names no one
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"Open", func() error { _, err := engine.Open(path, "vm", engine.WithOwner(1, 1)); return err }},
		{"ReadCounter", func() error { _, err := engine.ReadCounter(path, engine.WithOwner(1, 1)); return err }},
		{"both unchanged", func() error { _, err := engine.Init(path, 1, engine.WithOwner(-1, -1)); return err }},
		{"negative", func() error { _, err := engine.Init(path, 1, engine.WithOwner(-2, 0)); return err }},
		{"too large", func() error { _, err := engine.Init(path, 1, engine.WithOwner(int(tooLarge), 0)); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, tc.call(), engine.ErrInvalidOption)
			_, err := os.Lstat(path)
			require.ErrorIs(t, err, os.ErrNotExist, "a refused call made the counter")
		})
	}

	requireRoot(t)
	svc := filepath.Join(testfs.SharedTempDir(t, "snapid-withowner-"), "svc")
	require.NoError(t, os.Mkdir(svc, 0o755))
	require.NoError(t, os.Chown(svc, nobody, nobody))
	counter := filepath.Join(svc, "c.u64")
	_, err := engine.Init(counter, 5, engine.WithOwner(nobody, nobody))
	require.NoError(t, err)
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(counter, &st))
	require.Equal(t, uint32(nobody), st.Uid)
	require.Equal(t, uint32(nobody), st.Gid)
	_, err = engine.Repair(counter, 9, engine.WithOwner(-1, 0))
	require.NoError(t, err)
	require.NoError(t, syscall.Stat(counter, &st))
	require.Equal(t, uint32(nobody), st.Uid, "-1 leaves the user unchanged")
	require.Equal(t, uint32(0), st.Gid)
	v, err := engine.ReadCounter(counter)
	require.NoError(t, err)
	require.Equal(t, uint64(8), v)
}

func TestAdminCallsBoundedWhenCounterLocked(t *testing.T) {
	t.Parallel()
	counter := filepath.Join(lockDir(t), "c")
	_, err := engine.Init(counter, 10, engine.WithFileMode(0o644))
	require.NoError(t, err)
	testfs.HoldFlock(t, counter)
	ctx := context.Background()
	requireLockedWithin(t, 4*time.Second, func() error {
		c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := engine.ReadCounterContext(c, counter)
		return err
	})
	requireLockedWithin(t, 4*time.Second, func() error {
		c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := engine.InitContext(c, counter, 20)
		return err
	})
	requireLockedWithin(t, 4*time.Second, func() error {
		c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := engine.RepairContext(c, counter, 30)
		return err
	})
	// Nothing changed.
	b, err := os.ReadFile(counter)
	require.NoError(t, err)
	v, err := engine.DecodeCounter(b)
	require.NoError(t, err)
	require.Equal(t, uint64(9), v)
}

func TestRepairBoundedWhenGateLocked(t *testing.T) {
	t.Parallel()
	counter := filepath.Join(lockDir(t), "c")
	reg := registrytest.NewRegistry()
	g, err := engine.Open(counter, "vm", engine.WithRegistry(reg), engine.WithFileMode(0o644))
	require.NoError(t, err)
	require.NoError(t, g.Close())
	gate := counter + ".owner"
	if _, err := os.Stat(counter + ".presence"); err != nil {
		t.Skip("no presence file beside the counter")
	}
	require.NoError(t, os.Chmod(gate, 0o644))
	testfs.HoldFlock(t, gate)
	requireLockedWithin(t, 4*time.Second, func() error {
		c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := engine.RepairContext(c, counter, 30)
		return err
	})
}
