package engine

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// waitingForFileMutex reports whether a goroutine waits for a
// Generator's file mutex.
func waitingForFileMutex() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "(*Mutex).Lock")
}

// A decimal NextIDsContext whose context ends while another call's
// counter update holds the Generator's mutex (waiting for another
// process's lock on the counter) stops waiting and takes nothing.
func TestDecimalNextIDsContextEndsWhileTheMutexIsHeld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "counter.u64")
	g, err := Open(path, "web_1", WithFormat(FormatDecimal), WithNodeNumber(123))
	require.NoError(t, err)
	defer g.Close()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))

	first := make(chan ID, 1)
	firstErr := make(chan error, 1)
	go func() {
		var got ID
		firstErr <- g.NextIDs(1, func(id ID) { got = id })
		first <- got
	}()
	// Until that call holds the mutex (it then waits for the lock).
	for g.mu.TryLock() {
		g.mu.Unlock()
		runtime.Gosched()
	}
	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan error, 1)
	go func() {
		second <- g.NextIDsContext(ctx, 1, func(ID) {})
	}()
	for !waitingForFileMutex() {
		runtime.Gosched()
	}
	cancel()
	// A correct run ends at once; the bound only reports a wait that
	// would last as long as the other process holds the lock.
	select {
	case err := <-second:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		t.Fatal("NextIDsContext still waits for the Generator's mutex after its context ended")
	}

	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_UN))
	require.NoError(t, <-firstErr)
	a := <-first
	var b ID
	require.NoError(t, g.NextIDs(1, func(id ID) { b = id }))
	// The ended call took nothing: the next id follows the first.
	require.Equal(t, a.Number+1, b.Number, "%s then %s", a, b)
}
