package snapid_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/clock"
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
