package engine_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapid/snapid/internal/clock"
	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// callLog records when each registry call of a kind began.
type callLog struct {
	mu    sync.Mutex
	calls map[string][]time.Time
}

func logCalls(reg *registrytest.Registry) *callLog {
	l := &callLog{calls: map[string][]time.Time{}}
	reg.SetHook(func(_ context.Context, op, _ string) error {
		l.mu.Lock()
		l.calls[op] = append(l.calls[op], time.Now())
		l.mu.Unlock()
		return nil
	})
	return l
}

func (l *callLog) count(op string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls[op])
}

// waitFor polls cond for up to d.
func waitFor(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// holders returns which of gs hold the host's heartbeat role.
func holders(gs []*Generator) []int {
	var out []int
	for i, g := range gs {
		if g != nil && g.ExportHeartbeatHolder() {
			out = append(out, i)
		}
	}
	return out
}

// A host's processes (Generators on one counter, each with descriptors of
// its own, as processes have) send one heartbeat per interval between
// them, not one each; when the process that sends it exits or crashes,
// another takes over, and last-seen keeps being refreshed.
func TestHeartbeatOnePerHost(t *testing.T) {
	t.Parallel()
	const interval = 10 * time.Second
	for _, procs := range []int{1, 8, 32} {
		t.Run("processes="+strconv.Itoa(procs), func(t *testing.T) {
			reg := registrytest.NewRegistry()
			fh := newFakeHost(t, nil)
			_, path := ctPath(t)
			opts := []Option{WithHeartbeat(interval), WithCloneWindow(0)}
			gs := make([]*Generator, procs)
			for i := range gs {
				gs[i] = fh.open(path, "web_1", reg, opts...)
			}
			defer func() {
				for _, g := range gs {
					if g != nil {
						g.Close()
					}
				}
			}()
			calls := logCalls(reg)
			const elapsed = 25 * interval
			fh.run(elapsed, interval/4, nil)
			touches := calls.count("touch")
			// One per interval for the host, whatever the processes.
			assert.LessOrEqual(t, float64(touches), float64(elapsed)/float64(interval)+1,
				"%d processes sent %d heartbeats in %v (interval %v): want one per interval for the host", procs, touches, elapsed, interval)
			assert.GreaterOrEqual(t, touches, 24, "the host's heartbeat runs once per interval")
			require.Len(t, holders(gs), 1, "one process holds the heartbeat")
			if procs == 1 {
				return
			}
			// The holder crashes, then the next one exits cleanly: each
			// time another process takes the role and refreshes.
			for round, how := range []string{"crash", "close"} {
				h := holders(gs)[0]
				if how == "crash" {
					crash(t, gs[h])
				} else {
					require.NoError(t, gs[h].Close())
				}
				gs[h] = nil
				before := calls.count("touch")
				// Within two intervals: the role at the next poll, the
				// refresh once last-seen is an interval old.
				fh.until(interval/4, 8, func() bool { return len(holders(gs)) == 1 }, fmt.Sprintf("round %d: no process took the heartbeat after the holder's %s", round, how))
				fh.until(interval/4, 8, func() bool { return calls.count("touch") > before }, fmt.Sprintf("round %d: last-seen not refreshed after the holder's %s", round, how))
			}
			row, ok := reg.Row("web_1")
			require.True(t, ok)
			assert.Equal(t, registry.StateActive, row.State)
		})
	}
}

// The heartbeat holder that stops without exiting (a stopped process, a
// lock held by someone who does not refresh) does not leave last-seen
// stale: a process that finds the record an interval and a half old
// refreshes without the role.
func TestHeartbeatHolderStuck(t *testing.T) {
	t.Parallel()
	const interval = 10 * time.Second
	reg := registrytest.NewRegistry()
	fh := newFakeHost(t, nil)
	_, path := ctPath(t)
	g := openReg(t, path, "web_1", reg, WithHeartbeat(time.Hour), WithCloneWindow(0))
	defer g.Close()
	// g holds the role (its poll is an hour away: it never takes it, so
	// take it by hand as a stuck holder would keep it) and never refreshes.
	lock, err := os.OpenFile(path+".heartbeat", os.O_RDWR, 0)
	require.NoError(t, err)
	defer lock.Close()
	require.NoError(t, unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB))
	other := fh.open(path, "web_1", reg, WithHeartbeat(interval), WithCloneWindow(0))
	defer other.Close()
	assert.False(t, other.ExportHeartbeatHolder())
	calls := logCalls(reg)
	start := fh.clk.Now()
	fh.until(interval/4, 40, func() bool { return calls.count("touch") >= 3 }, "no refresh while the heartbeat's holder is stuck")
	// Not more often than every interval and a half.
	elapsed := fh.clk.Since(start)
	assert.LessOrEqual(t, float64(calls.count("touch")), float64(elapsed)/float64(interval)/1.5+1)
}

// A take-over that the holder's heartbeat learns of stops every process
// of the host, not only the holder.
func TestHeartbeatTakeOverStopsEveryProcess(t *testing.T) {
	t.Parallel()
	// On a fake clock: which process learns first, and how, depends on
	// no scheduler.
	const interval = 10 * time.Second
	reg := registrytest.NewRegistry()
	fh := newFakeHost(t, nil)
	dir := t.TempDir()
	path := filepath.Join(dir, "a", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(path), 0o755))
	gs := []*Generator{}
	for range 4 {
		// A step no extension is needed for: only the heartbeat tells.
		g := fh.open(path, "web_1", reg, WithHeartbeat(interval), WithCloneWindow(0), WithReserveStep(1<<20))
		defer fh.close(g)
		gs = append(gs, g)
	}
	fh.run(2*interval, interval/4, nil)
	other := filepath.Join(dir, "b", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(other), 0o755))
	calls := logCalls(reg)
	taker, err := Open(other, "web_1", WithRegistry(reg), WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}), WithBindingDir(t.TempDir()), WithTakeover(0), WithSync(false), WithCloneWindow(0))
	require.NoError(t, err)
	defer taker.Close()
	stopped := func() bool {
		for _, g := range gs {
			if _, err := g.Next(); !errors.Is(err, ErrNameTaken) {
				return false
			}
		}
		return true
	}
	// Every process stops within an interval and a poll of the holder's
	// next refresh.
	fh.until(interval/4, 12, stopped, "a process still issues two intervals after the name was taken over")
	// The holder's refresh learned it and told the others through the
	// record: they did not each ask the registry.
	assert.Equal(t, 1, calls.count("touch"), "the host's processes each refreshed to learn of the take-over")
}

// Processes joining their host's claim read the registry only when the
// host's heartbeat record is not fresh: a host starting all its
// processes at once reads it once.
func TestHeartbeatFreshJoinReadsNothing(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	_, path := ctPath(t)
	calls := logCalls(reg)
	first := openReg(t, path, "web_1", reg, WithHeartbeat(time.Hour), WithCloneWindow(0))
	defer first.Close()
	for range 7 {
		g := openReg(t, path, "web_1", reg, WithHeartbeat(time.Hour), WithCloneWindow(0))
		defer g.Close()
	}
	assert.Equal(t, 1, calls.count("claim"))
	assert.Equal(t, 0, calls.count("get"), "joins of a fresh claim read the registry")

	for _, c := range []struct {
		what string
		now  time.Time
	}{
		{"an interval later", time.Now().Add(time.Hour + time.Minute)},
		{"a clock set back", time.Now().Add(-time.Minute)},
	} {
		before := calls.count("get")
		g := openReg(t, path, "web_1", reg, WithHeartbeat(time.Hour), WithCloneWindow(0), ExportWithClock(clock.NewFake(c.now)))
		g.Close()
		assert.Equal(t, before+1, calls.count("get"), "%s: a join reads the registry", c.what)
	}
}

// A damaged or foreign heartbeat record is no record: the join reads the
// registry, and the host's heartbeat writes a good one.
func TestHeartbeatRecordDamaged(t *testing.T) {
	t.Parallel()
	const interval = 20 * time.Millisecond
	reg := registrytest.NewRegistry()
	_, path := ctPath(t)
	// Its poll is an hour away: nothing rewrites the record meanwhile.
	first := openReg(t, path, "web_1", reg, WithHeartbeat(time.Hour), WithCloneWindow(0))
	defer first.Close()
	calls := logCalls(reg)
	for _, junk := range [][]byte{[]byte("garbage"), make([]byte, 40), append([]byte("snaphb02"), make([]byte, 31)...)} {
		require.NoError(t, os.WriteFile(path+".heartbeat", junk, 0o644))
		g := openReg(t, path, "web_1", reg, WithHeartbeat(time.Hour), WithCloneWindow(0))
		g.Close()
	}
	assert.Equal(t, 3, calls.count("get"), "each join behind a damaged record read the registry")
	beat := openReg(t, path, "web_1", reg, WithHeartbeat(interval), WithCloneWindow(0))
	defer beat.Close()
	require.True(t, waitFor(5*time.Second, func() bool {
		b, err := os.ReadFile(path + ".heartbeat")
		return err == nil && len(b) == 40 && string(b[:8]) == "snaphb02"
	}), "the heartbeat did not write its record again")
}

// Processes that open the host's files before the heartbeat file exists
// (a counter last used by a version without one, all processes started
// at once) find it once the first process's claim has made it, and join
// without a registry read.
func TestHeartbeatJoinFindsFileMadeByClaim(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	_, path := ctPath(t)
	opts := []Option{WithHeartbeat(time.Hour), WithCloneWindow(0)}
	require.NoError(t, openReg(t, path, "web_1", reg, opts...).Close())
	require.NoError(t, os.Remove(path+".heartbeat"))

	// Hold the host's start-up gate while the processes open their files.
	gate, err := os.OpenFile(path+".owner", os.O_RDONLY, 0)
	require.NoError(t, err)
	defer gate.Close()
	require.NoError(t, unix.Flock(int(gate.Fd()), unix.LOCK_EX))
	calls := logCalls(reg)
	const procs = 4
	gs := make([]*Generator, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for i := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gs[i], errs[i] = Open(path, "web_1", append([]Option{WithRegistry(reg), WithSync(false),
				WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"})}, opts...)...)
		}()
	}
	time.Sleep(200 * time.Millisecond) // every process is at the gate
	_, err = os.Stat(path + ".heartbeat")
	require.ErrorIs(t, err, os.ErrNotExist, "no heartbeat file before a claim stands")
	require.NoError(t, unix.Flock(int(gate.Fd()), unix.LOCK_UN))
	wg.Wait()
	for i, g := range gs {
		require.NoError(t, errs[i])
		defer g.Close()
	}
	assert.Equal(t, 1, calls.count("claim"))
	assert.Equal(t, 0, calls.count("get"), "joins read the registry")
}

// Stats, with the heartbeat's last refresh, is safe racing Close and
// after it.
func TestHeartbeatStatsAfterClose(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	_, path := ctPath(t)
	for range 20 {
		g := openReg(t, path, "web_1", reg, WithCloneWindow(0), WithHeartbeat(5*time.Millisecond))
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				_ = g.Stats()
			}
		}()
		require.NoError(t, g.Close())
		wg.Wait()
		st := g.Stats()
		if st.Registry != nil {
			_ = st.Registry.LastHeartbeat
		}
	}
}

// The heartbeat's goroutines of closed and crashed Generators end.
func TestHeartbeatNoGoroutineLeak(t *testing.T) {
	reg := registrytest.NewRegistry()
	_, path := ctPath(t)
	time.Sleep(50 * time.Millisecond)
	before := runtimeNumGoroutine()
	for i := range 30 {
		g := openReg(t, path, "web_1", reg, WithCloneWindow(0), WithHeartbeat(4*time.Millisecond))
		time.Sleep(3 * time.Millisecond)
		if i%2 == 0 {
			require.NoError(t, g.Close())
		} else {
			crash(t, g)
		}
	}
	// Closed and crashed Generators' goroutines end promptly; a bound of
	// seconds for a busy machine.
	assert.Eventually(t, func() bool { return runtimeNumGoroutine() <= before+1 }, 10*time.Second, 10*time.Millisecond,
		"goroutines: %d before, %d after", before, runtimeNumGoroutine())
}

var runtimeNumGoroutine = runtime.NumGoroutine

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
	t.Parallel()
	skipShort(t)
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
	skipShort(t)
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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

// flakyTouch is a registry whose Touch alternates: odd calls are applied at
// once and answered just before the caller's deadline (a slow reply), even
// calls time out without being applied.
type flakyTouch struct {
	*registrytest.Registry
	clk    *clock.Fake // the host's: replies come late on it
	n      atomic.Int64
	active atomic.Bool
}

func (f *flakyTouch) Touch(ctx context.Context, name, owner, session string) error {
	if !f.active.Load() {
		return f.Registry.Touch(ctx, name, owner, session)
	}
	if f.n.Add(1)%2 == 1 {
		err := f.Registry.Touch(ctx, name, owner, session)
		if d, ok := ctx.Deadline(); ok {
			f.clk.Sleep(f.clk.Until(d) - 10*time.Millisecond)
		}
		return err
	}
	// Until the call's deadline, on the clock (a goroutine waiting for
	// its context would not show the fake host it waits on the clock).
	if d, ok := ctx.Deadline(); ok {
		f.clk.Sleep(f.clk.Until(d))
	}
	return fmt.Errorf("%w: touch timed out", ErrRegistry)
}

// One process, a configuration checkCloneWindow accepts (window = 2 x
// heartbeat + timeout): last-seen stays within the clone window while the
// process runs, with one slow reply followed by one timed-out Touch ("a
// live holder that misses one heartbeat, the next one late by up to a
// registry timeout").
func TestHeartbeatSlowAndLostRefreshesInsideCloneWindow(t *testing.T) {
	t.Parallel()
	const (
		hb     = 20 * time.Second
		to     = 30 * time.Second
		window = 2*hb + to
	)
	mem := registrytest.NewRegistry()
	fh := newFakeHost(t, mem)
	reg := &flakyTouch{Registry: mem, clk: fh.clk}
	_, path := ctPath(t)
	g := fh.open(path, "web_1", reg, WithHeartbeat(hb), WithRegistryTimeout(to), WithCloneWindow(window))
	defer fh.close(g)
	reg.active.Store(true)
	worst, _ := watchLastSeen(t, fh, mem, 0, 15*hb, hb/40)
	assert.LessOrEqual(t, worst, window, "last-seen reached %v while the process ran (clone window %v, heartbeat %v, timeout %v)", worst, window, hb, to)
}

// Same, and the consequence: a copy of the host (same owner token, another
// machine) claiming with the same clone window while the original runs is
// refused.
func TestHeartbeatCloneRefusedWhileHostRuns(t *testing.T) {
	t.Parallel()
	const (
		hb     = 20 * time.Second
		to     = 30 * time.Second
		window = 2*hb + to
	)
	mem := registrytest.NewRegistry()
	fh := newFakeHost(t, mem)
	reg := &flakyTouch{Registry: mem, clk: fh.clk}
	_, path := ctPath(t)
	g := fh.open(path, "web_1", reg, WithHeartbeat(hb), WithRegistryTimeout(to), WithCloneWindow(window))
	defer fh.close(g)
	reg.active.Store(true)
	_, claimed := watchLastSeen(t, fh, mem, window, 15*hb, hb/40)
	assert.False(t, claimed, "a clone's claim with the same clone window succeeded while the original host ran")
	if claimed {
		fh.until(hb/4, 12, func() bool { _, err := g.Next(); return err != nil }, "the original host never learned of the clone")
		_, err := g.Next()
		t.Logf("original host now: %v", err)
	}
}

// While Touch fails (an overloaded or unreachable registry), one host of
// P processes sends about one Touch per interval, at most two, not one
// per process.
func TestHeartbeatNoTouchStormDuringOutage(t *testing.T) {
	t.Parallel()
	const (
		interval = 10 * time.Second
		procs    = 8
	)
	reg := registrytest.NewRegistry()
	fh := newFakeHost(t, nil)
	_, path := ctPath(t)
	for range procs {
		g := fh.open(path, "web_1", reg, WithHeartbeat(interval), WithCloneWindow(0))
		defer fh.close(g)
	}
	var touches atomic.Int64
	reg.SetHook(func(_ context.Context, op, _ string) error {
		if op == "touch" {
			touches.Add(1)
			return fmt.Errorf("%w: overloaded", ErrRegistry)
		}
		return nil
	})
	fh.run(20*interval, interval/4, nil)
	per := float64(touches.Load()) / 20
	t.Logf("%d processes: %.1f Touch calls per interval while the registry fails them", procs, per)
	assert.LessOrEqual(t, per, float64(procs), "the host sends more Touches during an outage than one per process per interval")
	// The holder backs off to one try per interval, and the others step
	// in only half an interval after the last try (a try that has not
	// come back by then may be a stopped holder's): at most two per
	// interval for the host, whatever its processes.
	assert.LessOrEqual(t, per, 2.2, "the host sends more than about two Touches per interval during an outage")
}

// About one refresh per interval, even when the record's "last" is in the
// future: the clock set back an hour, or a damaged record whose "last" is
// far in the future, does not make the holder find the refresh always due
// (four per interval, one at every poll). On the host's fake clock, set
// back an hour for the first case.
func TestHeartbeatFutureLastOneRefreshPerInterval(t *testing.T) {
	t.Parallel()
	const interval = 10 * time.Second
	for _, how := range []string{"clock set back an hour", "record's last damaged into the future"} {
		t.Run(how, func(t *testing.T) {
			reg := registrytest.NewRegistry()
			fh := newFakeHost(t, nil)
			_, path := ctPath(t)
			opts := []Option{WithHeartbeat(interval), WithCloneWindow(0), WithReserveStep(1 << 20)}
			for range 3 {
				g := fh.open(path, "web_1", reg, opts...)
				defer fh.close(g)
			}
			fh.run(3*interval, interval/4, nil)
			if how == "clock set back an hour" {
				fh.clk.Advance(-time.Hour)
			} else {
				b, err := os.ReadFile(path + ".heartbeat")
				require.NoError(t, err)
				require.Len(t, b, 40)
				binary.LittleEndian.PutUint64(b[16:], uint64(fh.clk.Now().AddDate(50, 0, 0).UnixNano()))
				require.NoError(t, os.WriteFile(path+".heartbeat", b, 0o600))
			}
			calls := logCalls(reg)
			fh.run(15*interval, interval/4, nil)
			per := float64(calls.count("touch")) / 15
			assert.LessOrEqual(t, per, 1.5, "%s: the host sends %.1f refreshes per interval", how, per)
		})
	}
}

// About one refresh per interval while a process stopped holding the
// record's byte lock (here a read lock, which needs only read access to
// the file) keeps every update from landing: "last" and "tried" stay old,
// yet the host's processes do not all refresh at every poll.
func TestHeartbeatRecordLockHeldNoRefreshStorm(t *testing.T) {
	t.Parallel()
	const interval = 10 * time.Second
	reg := registrytest.NewRegistry()
	fh := newFakeHost(t, nil)
	_, path := ctPath(t)
	for range 4 {
		g := fh.open(path, "web_1", reg, WithHeartbeat(interval), WithCloneWindow(0), WithReserveStep(1<<20))
		defer fh.close(g)
	}
	fh.run(interval, interval/4, nil)
	f, err := os.Open(path + ".heartbeat")
	require.NoError(t, err)
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: 0, Start: 0, Len: 40}
	// The processes hold the write lock for an update's length now and
	// then: try until it is free.
	require.Eventually(t, func() bool { return unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk) == nil }, 5*time.Second, time.Millisecond)
	calls := logCalls(reg)
	fh.run(8*interval, interval/4, nil)
	per := float64(calls.count("touch")) / 8
	assert.LessOrEqual(t, per, 1.5, "with the record's byte lock held, 4 processes send %.1f refreshes per interval", per)
}

// A damaged record reads as none and the next poll refreshes: a record
// with trailing bytes is repaired back to its 40 bytes, so the host's
// processes go back to about one refresh per interval.
func TestHeartbeatLongRecordRepaired(t *testing.T) {
	t.Parallel()
	const interval = 10 * time.Second
	reg := registrytest.NewRegistry()
	fh := newFakeHost(t, nil)
	_, path := ctPath(t)
	for range 3 {
		g := fh.open(path, "web_1", reg, WithHeartbeat(interval), WithCloneWindow(0), WithReserveStep(1<<20))
		defer fh.close(g)
	}
	fh.run(2*interval, interval/4, nil)
	f, err := os.OpenFile(path+".heartbeat", os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write([]byte{0})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	calls := logCalls(reg)
	fh.run(15*interval, interval/4, nil)
	per := float64(calls.count("touch")) / 15
	st, err := os.Stat(path + ".heartbeat")
	require.NoError(t, err)
	assert.EqualValues(t, 40, st.Size(), "the damaged record was never repaired")
	assert.LessOrEqual(t, per, 1.5, "behind a 41-byte record, 3 processes send %.1f refreshes per interval", per)
}

// A process that holds the heartbeat record's byte lock and does not let
// go (stopped by SIGSTOP mid-update, a write hung on the disk) does not
// stop the host's refreshes of last-seen: updates of the record give up
// after a bound, and the refresh is sent without them.
func TestHeartbeatRecordLockHeldRefreshesGoOn(t *testing.T) {
	t.Parallel()
	const interval = 10 * time.Second
	reg := registrytest.NewRegistry()
	fh := newFakeHost(t, nil)
	_, path := ctPath(t)
	g := fh.open(path, "web_1", reg, WithCloneWindow(0), WithHeartbeat(interval))
	defer fh.close(g)
	calls := logCalls(reg)
	fh.until(interval/4, 8, func() bool { return calls.count("touch") > 0 }, "the heartbeat runs")

	// Another open file description's lock on the record's bytes, as a
	// stopped process would hold it.
	f, err := os.OpenFile(path+".heartbeat", os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 40}
	require.NoError(t, unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk))
	before := calls.count("touch")
	fh.run(20*interval, interval/4, nil)
	n := calls.count("touch") - before
	assert.GreaterOrEqual(t, n, 5, "with the record's lock held for 20 intervals, the host refreshed %d times", n)
	_, err = g.Next()
	assert.NoError(t, err, "the process still issues")
	// The lock goes, and the clock moves on, so that an update waiting for
	// the lock ends and Close does not wait for it.
	require.NoError(t, f.Close())
	fh.step(interval / 4)
}

// A process in block mode that learns its name was taken (from the
// registry, or from the host's heartbeat record) hands out no more ids,
// not even from the block it took from the counter before.
func TestHeartbeatTakenStopsBlockIDs(t *testing.T) {
	t.Parallel()
	const interval = 10 * time.Second
	reg := registrytest.NewRegistry()
	fh := newFakeHost(t, reg)
	dir, path := ctPath(t)
	opts := []Option{WithHeartbeat(interval), WithCloneWindow(0), WithBlock(1000)}
	a := fh.open(path, "web_1", reg, opts...)
	defer a.Close()
	b := fh.open(path, "web_1", reg, opts...)
	defer b.Close()
	for _, g := range []*Generator{a, b} {
		_, err := g.Next() // each takes a block of 1000 from the counter
		require.NoError(t, err)
	}
	taker, err := Open(filepath.Join(dir, "other.u64"), "web_1", WithRegistry(reg),
		WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}), WithBindingDir(t.TempDir()), WithTakeover(0), WithSync(false), WithCloneWindow(0))
	require.NoError(t, err)
	defer taker.Close()
	fh.until(interval/4, 40, func() bool { return !a.ExportHeartbeatRunning() && !b.ExportHeartbeatRunning() },
		"both processes learn of the take-over at their polls")
	for _, g := range []*Generator{a, b} {
		_, err := g.Next()
		assert.ErrorIs(t, err, ErrNameTaken, "an id from the block taken before the take-over was learned")
	}
}

// gatedTouch is one process's view of a shared registry with its Touch
// shaped by the test.
type gatedTouch struct {
	*registrytest.Registry
	touch func(ctx context.Context, inner func() error) error
}

func (g *gatedTouch) Touch(ctx context.Context, name, owner, session string) error {
	inner := func() error { return g.Registry.Touch(ctx, name, owner, session) }
	if g.touch == nil {
		return inner()
	}
	return g.touch(ctx, inner)
}

// A take-over learned by one process (M) is written to the record, and
// another process's (N) refresh that was applied before the take-over but
// answered after it does not overwrite it: the host's other processes stop
// at one of their next polls, and new joins are refused.
func TestHeartbeatTakenRecordNotOverwritten(t *testing.T) {
	t.Parallel()
	const hb = 100 * time.Millisecond
	reg := registrytest.NewRegistry()
	dir := t.TempDir()
	path := filepath.Join(dir, "a", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(path), 0o755))
	opts := []Option{WithHeartbeat(hb), WithRegistryTimeout(5 * time.Second), WithCloneWindow(0), WithReserveStep(1 << 20)}
	armed := make(chan struct{})
	wH := &gatedTouch{Registry: reg, touch: func(ctx context.Context, inner func() error) error {
		select {
		case <-armed:
			<-ctx.Done() // the holder's registry connection hangs
			return fmt.Errorf("%w: timed out", ErrRegistry)
		default:
			return inner()
		}
	}}
	H := openReg(t, path, "web_1", wH, opts...)
	defer H.Close()
	require.Eventually(t, H.ExportHeartbeatHolder, 2*time.Second, 5*time.Millisecond)
	nInFlight, releaseN := make(chan struct{}), make(chan struct{})
	takenOver := make(chan struct{})
	wN := &gatedTouch{Registry: reg}
	wN.touch = func(ctx context.Context, inner func() error) error {
		select {
		case <-armed:
		default:
			return inner()
		}
		err := inner() // applied before the take-over...
		select {
		case <-nInFlight:
		default:
			close(nInFlight)
		}
		<-releaseN // ...answered after it
		return err
	}
	wM := &gatedTouch{Registry: reg}
	wM.touch = func(ctx context.Context, inner func() error) error {
		select {
		case <-armed:
			<-takenOver
		default:
		}
		return inner()
	}
	N := openReg(t, path, "web_1", wN, opts...)
	defer N.Close()
	M := openReg(t, path, "web_1", wM, opts...)
	defer M.Close()
	close(armed)
	<-nInFlight
	taker, err := Open(filepath.Join(dir, "c2.u64"), "web_1", WithRegistry(reg), WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}), WithBindingDir(t.TempDir()),
		WithTakeover(0), WithSync(false), WithCloneWindow(0))
	require.NoError(t, err)
	defer taker.Close()
	close(takenOver)
	require.Eventually(t, func() bool { _, err := M.Next(); return errors.Is(err, ErrNameTaken) }, 3*time.Second, 2*time.Millisecond, "M learns of the take-over")
	close(releaseN)
	// N stops at one of its next polls (a bound of seconds, not of polls:
	// the machine may be busy); with the take-over lost from the record
	// it would issue for good.
	var errN error
	assert.Eventually(t, func() bool { _, errN = N.Next(); return errors.Is(errN, ErrNameTaken) }, 10*time.Second, 2*time.Millisecond,
		"N still issues after M learned of the take-over: %v", errN)
	_, errH := H.Next()
	t.Logf("H (whose own Touch hangs, so it does not poll): %v", errH)
	J, err := Open(path, "web_1", WithRegistry(reg), WithSync(false), WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"}), WithHeartbeat(hb), WithCloneWindow(0))
	if err == nil {
		J.Close()
	}
	assert.ErrorIs(t, err, ErrNameTaken, "a new process joined the claim the host knew was taken over")
}

// A take-over learned by an extension rather than a refresh stops every
// process of the host too: the others stop issuing within two of their
// polls, not an interval and a half later.
func TestHeartbeatTakeoverLearnedByExtendShared(t *testing.T) {
	t.Parallel()
	const interval = 10 * time.Second
	reg := registrytest.NewRegistry()
	fh := newFakeHost(t, nil)
	dir := t.TempDir()
	path := filepath.Join(dir, "a", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(path), 0o755))
	opts := []Option{WithHeartbeat(interval), WithCloneWindow(0), WithReserveStep(1 << 20)}
	A := fh.open(path, "web_1", reg, opts...)
	defer fh.close(A)
	fh.until(interval/4, 8, A.ExportHeartbeatHolder, "the first process never took the heartbeat role")
	B := fh.open(path, "web_1", reg, opts...)
	defer fh.close(B)
	other := filepath.Join(dir, "b", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(other), 0o755))
	// Take over just after the host's refresh: the test does not depend on
	// where in the interval it falls.
	calls := logCalls(reg)
	n := calls.count("touch")
	fh.until(interval/4, 12, func() bool { return calls.count("touch") > n }, "the host did not refresh")
	taker, err := Open(other, "web_1", WithRegistry(reg), WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}), WithBindingDir(t.TempDir()), WithTakeover(0), WithSync(false), WithCloneWindow(0))
	require.NoError(t, err)
	defer taker.Close()
	mark, _, err := ReadMark(path)
	require.NoError(t, err)
	require.ErrorIs(t, A.ExportExtend(context.Background(), mark+1), ErrNameTaken)
	_, err = A.Next()
	require.ErrorIs(t, err, ErrNameTaken)
	fh.step(interval / 4) // two of B's polls
	fh.step(interval / 4)
	_, err = B.Next()
	assert.ErrorIs(t, err, ErrNameTaken, "B still issues two polls after A learned of the take-over")
}
