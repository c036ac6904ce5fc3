package hoststate

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A process that can only read a record can still hold a lock on it: the
// write lock is waited for no longer than the caller's context, and taken
// as soon as it is let go.
func TestWriteLockWaitsNoLongerThanItsContext(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "records")
	p, err := OpenPlace(dir, PlaceOptions{Create: true, Owners: own()})
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.Create(Record{Name: "vm1", Floor: 1}, Perm{Mode: 0o644, UID: -1, GID: -1}))
	h, err := p.OpenHandle("vm1")
	require.NoError(t, err)
	defer h.Close()

	reader, err := os.Open(filepath.Join(dir, "vm1"))
	require.NoError(t, err)
	defer reader.Close()
	rd := unix.Flock_t{Type: unix.F_RDLCK, Start: 0, Len: 1}
	require.NoError(t, unix.FcntlFlock(reader.Fd(), unix.F_OFD_SETLK, &rd))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = h.WriteLock(ctx)
	require.ErrorIs(t, err, context.Canceled)

	got := make(chan error, 1)
	go func() {
		unlock, err := h.WriteLock(context.Background())
		if err == nil {
			unlock()
		}
		got <- err
	}()
	un := unix.Flock_t{Type: unix.F_UNLCK, Start: 0, Len: 1}
	require.NoError(t, unix.FcntlFlock(reader.Fd(), unix.F_OFD_SETLK, &un))
	require.NoError(t, <-got)
}
