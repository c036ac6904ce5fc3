package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
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

// callerWaitsForFileMutex reports whether a goroutine inside a call to
// fn (a function's name as stack traces print it) waits for a
// Generator's file mutex.
func callerWaitsForFileMutex(fn string) bool {
	buf := make([]byte, 1<<20)
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "(*Mutex).Lock") && strings.Contains(g, fn) {
			return true
		}
	}
	return false
}

// A decimal NextIDsContext whose own extension was granted adopts the new
// mark under the Generator's mutex; when another call holds the mutex
// meanwhile (waiting for another process's lock on the counter), the
// caller whose context ends stops waiting for it, as it does for the
// update itself.
func TestDecimalExtensionEndsWithTheContextWhileTheMutexIsHeld(t *testing.T) {
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	g, err := Open(path, "web_1", WithRegistry(reg), WithFormat(FormatDecimal), WithReserveStep(10), WithOutageHorizon(0),
		WithRegistryTimeout(time.Minute), WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"}))
	require.NoError(t, err)
	defer g.Close()

	var phase atomic.Int32 // 0: extensions pass; 1: they fail; 2: the next one waits for resume
	entered, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	reg.SetHook(func(ctx context.Context, op, _ string) error {
		if op != "extend" {
			return nil
		}
		switch phase.Load() {
		case 1:
			return fmt.Errorf("%w: extend refused by the test", registry.ErrRegistry)
		case 2:
			first := false
			once.Do(func() { first = true; close(entered) })
			if first {
				<-resume
			}
		}
		return nil
	})
	phase.Store(1)
	for i := 0; ; i++ { // the reserved step used up: the mark cannot move
		require.Less(t, i, 30, "the reserved step never ran out")
		if g.NextIDs(1, func(ID) {}) != nil {
			break
		}
	}
	phase.Store(2)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := make(chan error, 1)
	go func() { a <- g.NextIDsContext(ctx, 1, func(ID) {}) }()
	<-entered // its extension waits in the registry

	f, err := os.Open(path) // another process holds the counter's lock
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))
	b := make(chan error, 1)
	go func() { b <- g.NextIDs(1, func(ID) {}) }()
	for g.mu.TryLock() { // until that call holds the mutex, waiting for the lock
		g.mu.Unlock()
		runtime.Gosched()
	}
	close(resume) // the extension is granted: the caller adopts it next
	for !callerWaitsForFileMutex("NextIDsContext") {
		runtime.Gosched()
	}
	cancel()
	// A correct run ends at once; the bound only reports a wait that
	// would last as long as the other process holds the lock.
	select {
	case err := <-a:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		<-a
		t.Fatal("NextIDsContext still waits for the Generator's mutex after its context ended")
	}
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_UN))
	require.NoError(t, <-b)
}
