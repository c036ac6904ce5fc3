package snapid_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Review: `snapctl init --counter <dir of svc>/c.u64 --owner svc`, run as
// root, gives the counter to svc with os.Lchown(path) by path
// (cmd/snapctl/commands.go, chownCounter), after InitContext closed the
// descriptor it checked. The directory belongs to svc (the documented
// use: Init may make a counter in a service user's directory), so svc can
// rename the counter away and put a hard link to any file there in the
// meantime (fs.protected_hardlinks=0: to a file of root's): root then
// gives that file to svc. Here svc holds its counter's lock so that
// root's init waits, lets it go, and swaps the path as soon as root holds
// the lock.
func TestReviewInitOwnerChownsHardLinkedRootFile(t *testing.T) {
	requireRoot(t)
	base := testfs.SharedTempDir(t, "snapid-review-chown-")
	bin := reviewBuildSnapctl(t, base)
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

	for attempt := range 60 {
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
				_ = os.Rename(counter, counter+".old")
				_ = os.Link(victim, counter)
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
	t.Logf("the swap never landed between root's lock and its chown in 60 attempts")
}

// reviewBuildSnapctl builds cmd/snapctl into dir.
func reviewBuildSnapctl(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "snapctl")
	out, err := exec.Command("go", "build", "-o", bin, "./cmd/snapctl").CombinedOutput()
	require.NoError(t, err, "go build ./cmd/snapctl:\n%s", out)
	return bin
}
