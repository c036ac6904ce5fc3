package snapid_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// failOrStallTouchReg makes one process's (Generator's) heartbeat calls
// fail or stall on demand; the others reach the registry.
type failOrStallTouchReg struct {
	registry.Registry
	mode atomic.Int32 // 0 pass, 1 fail, 2 stall until the call's deadline
}

func (r *failOrStallTouchReg) Touch(ctx context.Context, name, owner, session string) error {
	switch r.mode.Load() {
	case 1:
		return errors.New("connection refused")
	case 2:
		<-ctx.Done()
		return ctx.Err()
	}
	return r.Registry.Touch(ctx, name, owner, session)
}

// At the smallest clone window Open accepts (twice the heartbeat plus the
// timeout), the registry's last-seen of a host whose heartbeat holder
// fails alone, or stalls in every call, is never older than the window:
// another process takes over the refreshes. Three Generators on one
// counter (each its own descriptor of .heartbeat, as three processes), on
// one fake clock with the registry; the holder's calls fail or stall from
// some point on; last-seen is sampled in the registry at every eighth of
// the heartbeat.
func TestHeartbeatSmallestCloneWindow(t *testing.T) {
	const hb, to = 800 * time.Millisecond, 200 * time.Millisecond
	const window = 2*hb + to
	for _, mode := range []int32{1, 2} {
		t.Run(map[int32]string{1: "holder fails alone", 2: "holder stalls"}[mode], func(t *testing.T) {
			reg := registrytest.NewRegistry()
			fh := newFakeHost(t, reg)
			_, path := ctPath(t)
			var wraps []*failOrStallTouchReg
			var gens []*Generator
			for range 3 {
				w := &failOrStallTouchReg{Registry: reg}
				g := fh.open(path, "vm", w, WithHeartbeat(hb), WithRegistryTimeout(to), WithCloneWindow(window))
				wraps, gens = append(wraps, w), append(gens, g)
			}
			defer func() {
				for _, g := range gens {
					fh.close(g)
				}
			}()
			holder := -1
			fh.until(hb/4, 16, func() bool {
				for i, g := range gens {
					if g.ExportHeartbeatHolder() {
						holder = i
					}
				}
				return holder >= 0
			}, "no process took the heartbeat role")
			wraps[holder].mode.Store(mode)
			var stalled []*Generator
			if mode == 2 {
				stalled = append(stalled, gens[holder])
			}
			var worst time.Duration
			fh.run(6*hb, hb/8, func() bool {
				h, err := reg.Get(context.Background(), "vm")
				require.NoError(t, err)
				worst = max(worst, fh.clk.Now().Sub(h.LastSeen))
				return false
			}, stalled...)
			t.Logf("oldest last-seen seen: %v (window %v)", worst, window)
			require.Less(t, worst, window, "last-seen older than the smallest clone window: a clone could take the live host's name")
		})
	}
}

// stallTouchReg is one process's view of a shared registry whose Touch the
// test can make stall (a process stopped mid-refresh: it neither sends
// nor gives up) or fail at once (this process's connection is broken).
type stallTouchReg struct {
	*registrytest.Registry
	mode    atomic.Int32 // 0 normal, 1 stall, 2 fail
	release chan struct{}
	stalled chan struct{}
	once    sync.Once
}

func newStallTouchReg(reg *registrytest.Registry) *stallTouchReg {
	return &stallTouchReg{Registry: reg, release: make(chan struct{}), stalled: make(chan struct{})}
}

func (r *stallTouchReg) Touch(ctx context.Context, name, owner, session string) error {
	switch r.mode.Load() {
	case 1:
		r.once.Do(func() { close(r.stalled) })
		<-r.release
		return fmt.Errorf("%w: stopped", ErrRegistry)
	case 2:
		return fmt.Errorf("%w: this process's connection is broken", ErrRegistry)
	}
	return r.Registry.Touch(ctx, name, owner, session)
}

// The holder stops (SIGSTOP) after writing "tried" and before its refresh
// reaches the registry: another process of the host refreshes in time, so
// last-seen stays within the clone window (2 intervals + timeout) and a
// clone's claim is refused while the host runs. On a fake clock (the
// host's and the registry's): the smallest window Open accepts, whatever
// the machine's load.
func TestHeartbeatStalledHolderMidRefreshHandedOver(t *testing.T) {
	const (
		hb     = 10 * time.Second
		to     = 2 * time.Second
		window = 2*hb + to
		poll   = hb / 4
	)
	reg := registrytest.NewRegistry()
	fh := newFakeHost(t, reg)
	_, path := ctPath(t)
	opts := []Option{WithHeartbeat(hb), WithRegistryTimeout(to), WithCloneWindow(window), WithReserveStep(1 << 20)}
	wH := newStallTouchReg(reg)
	H := fh.open(path, "web_1", wH, opts...)
	fh.until(poll, 8, H.ExportHeartbeatHolder, "the first process never took the heartbeat role")
	N := fh.open(path, "web_1", reg, opts...)
	defer func() {
		close(wH.release)
		H.Close()
		N.Close()
	}()
	base, _ := watchLastSeen(t, fh, reg, 0, 5*hb, poll/10) // window 0: watch only
	t.Logf("before the stall, last-seen was at most %v old", base)
	wH.mode.Store(1)
	stalled := false
	for range 80 { // two intervals
		fh.step(poll/10, H)
		select {
		case <-wH.stalled:
			stalled = true
		default:
		}
		if stalled {
			break
		}
	}
	require.True(t, stalled, "the holder never refreshed")
	worst, cloned := watchLastSeen(t, fh, reg, window, 8*hb, poll/10, H)
	assert.LessOrEqual(t, worst, window, "last-seen reached %v with a live process (clone window %v)", worst, window)
	assert.False(t, cloned, "a clone's claim took the name from the live host")
	if cloned {
		fh.until(poll, 8, func() bool { _, err := N.Next(); return errors.Is(err, ErrNameTaken) }, "the live process never learned of the clone", H)
		t.Logf("the live process now fails: ErrNameTaken")
	}
}

// The holder's own registry calls fail (its connection is broken; the
// other process's works): its tries do not keep the other process from
// stepping in, so last-seen stays within the clone window while a healthy
// process runs, and a clone's claim is refused. On a fake clock, at the
// smallest window Open accepts.
func TestHeartbeatFailingHolderDoesNotSilenceOthers(t *testing.T) {
	const (
		hb     = 10 * time.Second
		to     = 2 * time.Second
		window = 2*hb + to
		poll   = hb / 4
	)
	reg := registrytest.NewRegistry()
	fh := newFakeHost(t, reg)
	_, path := ctPath(t)
	opts := []Option{WithHeartbeat(hb), WithRegistryTimeout(to), WithCloneWindow(window), WithReserveStep(1 << 20)}
	wH := newStallTouchReg(reg)
	H := fh.open(path, "web_1", wH, opts...)
	defer fh.close(H)
	fh.until(poll, 8, H.ExportHeartbeatHolder, "the first process never took the heartbeat role")
	N := fh.open(path, "web_1", reg, opts...)
	defer fh.close(N)
	fh.run(3*hb, poll, nil)
	wH.mode.Store(2)
	worst, cloned := watchLastSeen(t, fh, reg, window, 20*hb, poll/10)
	assert.LessOrEqual(t, worst, window, "last-seen reached %v while a process with a working registry connection ran", worst)
	assert.False(t, cloned, "a clone's claim took the name from the live host")
}

// The holder closes while another process of the host is stopped holding
// the start-up/shut-down gate: Close may wait for the gate up to the
// registry timeout, but the role does not wait with it: within three
// intervals another process of the host holds it.
func TestHeartbeatClosingHolderHandsRoleOver(t *testing.T) {
	const interval = 10 * time.Second
	reg := registrytest.NewRegistry()
	fh := newFakeHost(t, nil)
	_, path := ctPath(t)
	opts := []Option{WithHeartbeat(interval), WithCloneWindow(0), WithReserveStep(1 << 20), WithRegistryTimeout(30 * interval)}
	H := fh.open(path, "web_1", reg, opts...)
	fh.until(interval/4, 8, H.ExportHeartbeatHolder, "the first process never took the heartbeat role")
	N := fh.open(path, "web_1", reg, opts...)
	defer fh.close(N)
	gate, err := os.Open(path + ExportOwnerSuffix)
	require.NoError(t, err)
	require.NoError(t, unix.Flock(int(gate.Fd()), unix.LOCK_EX))
	closed := make(chan struct{})
	go func() { H.Close(); close(closed) }()
	// H's heartbeat stops as its Close begins; then three intervals.
	require.Eventually(t, func() bool { return !H.ExportHeartbeatRunning() }, 10*time.Second, time.Millisecond)
	fh.run(3*interval, interval/4, nil)
	f, err := os.Open(path + ".heartbeat")
	require.NoError(t, err)
	held := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil
	f.Close()
	require.True(t, held, "someone holds the role")
	// Safe while someone holds the role: it only tells whether N does.
	nHolds := N.ExportHeartbeatHolder()
	select {
	case <-closed:
		t.Log("H's Close had returned")
	default:
	}
	gate.Close()
	<-closed
	assert.True(t, nHolds, "three intervals after the holder began to close, no other process held the role")
}
