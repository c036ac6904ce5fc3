package engine

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Reservation waits for the counter's lock holding the Generator's mutex
// while another process holds the lock; Close, which takes that mutex,
// ends the wait (ErrClosed) instead of waiting for the other process.
func TestReservationWaitEndsAtClose(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "counter.u64")
	g, err := Open(path, "web_1", WithRegistry(registrytest.NewRegistry()))
	require.NoError(t, err)
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))

	reservation := make(chan error, 1)
	go func() {
		_, err := g.Reservation()
		reservation <- err
	}()
	// Until Reservation holds the mutex (it then waits for the lock).
	for g.mu.TryLock() {
		g.mu.Unlock()
		runtime.Gosched()
	}
	closed := make(chan error, 1)
	go func() { closed <- g.Close() }()
	// A correct run ends at once; the bound only reports a wait that
	// would last as long as the other process holds the lock.
	select {
	case err := <-reservation:
		require.ErrorIs(t, err, ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Reservation still waits for another process's lock after Close was called")
	}
	// Close, the host's last with a registry, returns the mark under the
	// lock: it has it once the other process lets go.
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_UN))
	require.NoError(t, <-closed)
}
