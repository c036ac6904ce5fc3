package snapid_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hbClock is a clock that moves only when the test sets it.
type hbClock struct {
	mu sync.Mutex
	t  time.Time
}

func newHBClock() *hbClock { return &hbClock{t: time.Unix(1_700_000_000, 0)} }

func (c *hbClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *hbClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// hbTouchReg is one process's view of a shared registry: its Touch calls
// are counted, and fail at once while fail is set (this process's
// connection is broken; the other processes' work).
type hbTouchReg struct {
	*registrytest.Registry
	fail  atomic.Bool
	flap  atomic.Bool  // with fail: every third call goes through
	hold  atomic.Bool  // calls do not arrive before their timeout
	calls atomic.Int64 // Touch calls sent
	ok    atomic.Int64 // Touch calls that reached the registry
}

func (r *hbTouchReg) Touch(ctx context.Context, name, owner, session string) error {
	n := r.calls.Add(1)
	if r.hold.Load() {
		<-ctx.Done()
		return fmt.Errorf("%w: timed out", ErrRegistry)
	}
	if r.fail.Load() && !(r.flap.Load() && n%3 == 0) {
		return fmt.Errorf("%w: this process's connection is broken", ErrRegistry)
	}
	err := r.Registry.Touch(ctx, name, owner, session)
	if err == nil {
		r.ok.Add(1)
	}
	return err
}

// hbCloneClaim sends a clone's claim of web_1 (this host's owner token,
// another machine) with the clone window, and reports whether the
// registry accepted it.
func hbCloneClaim(t *testing.T, reg *registrytest.Registry, window time.Duration) bool {
	t.Helper()
	row, ok := reg.Row("web_1")
	require.True(t, ok)
	_, err := reg.Claim(context.Background(), registry.Claim{Name: "web_1", Owner: row.Owner, Hostname: "h2", MachineID: "m2", CloneWindow: window})
	return err == nil
}

// The heartbeat holder's own refreshes fail (its connection is broken)
// while another process of the host can reach the registry, at the
// smallest clone window Open accepts (2 heartbeats + the timeout, the
// default ratio of timeout to heartbeat). The holder fails at its
// interval, and retries two polls later, just before the other process
// becomes due: its retry must not hold the other process back, which
// refreshes at an interval and a half. The test drives the host's clock
// (and the registry's) by hand, so the interleaving is forced: the
// holder's try and retry happen at set times, then the other process's
// refresh must come at an interval and a half, not half an interval after
// the holder's retry (two intervals less half a poll: with the timeout, past
// what the window allows for). A clone's claim is refused at every step.
func TestHeartbeatFailingHolderDoesNotHoldOthersBack(t *testing.T) {
	const (
		// Real polls every second (every decision is on the test's
		// clock); the timeout bounds real calls, Open's too: a second.
		hb     = 4 * time.Second
		to     = hb / 4
		window = 2*hb + to
		poll   = hb / 4
	)
	clock := newHBClock()
	reg := registrytest.NewRegistry()
	reg.SetClock(clock.Now)
	_, path := ctPath(t)
	opts := []Option{WithHeartbeat(hb), WithRegistryTimeout(to), WithCloneWindow(window), WithReserveStep(1 << 20), ExportWithNow(clock.Now)}
	wH := &hbTouchReg{Registry: reg}
	H := openReg(t, path, "web_1", wH, opts...)
	defer H.Close()
	require.Eventually(t, H.ExportHeartbeatHolder, 10*time.Second, 5*time.Millisecond)
	wN := &hbTouchReg{Registry: reg}
	N := openReg(t, path, "web_1", wN, opts...)
	defer N.Close()
	require.False(t, N.ExportHeartbeatHolder())
	row, _ := reg.Row("web_1")
	last := row.LastSeen // the claim: the host's last refresh
	require.Equal(t, clock.Now(), last)

	wH.fail.Store(true)
	step := func(at time.Duration, what string, happened func() bool) {
		t.Helper()
		clock.Set(last.Add(at))
		require.True(t, waitFor(10*time.Second, happened), "at %v after the last refresh: %s did not happen", at, what)
		assert.False(t, hbCloneClaim(t, reg, window), "at %v after the last refresh, a clone's claim took the live host's name", at)
	}
	// The holder's refresh is due half a poll before the interval.
	step(hb-poll/2, "the holder's refresh", func() bool { return wH.calls.Load() == 1 })
	// It fails; the holder tries again two polls later, before the
	// others are due.
	step(hb-poll/2+2*poll, "the holder's retry", func() bool { return wH.calls.Load() == 2 })
	// At an interval and a half, the other process refreshes.
	step(hb+hb/2, "the other process's refresh", func() bool { return wN.ok.Load() == 1 })
	row, _ = reg.Row("web_1")
	assert.Equal(t, last.Add(hb+hb/2), row.LastSeen, "last-seen")
	assert.Equal(t, int64(0), wH.ok.Load())
	_, err := N.Next()
	assert.NoError(t, err, "the live host issues")
}

// The same at the smallest clone window Open accepts, on the real clock
// with an interval long enough for a busy machine: the holder's calls
// fail for several intervals (all of them, or two of every three, so that
// the holder's first retry comes again and again) while the other
// process's work. Last-seen must stay within an interval and seven
// eighths plus the timeout, and never come closer to the clone window
// than an eighth of an interval; a clone's claim is refused throughout.
func TestHeartbeatFailingHolderLastSeenInsideCloneWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for about 16 seconds")
	}
	const (
		hb     = 2 * time.Second
		to     = hb / 4
		window = 2*hb + to
		margin = hb / 8
	)
	for _, flap := range []bool{false, true} {
		t.Run(map[bool]string{false: "broken", true: "flapping"}[flap], func(t *testing.T) {
			reg := registrytest.NewRegistry()
			_, path := ctPath(t)
			opts := []Option{WithHeartbeat(hb), WithRegistryTimeout(to), WithCloneWindow(window), WithReserveStep(1 << 20)}
			wH := &hbTouchReg{Registry: reg}
			H := openReg(t, path, "web_1", wH, opts...)
			defer H.Close()
			require.Eventually(t, H.ExportHeartbeatHolder, 10*time.Second, 5*time.Millisecond)
			wN := &hbTouchReg{Registry: reg}
			N := openReg(t, path, "web_1", wN, opts...)
			defer N.Close()
			wH.flap.Store(flap)
			wH.fail.Store(true)
			var worst time.Duration
			for end := time.Now().Add(4 * hb); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				row, _ := reg.Row("web_1")
				worst = max(worst, time.Since(row.LastSeen))
				require.False(t, hbCloneClaim(t, reg, window), "a clone's claim took the live host's name (last-seen %v old, window %v)",
					time.Since(row.LastSeen), window)
			}
			t.Logf("last-seen at most %v old (window %v); the holder tried %d times (%d reached the registry), the other process refreshed %d times",
				worst, window, wH.calls.Load(), wH.ok.Load(), wN.ok.Load())
			assert.LessOrEqual(t, worst, window-margin, "last-seen came within %v of the clone window", window-worst)
			if !flap {
				assert.GreaterOrEqual(t, wN.ok.Load(), int64(1), "the other process kept last-seen fresh")
			}
		})
	}
}

// The holder's back-off after failures is capped at four polls (an
// interval): a holder alone on its host, whose refreshes fail for many
// intervals, still tries once per interval, and refreshes within an
// interval of the registry coming back. The test's clock moves an interval
// at a time; each step must bring one try.
func TestHeartbeatHolderBackOffCapped(t *testing.T) {
	const hb = 200 * time.Millisecond // real polls every 50 ms; every decision is on the test's clock
	clock := newHBClock()
	reg := registrytest.NewRegistry()
	reg.SetClock(clock.Now)
	_, path := ctPath(t)
	w := &hbTouchReg{Registry: reg}
	g := openReg(t, path, "web_1", w, WithHeartbeat(hb), WithCloneWindow(0), WithReserveStep(1<<20), ExportWithNow(clock.Now))
	defer g.Close()
	require.Eventually(t, g.ExportHeartbeatHolder, 10*time.Second, 5*time.Millisecond)
	start := clock.Now()
	w.fail.Store(true)
	const failures = 6
	for i := 1; i <= failures; i++ {
		clock.Set(start.Add(time.Duration(i) * hb))
		require.True(t, waitFor(10*time.Second, func() bool { return w.calls.Load() == int64(i) }),
			"%d intervals into the outage: %d tries (want one per interval)", i, w.calls.Load())
	}
	w.fail.Store(false)
	back := start.Add((failures + 1) * hb)
	clock.Set(back)
	require.True(t, waitFor(10*time.Second, func() bool { return w.ok.Load() == 1 }),
		"an interval after the registry came back, no refresh reached it")
	row, _ := reg.Row("web_1")
	assert.Equal(t, back, row.LastSeen)
}

// The clock skew the clone check tolerates (docs/guarantees.md): a
// claimant whose clock is ahead of the live holder's by less than the clone
// window less an interval and seven eighths and less the registry timeout
// is refused, even at the oldest last-seen a live host shows: the holder's
// refresh sent half a poll late and failing, the other process stepping in
// at its first poll half an interval after that try (a poll late), its
// refresh taking the whole timeout to arrive. The test's clock is set to
// each of those moments in turn; the claimant's clock is the registry's
// plus its skew. The tolerance once written, the window less one interval,
// is too much: a claimant ahead by nine tenths of it takes the live host's
// name.
func TestHeartbeatCloneCheckClockSkewTolerance(t *testing.T) {
	const (
		// Real polls every second (every decision is on the test's
		// clock); the timeout bounds real calls, Open's too: a second.
		hb   = 4 * time.Second
		to   = hb / 4 // the defaults' ratio (15 s to 1 min)
		poll = hb / 4
	)
	for _, window := range []time.Duration{2*hb + to, 5 * hb} {
		t.Run("window="+window.String(), func(t *testing.T) {
			tolerance := window - (hb + hb/2 + hb/4 + hb/8) - to // window − 1⅞ heartbeats − timeout
			clock := newHBClock()
			var skew atomic.Int64
			reg := registrytest.NewRegistry()
			reg.SetClock(func() time.Time { return clock.Now().Add(time.Duration(skew.Load())) })
			_, path := ctPath(t)
			opts := []Option{WithHeartbeat(hb), WithRegistryTimeout(to), WithCloneWindow(window), WithReserveStep(1 << 20), ExportWithNow(clock.Now)}
			wH := &hbTouchReg{Registry: reg}
			H := openReg(t, path, "web_1", wH, opts...)
			defer H.Close()
			require.Eventually(t, H.ExportHeartbeatHolder, 10*time.Second, 5*time.Millisecond)
			wN := &hbTouchReg{Registry: reg}
			N := openReg(t, path, "web_1", wN, opts...)
			defer N.Close()
			row, _ := reg.Row("web_1")
			last := row.LastSeen
			wH.fail.Store(true)
			wN.hold.Store(true)
			// The holder's refresh, half a poll late, fails.
			clock.Set(last.Add(hb + poll/2 - 1))
			require.True(t, waitFor(10*time.Second, func() bool { return wH.calls.Load() == 1 }), "the holder's refresh")
			// The other process, at its first poll half an interval after
			// that try, a poll late, sends; its refresh arrives at the end
			// of the timeout.
			clock.Set(last.Add(hb + hb/2 + hb/4 + hb/8 - 1))
			require.True(t, waitFor(10*time.Second, func() bool { return wN.calls.Load() == 1 }), "the other process's refresh")
			clock.Set(last.Add(hb + hb/2 + hb/4 + hb/8 + to - 1))
			row, _ = reg.Row("web_1")
			require.Equal(t, last, row.LastSeen, "no refresh arrived")

			skew.Store(int64(tolerance))
			assert.False(t, hbCloneClaim(t, reg, window), "a claimant %v ahead (the stated tolerance) took the live host's name", tolerance)
			once := 9 * (window - hb) / 10
			skew.Store(int64(once))
			assert.True(t, hbCloneClaim(t, reg, window), "a claimant %v ahead (nine tenths of the window less one interval) was refused: "+
				"the tolerance is larger than stated", once)
		})
	}
}
