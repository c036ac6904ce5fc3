package engine_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// callWithin runs fn in a goroutine and returns its result, or fails the
// test if fn has not returned after a generous guard: a call that ignores
// its context would otherwise hang until what it waits for is let go.
func callWithin(t *testing.T, fn func() (uint64, error)) (uint64, error) {
	t.Helper()
	type result struct {
		n   uint64
		err error
	}
	ch := make(chan result, 1)
	go func() {
		n, err := fn()
		ch <- result{n, err}
	}()
	select {
	case r := <-ch:
		return r.n, r.err
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not return when its context ended: it waited for the counter update")
		return 0, nil
	}
}

// A caller whose context ends while its counter update waits (here for
// the counter's lock, held by another process) returns the context's
// error at once; the update goes on for the callers that share it, and a
// number reserved for the caller that left is never handed out.
func TestNextContextLeavesWhileUpdateWaits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []Option
		call func(g *Generator, ctx context.Context) (uint64, error)
		// a number drawn without a context before the counter is locked
		warm bool
	}{
		{"strict NextContext", nil, (*Generator).NextContext, false},
		{"strict NextNContext", nil, func(g *Generator, ctx context.Context) (uint64, error) { return g.NextNContext(ctx, 3) }, false},
		{"strict UniqueIDContext", nil, func(g *Generator, ctx context.Context) (uint64, error) {
			id, err := g.UniqueIDContext(ctx)
			if err != nil {
				return 0, err
			}
			p, err := ParseID(id)
			return p.Number, err
		}, false},
		{"block refill", []Option{WithBlock(4)}, (*Generator).NextContext, true},
		{"cpu shards refill", []Option{WithBlock(4), WithCPUShards(true)}, (*Generator).NextContext, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "counter.u64")
			g, err := Open(path, "web", tc.opts...)
			require.NoError(t, err)
			t.Cleanup(func() { g.Close() }) // after the lock is let go, even on failure
			seen := map[uint64]bool{}
			drawSeen := func(k int) {
				for range k {
					n, err := g.Next()
					require.NoError(t, err)
					seen[n] = true
				}
			}
			var unlock func()
			if tc.warm {
				// Blocks of 4: 1..4, then 5..8 reserved ahead. Lock the
				// counter before the middle of 5..8 starts reserving 9..12
				// and use 5..8 up, so that the next call must wait.
				drawSeen(6)
				unlock = lockCounterExternally(t, path)
				drawSeen(2)
			} else {
				unlock = lockCounterExternally(t, path)
			}
			t.Cleanup(unlock)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err = callWithin(t, func() (uint64, error) { return tc.call(g, ctx) })
			require.ErrorIs(t, err, context.DeadlineExceeded)
			unlock()
			for range 8 {
				n, err := g.Next()
				require.NoError(t, err)
				require.False(t, seen[n], "number %d handed out twice", n)
				seen[n] = true
			}
		})
	}
}

// A member of a group whose leader waits leaves when its own context ends;
// the leader, without a deadline, gets its number once the update lands,
// and the number reserved for the member who left is a gap.
func TestNextContextMemberLeavesGroup(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "counter.u64")
	g, err := Open(path, "web")
	require.NoError(t, err)
	t.Cleanup(func() { g.Close() })
	unlock := lockCounterExternally(t, path)
	t.Cleanup(unlock)
	leader := make(chan uint64, 1)
	go func() {
		n, err := g.Next() // leads the update, waiting for the lock
		if err != nil {
			n = 0
		}
		leader <- n
	}()
	for g.ExportOpenGroupSize() != 0 || len(leader) != 0 {
		time.Sleep(time.Millisecond) // until the leader has closed its group
	}
	time.Sleep(20 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = callWithin(t, func() (uint64, error) { return g.NextContext(ctx) })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	unlock()
	assert.Equal(t, uint64(1), <-leader)
	n, err := g.Next()
	require.NoError(t, err)
	assert.Equal(t, uint64(2), n, "the caller who left, alone in its group, took nothing")
}

// A context that has already ended reserves nothing.
func TestNextContextEndedReservesNothing(t *testing.T) {
	t.Parallel()
	for _, opts := range [][]Option{nil, {WithBlock(4)}} {
		path := filepath.Join(t.TempDir(), "counter.u64")
		// Two unrelated counters under one name: each its own host.
		g, err := Open(path, "web", append(slices.Clip(opts), WithBindingDir(t.TempDir()))...)
		require.NoError(t, err)
		ctx, cancel := context.WithCancelCause(context.Background())
		cause := errors.New("the client went away")
		cancel(cause)
		_, err = g.NextContext(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, err, cause, "the cause is kept")
		_, err = g.NextNContext(ctx, 2)
		require.ErrorIs(t, err, context.Canceled)
		_, err = g.UniqueIDContext(ctx)
		require.ErrorIs(t, err, context.Canceled)
		_, err = g.NextIDContext(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, g.NextIDsContext(ctx, 3, func(ID) { t.Error("an id was handed out") }), context.Canceled)
		require.NoError(t, g.Close())
		assert.Equal(t, uint64(0), ctValue(t, path), "nothing was reserved")
	}
}

// freezeExtensions holds every extension of reg's marks until the
// returned channel is closed (or the extension's context ends).
func freezeExtensions(reg *registrytest.Registry) chan struct{} {
	thaw := make(chan struct{})
	reg.SetHook(func(ctx context.Context, op, _ string) error {
		if op != "extend" {
			return nil
		}
		select {
		case <-thaw:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	return thaw
}

// With the registry frozen, a caller that needs the reserved mark
// extended waits only as long as its context allows, not the registry's
// timeout; the extension goes on, and once the registry answers ids flow
// again without a repeat.
func TestUniqueIDContextWhileRegistryFrozen(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	g := openReg(t, path, "web_1", reg, WithReserveStep(10), WithOutageHorizon(0), WithRegistryTimeout(time.Minute))
	defer g.Close()
	thaw := freezeExtensions(reg)
	first := draw(t, g, 10) // 1..10: the whole first step; its extension is held
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := callWithin(t, func() (uint64, error) {
		id, err := g.UniqueIDContext(ctx)
		if err != nil {
			return 0, err
		}
		p, err := ParseID(id)
		return p.Number, err
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(thaw)
	reg.SetHook(nil)
	more := draw(t, g, 3)
	for _, n := range more {
		assert.Greater(t, n, first[len(first)-1])
	}
}

// The same in the decimal form, whose NextIDsContext takes its ids with
// an update of its own, not through the group commit: a caller that needs
// the mark extended while an extension waits for the frozen registry
// leaves when its context ends, and takes nothing.
func TestDecimalNextIDsContextWhileRegistryFrozen(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	g := openReg(t, path, "web_1", reg, WithFormat(FormatDecimal), WithReserveStep(10), WithOutageHorizon(0), WithRegistryTimeout(time.Minute))
	defer g.Close()
	thaw := freezeExtensions(reg)
	// Ids until the first step is used up (its extension is held): the
	// first call that needs the mark extended leaves at its deadline.
	var last ID
	for i := 0; ; i++ {
		require.Less(t, i, 20, "the reserved step never ran out")
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := callWithin(t, func() (uint64, error) {
			return 0, g.NextIDsContext(ctx, 1, func(id ID) { last = id })
		})
		cancel()
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded)
			break
		}
	}
	close(thaw)
	reg.SetHook(nil)
	var next ID
	require.NoError(t, g.NextIDs(1, func(id ID) { next = id }))
	assert.Greater(t, next.Number, last.Number)
}

// A lone caller that leaves while its update waits for the counter's lock
// (held by another process) takes nothing once the lock is free: the
// counter is unchanged and the next number is the one it would have had.
// The same holds when every member of a group has left.
func TestNextNContextLeftTakesNothing(t *testing.T) {
	for _, callers := range []int{1, 3} {
		t.Run(strconv.Itoa(callers), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "counter.u64")
			g, err := Open(path, "web")
			require.NoError(t, err)
			t.Cleanup(func() { g.Close() })
			first, err := g.Next()
			require.NoError(t, err)
			require.Equal(t, uint64(1), first)
			unlock := lockCounterExternally(t, path)
			ctx, cancel := context.WithCancel(context.Background())
			errs := make(chan error, callers)
			for range callers {
				go func() {
					_, err := g.NextNContext(ctx, 1_000_000)
					errs <- err
				}()
			}
			waitUpdateInFlight(g) // the leader waits for the counter's lock
			for g.ExportOpenGroupSize() != uint64(callers-1)*1_000_000 {
				time.Sleep(time.Millisecond) // the others join the next group
			}
			time.Sleep(20 * time.Millisecond)
			cancel()
			for range callers {
				select {
				case err := <-errs:
					require.ErrorIs(t, err, context.Canceled)
				case <-time.After(10 * time.Second):
					t.Fatal("a caller did not leave when its context ended")
				}
			}
			unlock()
			// Until the groups of those who left are done (a caller joining
			// one that waits would keep it alive).
			for g.ExportOpenGroupSize() != 0 || g.ExportUpdateInFlight() {
				time.Sleep(time.Millisecond)
			}
			n, err := g.Next()
			require.NoError(t, err)
			assert.Equal(t, uint64(2), n, "callers that left took no number")
			assert.Equal(t, uint64(2), ctValue(t, path), "the counter moved only for the call that stayed")
		})
	}
}

// The calls that issue ids allocate no more than the id they return: in
// strict mode one caller's Next allocates nothing and its UniqueID only
// the string; in block mode the same. (Counted with testing.AllocsPerRun,
// which runs the call many times and averages.)
func TestIssuingAllocatesOnlyTheID(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"strict", []Option{WithSync(false)}},
		{"block", []Option{WithBlock(1 << 16)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := Open(filepath.Join(t.TempDir(), "counter"), "server_a", tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if _, err := g.Next(); err != nil { // warm up
				t.Fatal(err)
			}
			var callErr error
			next := testing.AllocsPerRun(200, func() {
				if _, err := g.Next(); err != nil {
					callErr = err
				}
			})
			id := testing.AllocsPerRun(200, func() {
				if _, err := g.UniqueID(); err != nil {
					callErr = err
				}
			})
			if callErr != nil {
				t.Fatal(callErr)
			}
			if next != 0 {
				t.Errorf("Next allocates %v times per call, want 0", next)
			}
			if id != 1 {
				t.Errorf("UniqueID allocates %v times per call, want 1 (the string)", id)
			}
		})
	}
}

// A Generator reads the time from its own clock only: on a fake clock set
// years from now, the registry statistics, the heartbeat's record and the
// refreshes follow the fake clock, and nothing moves while it stands
// still (no wall-clock timer, ticker or deadline drives it).
func TestGeneratorClockIsTheOnlyTime(t *testing.T) {
	t.Parallel()
	skipShort(t)
	const interval = 10 * time.Second
	reg := registrytest.NewRegistry()
	fh := newFakeHost(t, nil)
	_, path := ctPath(t)
	g := fh.open(path, "web_1", reg, WithHeartbeat(interval), WithCloneWindow(0), WithRegistryTimeout(time.Second))
	defer fh.close(g)
	calls := logCalls(reg)

	// Standing still for longer than the heartbeat and the registry
	// timeout of real time: no refresh.
	fh.settle()
	time.Sleep(2 * time.Second)
	assert.Zero(t, calls.count("touch"), "a refresh sent while the Generator's clock stood still")

	fh.until(interval/4, 8, func() bool { return calls.count("touch") > 0 }, "no refresh once the clock moved an interval")
	st := g.Stats()
	require.NotNil(t, st.Registry)
	for what, at := range map[string]time.Time{
		"last contact":     st.Registry.LastContact,
		"last heartbeat":   st.Registry.LastHeartbeat,
		"heartbeat record": g.ExportLastHostHeartbeat(),
	} {
		assert.False(t, at.Before(fakeStart) || at.After(fh.clk.Now()), "%s at %v: not on the Generator's clock (%v to %v)", what, at, fakeStart, fh.clk.Now())
	}
}

// Closing on a fake clock lets a registry call Close makes finish however
// long the machine takes to run it: the clock does not move past the
// call's deadline while it is in flight (a call that hangs is timed out
// only after the helper's grace).
func TestCloseOnTheFakeClockLetsACallInFlightFinish(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	fh := newFakeHost(t, reg)
	_, path := ctPath(t)
	g := fh.open(path, "web_1", reg, WithRegistryTimeout(time.Second), WithCloneWindow(0))
	draw(t, g, 3)
	reg.SetHook(func(ctx context.Context, op, _ string) error {
		time.Sleep(20 * time.Millisecond) // a busy machine: the call runs late
		return ctx.Err()
	})
	fh.close(g) // fails the test if Close's calls were timed out
}

func TestCloseBoundedWhenCounterLocked(t *testing.T) {
	t.Parallel()
	skipShort(t)
	counter := filepath.Join(lockDir(t), "c")
	reg := registrytest.NewRegistry()
	g, err := Open(counter, "vm", WithRegistry(reg), WithFileMode(0o644), WithRegistryTimeout(time.Second))
	require.NoError(t, err)
	_, err = g.Next()
	require.NoError(t, err)
	testfs.HoldFlock(t, counter)
	requireLockedWithin(t, 4*time.Second, g.Close)
}

// A caller without a context waits while the lock is held, but Close
// ends its wait: the call returns ErrClosed, and Close returns.
func TestCloseEndsUpdateWaitingForLock(t *testing.T) {
	t.Parallel()
	counter := filepath.Join(lockDir(t), "c")
	g, err := Open(counter, "hangtest", WithFileMode(0o644), WithBindingDir(filepath.Join(t.TempDir(), "names")))
	require.NoError(t, err)
	testfs.HoldFlock(t, counter)
	got := make(chan error, 1)
	go func() { _, err := g.Next(); got <- err }()
	time.Sleep(100 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- g.Close() }()
	select {
	case err := <-got:
		require.ErrorIs(t, err, ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("Next still waits after Close")
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close still waits")
	}
}
