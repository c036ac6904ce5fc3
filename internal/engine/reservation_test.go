package engine_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/snapid/snapid/internal/clock"
	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/statefile"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestReservationBoundsAndCleanRestart(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	g := openReg(t, path, "web_1", reg, WithReserveStep(100), WithOutageHorizon(0))
	h, _ := reg.Row("web_1")
	assert.Equal(t, uint64(100), h.Reserved, "the first step is reserved at Open")
	assert.Equal(t, []uint64{1, 2, 3}, draw(t, g, 3))
	require.NoError(t, g.Close())
	h, _ = reg.Row("web_1")
	assert.Equal(t, uint64(3), h.Reserved, "the last process out returns the unused reservation")

	g = openReg(t, path, "web_1", reg, WithReserveStep(100), WithOutageHorizon(0))
	assert.Equal(t, []uint64{4}, draw(t, g, 1), "a clean restart leaves no gap")
	require.NoError(t, g.Close())
}

func TestReservationExtendsAheadAndStopsAtMarkWhenRegistryDown(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	g := openReg(t, path, "web_1", reg, WithReserveStep(10), WithOutageHorizon(0))
	defer g.Close()
	seen := draw(t, g, 25) // crosses two marks: extended in the background or synchronously
	assert.Equal(t, uint64(25), seen[24])

	readMark := func() uint64 {
		m, _, err := ReadMark(path)
		require.NoError(t, err)
		return m
	}
	// The last draws started a background extension (less than half a
	// step was left); wait for it, so that the range is ahead of the
	// counter when the registry goes down.
	require.Eventually(t, func() bool { return readMark() > 25 }, 10*time.Second, time.Millisecond)
	reg.SetDown(true)
	// An extension already past the registry's door when it went down
	// may still raise the mark: read it once none is running.
	require.Eventually(t, func() bool { return !g.ExportExtending() }, 10*time.Second, time.Millisecond)
	mark := readMark()
	for n := uint64(26); n <= mark; n++ {
		v, err := g.Next()
		require.NoError(t, err, "ids keep flowing from the reserved range while the registry is down")
		assert.Equal(t, n, v)
	}
	_, err := g.Next()
	require.ErrorIs(t, err, ErrReservationExhausted)
	require.ErrorIs(t, err, ErrRegistry)
	last, err := ReadCounter(path)
	require.NoError(t, err)
	assert.Equal(t, mark, last, "a refused number is not reserved in the counter")

	reg.SetDown(false)
	v, err := g.Next()
	require.NoError(t, err, "issuance resumes when the registry is back")
	assert.Equal(t, mark+1, v)
}

func TestReservationCrashLeavesAtMostOneStep(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	g := openReg(t, path, "web_1", reg, WithReserveStep(100), WithOutageHorizon(0))
	draw(t, g, 7)
	crash(t, g)

	g = openReg(t, path, "web_1", reg, WithReserveStep(100), WithOutageHorizon(0))
	defer g.Close()
	v, err := g.Next()
	require.NoError(t, err)
	assert.Greater(t, v, uint64(7))
	assert.LessOrEqual(t, v-7, uint64(100)+1, "gap of at most one step")
}

func TestReservationRestoredBackupNeverRepeats(t *testing.T) {
	t.Parallel()
	for _, clean := range []bool{true, false} {
		reg := registrytest.NewRegistry()
		path := filepath.Join(t.TempDir(), "counter.u64")
		g := openReg(t, path, "web_1", reg, WithReserveStep(50), WithOutageHorizon(0))
		draw(t, g, 5)
		backup, err := os.ReadFile(path)
		require.NoError(t, err)
		issued := draw(t, g, 120)
		if clean {
			require.NoError(t, g.Close())
		} else {
			crash(t, g)
		}
		// Restore the old counter in place, as a restore from backup would.
		require.NoError(t, os.WriteFile(path, backup, 0o600))

		g = openReg(t, path, "web_1", reg, WithReserveStep(50), WithOutageHorizon(0))
		v, err := g.Next()
		require.NoError(t, err)
		assert.Greater(t, v, issued[len(issued)-1], "clean=%v: a rolled-back counter is raised above every issued id", clean)
		require.NoError(t, g.Close())
	}
}

func TestReservationNameTakenIssuesNothing(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	dir := t.TempDir()
	a := openReg(t, filepath.Join(dir, "a.u64"), "web_1", reg)
	defer a.Close()

	bPath := filepath.Join(dir, "b.u64")
	require.NoError(t, os.WriteFile(bPath, []byte{41, 0, 0, 0, 0, 0, 0, 0}, 0o600))
	_, err := Open(bPath, "web_1", WithRegistry(reg), WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}), WithBindingDir(t.TempDir()))
	require.ErrorIs(t, err, ErrNameTaken)
	assert.Contains(t, err.Error(), "h1")
	b, err := os.ReadFile(bPath)
	require.NoError(t, err)
	assert.Equal(t, []byte{41, 0, 0, 0, 0, 0, 0, 0}, b, "the loser's counter is unchanged")
}

func TestReservationTakeoverAfterReleaseContinuesAbove(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	dir := t.TempDir()
	aPath := filepath.Join(dir, "a.u64")
	a := openReg(t, aPath, "web_1", reg, WithReserveStep(10), WithOutageHorizon(0))
	issued := draw(t, a, 37)
	require.NoError(t, a.Close())
	final, err := Release(t.Context(), aPath, "web_1", WithRegistry(reg))
	require.NoError(t, err)
	assert.Equal(t, uint64(37), final)

	b, err := Open(filepath.Join(dir, "b.u64"), "web_1", WithRegistry(reg), WithSync(false),
		WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}), WithBindingDir(t.TempDir()))
	require.NoError(t, err)
	defer b.Close()
	v, err := b.Next()
	require.NoError(t, err)
	assert.Greater(t, v, issued[len(issued)-1])
}

func TestReservationForcedTakeover(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	dir := t.TempDir()
	a := openReg(t, filepath.Join(dir, "a.u64"), "web_1", reg, WithReserveStep(10), WithOutageHorizon(0))
	draw(t, a, 3)
	crash(t, a) // the old host is gone without releasing

	other := WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"})
	place2 := WithBindingDir(t.TempDir())
	_, err := Open(filepath.Join(dir, "b.u64"), "web_1", WithRegistry(reg), other, place2)
	require.ErrorIs(t, err, ErrNameTaken)
	b, err := Open(filepath.Join(dir, "b.u64"), "web_1", WithRegistry(reg), other, place2, WithTakeover(1000))
	require.NoError(t, err)
	defer b.Close()
	v, err := b.Next()
	require.NoError(t, err)
	assert.Equal(t, uint64(1001), v)
}

func TestReservationCloneRefused(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a"), 0o700))
	a := openReg(t, filepath.Join(dir, "a", "c.u64"), "web_1", reg)
	defer a.Close()
	// A copy of the counter directory, owner token included, on another machine.
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "clone"), 0o700))
	testfs.CopyFiles(t, filepath.Join(dir, "a"), filepath.Join(dir, "clone"), "c.u64", "c.u64.owner")
	_, err := Open(filepath.Join(dir, "clone", "c.u64"), "web_1", WithRegistry(reg),
		WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}), WithBindingDir(t.TempDir()))
	require.ErrorIs(t, err, ErrProbableClone)
}

// The clone window is checked against the heartbeat and the registry
// timeout at Open, only with a registry; any window of at least twice the
// heartbeat plus the timeout works, and a window of 0 turns the check off.
func TestReservationCloneWindowAndHeartbeat(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	dir := t.TempDir()
	for _, d := range []string{"a", "clone"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o700))
	}
	a := openReg(t, filepath.Join(dir, "a", "c.u64"), "web_1", reg, WithHeartbeat(time.Second), WithRegistryTimeout(time.Second), WithCloneWindow(3*time.Second))
	defer a.Close()
	testfs.CopyFiles(t, filepath.Join(dir, "a"), filepath.Join(dir, "clone"), "c.u64", "c.u64.owner")
	clonePath := filepath.Join(dir, "clone", "c.u64")
	cloneHost := WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"})
	clonePlace := WithBindingDir(t.TempDir())

	before, _ := reg.Row("web_1")
	_, err := Open(clonePath, "web_1", WithRegistry(reg), cloneHost, clonePlace, WithHeartbeat(time.Second), WithRegistryTimeout(time.Second),
		WithCloneWindow(2999*time.Millisecond))
	require.ErrorIs(t, err, ErrInvalidOption)
	assert.Contains(t, err.Error(), "the clone window (2.999s) must be at least twice the heartbeat (1s) plus the registry timeout (1s)")
	h, _ := reg.Row("web_1")
	assert.Equal(t, before, h, "an invalid option reaches no registry")

	// Without a registry the clone options do not matter, and are not checked.
	g, err := Open(filepath.Join(dir, "standalone.u64"), "web_2", WithHeartbeat(time.Hour))
	require.NoError(t, err)
	require.NoError(t, g.Close())

	_, err = Open(clonePath, "web_1", WithRegistry(reg), cloneHost, clonePlace, WithHeartbeat(time.Hour), WithCloneWindow(3*time.Hour))
	require.ErrorIs(t, err, ErrProbableClone)

	c, err := Open(clonePath, "web_1", WithRegistry(reg), cloneHost, clonePlace, WithHeartbeat(time.Hour), WithCloneWindow(0))
	require.NoError(t, err, "a window of 0 turns the clone check off, whatever the heartbeat")
	defer c.Close()
	h, _ = reg.Row("web_1")
	assert.Equal(t, "h2", h.Hostname)
}

func TestReservationProcessesShareMark(t *testing.T) {
	t.Parallel()
	// Two Generators on one counter file stand for two processes: flock
	// locks belong to open file descriptions, so they exclude each other
	// as processes do.
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	a := openReg(t, path, "web_1", reg, WithReserveStep(20), WithOutageHorizon(0))
	b := openReg(t, path, "web_1", reg, WithReserveStep(20), WithOutageHorizon(0))

	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, g := range []*Generator{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				v, err := g.Next()
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if seen[v] {
					errs <- errors.New("duplicate")
				}
				seen[v] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Len(t, seen, 1000)

	require.NoError(t, a.Close())
	h, _ := reg.Row("web_1")
	assert.GreaterOrEqual(t, h.Reserved, uint64(1000), "not the last process: the reservation stays")
	v, err := b.Next()
	require.NoError(t, err, "the remaining process goes on")
	assert.Equal(t, uint64(1001), v)
	require.NoError(t, b.Close())
	h, _ = reg.Row("web_1")
	assert.Equal(t, uint64(1001), h.Reserved, "the last process out returns it")
}

// A copy of a counter directory used on the same machine (same owner
// token, same host info) is a second counter under the name: the host's
// record refuses it before the registry is asked. Where the copy keeps
// records of its own (a container sharing the machine's identity), it
// claims the name with a new session: the original can no longer extend,
// stops at its mark, and the two never share a number.
func TestReservationCopiedDirectorySameMachine(t *testing.T) {
	t.Parallel()
	for _, ownRecords := range []bool{false, true} {
		reg := registrytest.NewRegistry()
		dir := t.TempDir()
		for _, d := range []string{"a", "b"} {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o700))
		}
		g1 := openReg(t, filepath.Join(dir, "a", "c.u64"), "web_1", reg, WithReserveStep(10), WithOutageHorizon(0))
		defer g1.Close()
		from1 := draw(t, g1, 2)
		entries, err := os.ReadDir(filepath.Join(dir, "a"))
		require.NoError(t, err)
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(dir, "a", e.Name()))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "b", e.Name()), b, 0o600))
		}
		if !ownRecords {
			before, _ := reg.Row("web_1")
			_, err := Open(filepath.Join(dir, "b", "c.u64"), "web_1", WithRegistry(reg), WithReserveStep(10), WithOutageHorizon(0))
			require.ErrorIs(t, err, ErrNameBound)
			after, _ := reg.Row("web_1")
			require.Equal(t, before, after, "refused before the registry is asked")
			draw(t, g1, 30)
			continue
		}
		g2 := openReg(t, filepath.Join(dir, "b", "c.u64"), "web_1", reg, WithReserveStep(10), WithOutageHorizon(0), WithBindingDir(t.TempDir()))
		defer g2.Close()
		from2 := draw(t, g2, 30)
		for {
			v, err := g1.Next()
			if err != nil {
				require.ErrorIs(t, err, ErrNameTaken)
				break
			}
			from1 = append(from1, v)
			require.Less(t, len(from1), 100)
		}
		seen := map[uint64]bool{}
		for _, v := range from1 {
			seen[v] = true
		}
		for _, v := range from2 {
			require.False(t, seen[v], "number %d issued from both copies", v)
		}
	}
}

// A counter restored in place from a backup while processes of the host
// use it is raised to the reserved mark, by the running process and by a
// process that starts after the restore.
func TestReservationRollbackWhileRunning(t *testing.T) {
	t.Parallel()
	for _, who := range []string{"running", "joining"} {
		t.Run(who, func(t *testing.T) {
			reg := registrytest.NewRegistry()
			path := filepath.Join(t.TempDir(), "counter.u64")
			g1 := openReg(t, path, "web_1", reg, WithReserveStep(100), WithOutageHorizon(0))
			defer g1.Close()
			draw(t, g1, 5)
			backup, err := os.ReadFile(path)
			require.NoError(t, err)
			issued := draw(t, g1, 10)
			f, err := os.OpenFile(path, os.O_WRONLY, 0) // in place, as cp does
			require.NoError(t, err)
			_, err = f.WriteAt(backup, 0)
			require.NoError(t, err)
			require.NoError(t, f.Close())

			g := g1
			if who == "joining" {
				g = openReg(t, path, "web_1", reg, WithReserveStep(100), WithOutageHorizon(0))
				defer g.Close()
			}
			v, err := g.Next()
			require.NoError(t, err)
			assert.Greater(t, v, issued[len(issued)-1], "no number issued again after the roll-back")
		})
	}
}

// Without a registry, a counter that goes backwards under a running
// Generator is raised back above the highest value it saw, loudly, and
// issuance goes on: the raise is in the file (synced) before the next
// number is returned, so a later process does not issue from the restored
// value either.
func TestRollbackWithoutRegistryRaised(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "counter.u64")
	var logs bytes.Buffer
	g, err := Open(path, "web_1", WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	defer g.Close()
	draw(t, g, 3)
	backup, err := os.ReadFile(path)
	require.NoError(t, err)
	issued := draw(t, g, 3)
	require.NoError(t, os.WriteFile(path, backup, 0o600))

	v, err := g.Next()
	require.NoError(t, err)
	assert.Equal(t, issued[len(issued)-1]+1, v, "the next number follows the highest issued")
	assert.Equal(t, v, ctValue(t, path), "the raise is written with the number that follows it")
	assert.Contains(t, logs.String(), "level=ERROR")
	assert.Contains(t, logs.String(), "went backwards")

	// A process started after the raise goes on above it.
	g2, err := Open(path, "web_1")
	require.NoError(t, err)
	defer g2.Close()
	v2, err := g2.Next()
	require.NoError(t, err)
	assert.Equal(t, v+1, v2)
}

func TestRepairAndReleaseRefusedWhileInUse(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	g := openReg(t, path, "web_1", reg)
	defer g.Close()
	draw(t, g, 3)
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	_, err = Repair(path, 1)
	require.ErrorIs(t, err, ErrInUse)
	_, err = Release(t.Context(), path, "web_1", WithRegistry(reg))
	require.ErrorIs(t, err, ErrInUse)

	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, before, after, "nothing changed on disk")
	h, _ := reg.Row("web_1")
	assert.Equal(t, registry.StateActive, h.State, "nothing changed in the registry")
}

// A counter rolled back while in use and then closed cleanly: the set-back
// must not lower the registry's mark below what was issued.
func TestReservationRollbackThenCleanClose(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	g := openReg(t, path, "web_1", reg, WithReserveStep(100), WithOutageHorizon(0))
	draw(t, g, 5)
	backup, err := os.ReadFile(path)
	require.NoError(t, err)
	issued := draw(t, g, 10)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(backup, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, g.Close())

	g = openReg(t, path, "web_1", reg, WithReserveStep(100), WithOutageHorizon(0))
	defer g.Close()
	v, err := g.Next()
	require.NoError(t, err)
	assert.Greater(t, v, issued[len(issued)-1])
}

// A process joining the host's claim while the registry is down starts on
// the host's reserved range.
func TestReservationJoinWhileRegistryDown(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	first := openReg(t, path, "web_1", reg, WithReserveStep(100), WithOutageHorizon(0))
	defer first.Close()
	draw(t, first, 3)
	reg.SetDown(true)
	joiner := openReg(t, path, "web_1", reg, WithReserveStep(100), WithOutageHorizon(0))
	defer joiner.Close()
	assert.Equal(t, []uint64{4}, draw(t, joiner, 1))
	reg.SetDown(false)
}

// At a steady rate the reservation step grows to cover the outage horizon
// at that rate, at most 16-fold per extension (so that a short burst
// cannot make a crash's gap much larger than what was issued recently);
// at a low rate it stays at the configured step.
func TestReservationStepFollowsRate(t *testing.T) {
	t.Parallel()
	skipShort(t)
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	advance := clk.Advance
	g := openReg(t, path, "web_1", reg, WithReserveStep(100), WithOutageHorizon(time.Minute), WithSync(false), ExportWithClock(clk))
	defer g.Close()
	h, _ := reg.Row("web_1")
	require.Equal(t, uint64(100), h.Reserved, "no rate seen yet: the configured step")

	// 100 numbers per (fake) second: a minute at that rate is 6,000,
	// reached once the host has issued for a minute. The extensions run in
	// the background, so the counter may move a little between the
	// count and its clock reading: 2 % slack.
	var aheads []uint64 // how far the mark is ahead after each extension
	last := h.Reserved
	for i := 0; i < 30_000; i++ {
		advance(10 * time.Millisecond)
		v, err := g.Next()
		require.NoError(t, err)
		if h, _ := reg.Row("web_1"); h.Reserved != last {
			last = h.Reserved
			aheads = append(aheads, h.Reserved-v)
		}
	}
	require.GreaterOrEqual(t, len(aheads), 3, "extensions: %v", aheads)
	for i := 1; i < len(aheads); i++ {
		// ahead is the step less what was drawn before the reading
		assert.LessOrEqual(t, aheads[i], 16*(aheads[i-1]+100), "at most 16-fold per extension: %v", aheads)
	}
	top := slices.Max(aheads)
	assert.Greater(t, top, uint64(5_000), "the step reaches a minute at the rate: %v", aheads)
	assert.LessOrEqual(t, top, uint64(6_120), "no more than a minute at the rate seen: %v", aheads)
}

// The step is what the host issued over the horizon, not a short burst's
// rate stretched to it: 501 ids in one minute, then quiet, keep the
// default step, and a crash then skips at most DefaultReserveStep numbers
// (the README's promise for hosts issuing under 1,000 ids per 2 h).
func TestCrashGapAfterBurstIsOneStep(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	g := openReg(t, path, "web_1", reg, WithSync(false), ExportWithClock(clk))
	issued := uint64(0)
	for range 501 {
		clk.Advance(time.Minute / 501)
		issued = draw(t, g, 1)[0]
	}
	// The 501st crossed half of the first step: an extension runs.
	require.Eventually(t, func() bool { h, _ := reg.Row("web_1"); return h.Reserved > DefaultReserveStep },
		10*time.Second, time.Millisecond)
	require.NoError(t, Crash(g))
	h, _ := reg.Row("web_1")
	assert.LessOrEqual(t, h.Reserved-issued, uint64(DefaultReserveStep), "the mark is at most one default step ahead")
	g = openReg(t, path, "web_1", reg, WithSync(false), ExportWithClock(clk))
	defer g.Close()
	next := draw(t, g, 1)[0]
	assert.LessOrEqual(t, next-issued-1, uint64(DefaultReserveStep), "the crash skipped %d numbers", next-issued-1)
}

// With the default step, a low-rate host's crash costs at most
// DefaultReserveStep numbers: short ids stay short.
func TestCrashGapAtLowRateIsSmall(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	g := openReg(t, path, "web_1", reg)
	issued := draw(t, g, 5)
	require.NoError(t, Crash(g))
	g = openReg(t, path, "web_1", reg)
	defer g.Close()
	next := draw(t, g, 1)[0]
	assert.Greater(t, next, issued[len(issued)-1])
	// The default step is small (1,000), not a million: a CMS host's
	// first crash must not turn web_1-6 into web_1-1000006.
	assert.LessOrEqual(t, next, uint64(1_001), "the crash skipped at most one default step")
}

// Stats count the counter updates and the numbers they reserved, so that
// operators can see what group commit and block mode save.
func TestStats(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "counter.u64")
	g, err := Open(path, "web_1", WithSync(false))
	require.NoError(t, err)
	defer g.Close()
	draw(t, g, 10)
	st := g.Stats()
	assert.Equal(t, uint64(10), st.CounterUpdates, "one caller: one update per id")
	assert.Equal(t, uint64(10), st.NumbersReserved)
	assert.Equal(t, uint64(10), st.IDsIssued)
	assert.Positive(t, st.UpdateLatencySeconds.Sum)
	assert.Equal(t, uint64(10), st.UpdateLatencySeconds.Count)
	assert.Equal(t, uint64(10), st.UpdateSizeNumbers.Counts[0], "ten updates of one number each")
	assert.Nil(t, st.Registry, "no registry")

	b, err := Open(path, "web_1", WithSync(false), WithBlock(100))
	require.NoError(t, err)
	defer b.Close()
	draw(t, b, 10)
	st = b.Stats()
	assert.Equal(t, uint64(1), st.CounterUpdates, "block mode: one update for the block")
	assert.Equal(t, uint64(100), st.NumbersReserved)
	assert.Equal(t, uint64(10), st.IDsIssued, "the rest of the block is not issued")
}

// A request that cannot fit below 2^64-1 is ErrExhausted, decided before
// the registry is touched: the registry's mark, the mark file and the
// counter stay as they were, and the name can still issue.
func TestOverflowWithRegistryChangesNothing(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	g := openReg(t, path, "web_1", reg)
	defer g.Close()
	draw(t, g, 1)
	row, _ := reg.Row("web_1")
	mark, _, err := ReadMark(path)
	require.NoError(t, err)

	_, err = g.NextN(math.MaxUint64)
	require.ErrorIs(t, err, ErrExhausted)
	assert.NotErrorIs(t, err, ErrReservationExhausted)

	after, _ := reg.Row("web_1")
	assert.Equal(t, row.Reserved, after.Reserved, "the registry's mark did not move")
	markAfter, _, err := ReadMark(path)
	require.NoError(t, err)
	assert.Equal(t, mark, markAfter, "the mark file did not move")
	assert.Equal(t, uint64(1), ctValue(t, path), "the counter did not move")
	assert.Equal(t, []uint64{2}, draw(t, g, 1), "the name goes on issuing")
}

// A caller whose request cannot fit shares its group-commit group with one
// that can: the group is served one by one, so the small request gets its
// number and only the large one fails, with ErrExhausted.
func TestOverflowWithRegistryInGroup(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	hold, entered, release := ExportHoldNextWrite()
	g := openReg(t, path, "web_1", reg, hold)
	defer g.Close()
	leader := make(chan error, 1)
	go func() {
		_, err := g.NextN(10) // 1..10, held in its write
		leader <- err
	}()
	<-entered
	var small, large error
	var smallN uint64
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); smallN, small = g.Next() }()
	go func() { defer wg.Done(); _, large = g.NextN(math.MaxUint64 - 5) }() // alone it would pass 2^64-1
	for g.ExportOpenGroupSize() < math.MaxUint64-4 {
		runtime.Gosched()
	}
	release()
	wg.Wait()
	require.NoError(t, <-leader)
	require.NoError(t, small)
	assert.Equal(t, uint64(11), smallN)
	require.ErrorIs(t, large, ErrExhausted)
	assert.NotErrorIs(t, large, ErrReservationExhausted)
	row, _ := reg.Row("web_1")
	assert.Less(t, row.Reserved, uint64(math.MaxUint64), "the registry's mark was not raised to 2^64-1")
}

// At exactly 2^64-1 the error is ErrExhausted, not a reservation that
// might come back.
func TestExhaustedAtLastNumberWithRegistry(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	g := openReg(t, path, "web_1", reg, WithTakeover(math.MaxUint64-1))
	defer g.Close()
	assert.Equal(t, []uint64{math.MaxUint64}, draw(t, g, 1))
	_, err := g.Next()
	require.ErrorIs(t, err, ErrExhausted)
	assert.NotErrorIs(t, err, ErrReservationExhausted)
}

// lockCounterExternally takes the counter's flock from a descriptor of its
// own, as another process would, and returns the function that lets it go.
func lockCounterExternally(t *testing.T, path string) (unlock func()) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_EX))
	var once sync.Once
	unlock = func() { once.Do(func() { f.Close() }) }
	t.Cleanup(unlock)
	return unlock
}

// waitUpdateInFlight waits until a counter update of g holds the
// Generator's file mutex (it is then waiting for the counter's flock).
func waitUpdateInFlight(g *Generator) {
	for !g.ExportUpdateInFlight() {
		runtime.Gosched()
	}
}

// Close while a call of the same process waits for the counter's lock
// (held by another process): the waiting update gives up (ErrClosed,
// nothing taken), so Close returns at once and the process leaves the
// host's presence. The other process is then the last one: its Close sets
// the registry's mark back to the counter once it can read it, and the
// mark covers every number issued.
func TestCloseWithCallInFlight(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	g1 := openReg(t, path, "web_1", reg)
	g2 := openReg(t, path, "web_1", reg)
	issued := append(draw(t, g1, 2), draw(t, g2, 2)...)

	unlock := lockCounterExternally(t, path)
	type result struct {
		n   uint64
		err error
	}
	inFlight := make(chan result, 1)
	go func() {
		n, err := g1.Next()
		inFlight <- result{n, err}
	}()
	waitUpdateInFlight(g1)
	closed1 := make(chan error, 1)
	go func() { closed1 <- g1.Close() }()
	select {
	case res := <-inFlight:
		require.ErrorIs(t, res.err, ErrClosed, "the update waiting for the lock gave up")
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the update waiting for the counter's lock")
	}
	select {
	case err := <-closed1:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for the other process's lock")
	}

	closed2 := make(chan error, 1)
	go func() { closed2 <- g2.Close() }()
	time.Sleep(100 * time.Millisecond)
	unlock()
	require.NoError(t, <-closed2)
	top := slices.Max(issued)
	row, _ := reg.Row("web_1")
	assert.GreaterOrEqual(t, row.Reserved, top, "the registry's mark covers every number issued")
	assert.Equal(t, top, row.Reserved, "the last Close set the mark back to the counter")
	assert.GreaterOrEqual(t, ctValue(t, path), top)
}

// After the reservation is closed (the last process set the mark back), a
// caller that still wanted room gets ErrClosed and the registry's mark is
// not raised again: a clean restart leaves no gap.
func TestNoExtensionAfterClose(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	g := openReg(t, path, "web_1", reg)
	draw(t, g, 3)
	require.NoError(t, g.ExportCloseReservation())
	row, _ := reg.Row("web_1")
	require.Equal(t, uint64(3), row.Reserved, "set back to the counter")

	err := g.ExportExtend(t.Context(), 10)
	require.ErrorIs(t, err, ErrClosed)
	row, _ = reg.Row("web_1")
	assert.Equal(t, uint64(3), row.Reserved, "not raised after the set-back")
	require.NoError(t, Crash(g)) // closes the descriptors
}

// A counter restored below the registry's mark is raised to the mark at
// start-up, in the file itself, before anything is issued: Snap! and
// 'snapctl show' then see a value at or above what the registry reserved.
func TestStartRaisesRestoredCounterToRegistryMark(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	backup := EncodeCounter(0)
	g := openReg(t, path, "web_1", reg, WithReserveStep(100))
	draw(t, g, 3)
	crash(t, g) // the registry's mark stays above the counter
	row, _ := reg.Row("web_1")
	require.Greater(t, row.Reserved, uint64(3))
	require.NoError(t, os.WriteFile(path, backup[:], 0o600))

	g = openReg(t, path, "web_1", reg, WithReserveStep(100))
	defer g.Close()
	v, err := ReadCounter(path)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, v, row.Reserved, "the counter file is raised to the registry's mark at Open")
}

// The highest value this process saw counts when the counter and the mark
// file are restored together: a writer without the registry advanced the
// counter to 50 and this process read it (a background extension), then
// both files were put back; the next number must be above 50.
func TestRegistryCheckUsesHighestSeen(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	dir := t.TempDir()
	path := filepath.Join(dir, "counter.u64")
	g := openReg(t, path, "web_1", reg)
	defer g.Close()
	draw(t, g, 5)
	saved := t.TempDir()
	testfs.CopyFiles(t, dir, saved, "counter.u64", "counter.u64.mark")

	_, err := Init(path, 51) // a writer without the registry
	require.NoError(t, err)
	require.NoError(t, g.ExportExtend(t.Context(), 0)) // reads the counter: 50
	testfs.CopyFiles(t, saved, dir, "counter.u64", "counter.u64.mark")
	require.Equal(t, uint64(5), ctValue(t, path))

	v, err := g.Next()
	require.NoError(t, err)
	assert.Greater(t, v, uint64(50), "numbers up to 50 were issued by the other writer")
}

// With the registry away, the background extensions that keep failing log
// one warning, not one per attempt; when the registry is back, one line
// says so.
func TestExtensionFailuresLoggedOnce(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	var buf syncBuffer
	g := openReg(t, path, "web_1", reg, WithReserveStep(100), WithOutageHorizon(0), WithSync(false),
		WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	defer g.Close()
	draw(t, g, 10)
	reg.SetDown(true)
	for range 80 { // up to 90 of the 100 reserved: every draw past 50 may start an extension
		draw(t, g, 1)
		for g.ExportExtending() {
			runtime.Gosched()
		}
	}
	assert.Equal(t, 1, strings.Count(buf.String(), "extending the reserved range failed"), "one warning for the outage:\n%s", buf.String())
	reg.SetDown(false)
	draw(t, g, 1)
	require.Eventually(t, func() bool { return strings.Contains(buf.String(), "extending the reserved range works again") },
		10*time.Second, time.Millisecond, "the recovery is logged:\n%s", buf.String())
	assert.Equal(t, 1, strings.Count(buf.String(), "works again"))
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// A take-over floor must leave a number: MaxNumber is refused before
// anything is claimed; every lower floor issues floor+1 next.
func TestTakeoverFloorBoundaries(t *testing.T) {
	t.Parallel()
	for _, floor := range []uint64{0, 1, 1<<63 - 1, 1 << 63, math.MaxUint64 - 1, math.MaxUint64} {
		t.Run(strconv.FormatUint(floor, 10), func(t *testing.T) {
			reg := registrytest.NewRegistry()
			dir := t.TempDir()
			a := openReg(t, filepath.Join(dir, "a.u64"), "web_1", reg, WithReserveStep(10), WithOutageHorizon(0))
			draw(t, a, 3)
			crash(t, a)
			before, _ := reg.Row("web_1")
			bPath := filepath.Join(dir, "b.u64")
			b, err := Open(bPath, "web_1", WithRegistry(reg), WithSync(false),
				WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}), WithBindingDir(t.TempDir()), WithTakeover(floor))
			if floor == math.MaxUint64 {
				require.ErrorIs(t, err, ErrInvalidOption)
				after, _ := reg.Row("web_1")
				assert.Equal(t, before, after, "a refused floor changes nothing in the registry")
				_, statErr := os.Stat(bPath)
				assert.ErrorIs(t, statErr, os.ErrNotExist, "a refused floor creates no counter")
				return
			}
			require.NoError(t, err)
			defer b.Close()
			v, err := b.Next()
			require.NoError(t, err)
			assert.Equal(t, max(floor, before.Reserved)+1, v, "above the floor and the old holder's mark")
		})
	}
}

// recordHandler keeps every record logged through it.
type recordHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

func (h *recordHandler) messages() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.records {
		out = append(out, r.Level.String()+" "+r.Message)
	}
	return out
}

// A background extension that finds the name taken over says what
// happens: nothing more is issued (the next call fails with
// ErrNameTaken), not that ids keep flowing until the mark.
func TestBackgroundExtensionNameTakenLogsTheTruth(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	dir := t.TempDir()
	rec := &recordHandler{}
	a := openReg(t, filepath.Join(dir, "a.u64"), "web_1", reg, WithReserveStep(10), WithOutageHorizon(0),
		WithLogger(slog.New(rec)))
	defer a.Close()
	draw(t, a, 3)
	b, err := Open(filepath.Join(dir, "b.u64"), "web_1", WithRegistry(reg), WithSync(false),
		WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}), WithBindingDir(t.TempDir()), WithTakeover(100))
	require.NoError(t, err)
	defer b.Close()
	draw(t, a, 3) // the 6th leaves less than half a step: a background extension
	taken := func() bool {
		for _, m := range rec.messages() {
			if strings.Contains(m, "taken over") {
				return true
			}
		}
		return false
	}
	require.Eventually(t, taken, 10*time.Second, time.Millisecond, "logged: %q", rec.messages())
	for _, m := range rec.messages() {
		assert.NotContains(t, m, "keep flowing", "the log must not promise ids that will not come")
		if strings.Contains(m, "taken over") {
			assert.Contains(t, m, "ERROR")
			assert.Contains(t, m, "no more ids will be issued")
		}
	}
	_, err = a.Next()
	require.ErrorIs(t, err, ErrNameTaken, "as the log says: nothing more is issued")
}

// One counter, one name: a counter whose host holds web_2 is refused a
// claim of web_1 (ErrNameMismatch) before anything is written, even with
// WithReclaim (snapctl register); once web_2 is released, or taken over
// by another owner and its record removed from this host, the counter may
// take another name.
func TestSecondNameOnCounterRefused(t *testing.T) {
	reg := registrytest.NewRegistry()
	dir := t.TempDir()
	path := filepath.Join(dir, "a.u64")
	g := openReg(t, path, "web_2", reg)
	draw(t, g, 3)
	require.NoError(t, g.Close())
	for _, opts := range [][]Option{nil, {WithReclaim()}} {
		_, err := Open(path, "web_1", append([]Option{WithRegistry(reg), WithSync(false)}, opts...)...)
		require.ErrorIs(t, err, ErrNameMismatch)
		assert.Contains(t, err.Error(), `holds the name "web_2"`)
		_, ok := reg.Row("web_1")
		assert.False(t, ok, "no row written for the second name")
	}
	h, _ := reg.Row("web_2")
	assert.Equal(t, registry.StateActive, h.State, "the first name's row is untouched")

	// Taken over by another owner: the counter no longer holds web_2.
	other := filepath.Join(dir, "b.u64")
	b, err := Open(other, "web_2", WithRegistry(reg), WithSync(false),
		WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}), WithBindingDir(t.TempDir()), WithTakeover(100))
	require.NoError(t, err)
	require.NoError(t, b.Close())
	// This host's record still ties the counter to web_2 (a take-over
	// elsewhere changes no file here): refused, naming the way out.
	_, err = Open(path, "web_1", WithRegistry(reg), WithSync(false), WithReclaim())
	require.ErrorIs(t, err, ErrNameMismatch)
	require.NoError(t, os.Remove(filepath.Join(ExportTestBindingDir(path), "web_2")))
	g, err = Open(path, "web_1", WithRegistry(reg), WithSync(false), WithReclaim())
	require.NoError(t, err, "web_2 is no longer this counter's")
	require.NoError(t, g.Close())

	// Released: the host gave web_1 up, and may take web_3.
	_, err = Release(t.Context(), path, "web_1", WithRegistry(reg))
	require.NoError(t, err)
	g, err = Open(path, "web_3", WithRegistry(reg), WithSync(false), WithReclaim())
	require.NoError(t, err, "a released name may be followed by another")
	require.NoError(t, g.Close())
}

// The host's last process holds the host's gate from the moment it finds
// itself last until it has set the name's mark back and recorded where
// the host's sequence leases stand: a process starting meanwhile waits at
// the gate (and then claims anew), never joins the closing claim, whose
// leases the registry now records as closed at their position (a copy of
// a lease file made there would be carried over by the next claim and
// repeat what the joiner took).
func TestCloseHoldsTheGateUntilTheMarkIsSetBack(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	_, path := ctPath(t)
	g := openReg(t, path, "web_1", reg)
	_, err := g.UniqueID()
	require.NoError(t, err)

	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	reg.SetHook(func(_ context.Context, op, _ string) error {
		if op == "get" {
			once.Do(func() {
				close(held)
				<-release
			})
		}
		return nil
	})
	closed := make(chan error, 1)
	go func() { closed <- g.Close() }()
	<-held // the last process is about to set the mark back

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = OpenContext(ctx, path, "web_1", WithRegistry(reg), WithSync(false), WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"}))
	require.ErrorIs(t, err, ErrLocked, "an Open while the last process closes must wait at the host's gate")
	require.ErrorContains(t, err, "finish starting or closing")

	close(release)
	require.NoError(t, <-closed)
	reg.SetHook(nil)
	g2 := openReg(t, path, "web_1", reg)
	defer g2.Close()
	_, err = g2.UniqueID()
	require.NoError(t, err)
}

// extendFails is a registry whose claims stand and whose extensions
// fail: an Open fails right after its claim.
type extendFails struct{ registry.Registry }

func (extendFails) Extend(ctx context.Context, name, owner, session string, from, to uint64) (registry.Holder, error) {
	return registry.Holder{}, errors.New("extendFails: no extension")
}

// A standalone host that handed out numbers joins a registry, and its
// Open fails after the claim stood: the registry's mark already covers
// the numbers it handed out, so that nobody (a take-over, an audit) reads
// a mark below them.
func TestClaimCoversNumbersHandedOutBeforeTheRegistry(t *testing.T) {
	t.Parallel()
	h := newSeqHost(t, "cf")
	g, err := Open(h.path, h.name, WithBindingDir(t.TempDir()))
	require.NoError(t, err)
	first, err := g.NextN(300)
	require.NoError(t, err)
	require.NoError(t, g.Close())
	last := first + 299

	reg := registrytest.NewRegistry()
	_, err = Open(h.path, h.name, WithRegistry(extendFails{reg}), WithHostInfo(h.info), WithRegistryTimeout(2*time.Second))
	require.Error(t, err, "the Open cannot extend")
	row, err := reg.Get(context.Background(), h.name)
	require.NoError(t, err, "the claim stood")
	require.GreaterOrEqual(t, row.Reserved, last, "the registry's mark is below numbers the host handed out before it joined")
}

// A decimal request near 2^64-1 whose ids fit, though the most a request
// of its size could take would not, is checked against the registry's
// mark like any other: it counts its numbers from where it starts, as
// the counter's update does. Otherwise it went past the mark with nothing
// written to the registry, and a host that took the name over from the
// mark after a crash handed the same ids out again.
func TestReservationDecimalNearTheTopStaysUnderTheMark(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	const start = math.MaxUint64 - 300 // 300 numbers left, 270 of them not ending in 0
	pathA := filepath.Join(t.TempDir(), "counter.u64")
	a := openReg(t, pathA, "web_1", reg, WithFormat(FormatDecimal), WithReserveStep(50), WithSync(true), WithTakeover(start),
		WithHostInfo(HostInfo{Hostname: "a", MachineID: "ma"}))
	issued := map[string]bool{}
	var high uint64
	require.NoError(t, a.NextIDs(270, func(id ID) { issued[id.String()] = true; high = id.Number }))
	require.Len(t, issued, 270)
	row, ok := reg.Row("web_1")
	require.True(t, ok)
	require.LessOrEqual(t, high, row.Reserved, "an id above the registry's mark was handed out")
	require.NoError(t, Crash(a)) // the host is lost

	// The host that takes the name over starts at the registry's mark:
	// here 2^64-1, so it has nothing left to hand out.
	pathB := filepath.Join(t.TempDir(), "counter.u64")
	b, err := Open(pathB, "web_1", WithRegistry(reg), WithFormat(FormatDecimal), WithSync(true), WithTakeover(0),
		WithHostInfo(HostInfo{Hostname: "b", MachineID: "mb"}))
	if err == nil {
		defer b.Close()
		for range 20 {
			id, err := b.NextID()
			if errors.Is(err, ErrExhausted) {
				break
			}
			require.NoError(t, err)
			require.False(t, issued[id.String()], "the host that took the name over handed out %s again", id)
		}
		return
	}
	require.ErrorIs(t, err, ErrExhausted)
}

// markWriteFaults is the real file system whose writes to the mark file
// fail while armed (an I/O error, a full disk).
type markWriteFaults struct {
	statefile.OS
	armed atomic.Bool
}

func (m *markWriteFaults) ReadAt(f *os.File, b []byte, off int64) (int, error) {
	return f.ReadAt(b, off)
}
func (m *markWriteFaults) WriteAt(f *os.File, b []byte, off int64) (int, error) {
	if m.armed.Load() && strings.HasSuffix(f.Name(), ".mark") {
		return 0, syscall.EIO
	}
	return f.WriteAt(b, off)
}
func (m *markWriteFaults) Sync(f *os.File) error { return f.Sync() }

// An update whose floor cannot be recorded in the mark file hands out
// nothing: the floor is what lets the host's other running processes find
// the counter restored in place under them, and a number handed out
// without it was handed out again by a process that had not seen it once
// the counter alone was put back.
func TestReservationFloorNotRecordedHandsOutNothing(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	host := newSeqHost(t, "web")
	fsys := &markWriteFaults{}
	p0 := host.open(t, reg, WithSync(true), ExportWithFileFS(fsys))
	defer p0.Close()
	p1 := host.open(t, reg, WithSync(true))
	defer p1.Close()
	_, err := p0.Next()
	require.NoError(t, err)
	_, err = p1.Next()
	require.NoError(t, err)
	backup, err := os.ReadFile(host.path) // the counter at 2
	require.NoError(t, err)

	fsys.armed.Store(true)
	a, err := p0.Next()
	fsys.armed.Store(false)
	if err == nil {
		// Handed out: the counter alone put back in place under the
		// running processes must not make it repeat.
		writeInPlace(t, host.path, backup)
		b, err := p1.Next()
		require.NoError(t, err)
		require.NotEqual(t, a, b, "number %d handed out twice", a)
		return
	}
	require.ErrorIs(t, err, syscall.EIO)
	_, err = p0.Next() // the mark file writable again: it issues again
	require.NoError(t, err)
}

// Another user who may read a sequence's lease file (mode 0644) holds its
// lock as the host's last process closes: recording where the host's
// sequence leases stand waits for it no longer than a registry timeout,
// and the return of the unused reservation has a registry timeout of its
// own after that, so a clean close still leaves no gap.
func TestCloseReturnsTheMarkWhileALeaseFileIsLocked(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	counter := filepath.Join(lockDir(t), "c")
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, 1_000_000)
	g, err := Open(counter, "vm", WithRegistry(reg), WithFileMode(0o644), WithRegistryTimeout(time.Second))
	require.NoError(t, err)
	s, err := g.Sequence("orders")
	require.NoError(t, err)
	_, err = s.Next()
	require.NoError(t, err)
	require.NoError(t, s.Close())
	id, err := g.Next()
	require.NoError(t, err)
	release := testfs.HoldFlockCancel(t, counter+".seq.orders")
	defer release()
	require.NoError(t, g.Close(), "a clean close")
	h, err := reg.Get(context.Background(), "vm")
	require.NoError(t, err)
	require.Equal(t, id, h.Reserved, "the unused reservation is returned at a clean close")
}
