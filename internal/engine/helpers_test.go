package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/snapid/snapid/internal/clock"
	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// Helpers of the external tests (package snapid_test): the tests that open
// Generators on registrytest's in-memory registry.

var errInjected = errors.New("injected I/O error")

// ctPath returns a fresh directory and a counter path in it (not created).
func ctPath(t *testing.T) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	return dir, filepath.Join(dir, "counter.u64")
}

// crash abandons g as a killed process would: its locks and descriptors go
// away, but nothing is returned to the registry.
func crash(t *testing.T, g *Generator) {
	t.Helper()
	require.NoError(t, Crash(g))
}

// ctValue reads the counter's last issued number.
func ctValue(t *testing.T, path string) uint64 {
	t.Helper()
	v, err := ReadCounter(path)
	require.NoError(t, err)
	return v
}

func openReg(t *testing.T, path, name string, reg registry.Registry, opts ...Option) *Generator {
	t.Helper()
	opts = append([]Option{WithRegistry(reg), WithSync(false), WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"})}, opts...)
	g, err := Open(path, name, opts...)
	require.NoError(t, err)
	return g
}

func draw(t *testing.T, g *Generator, n int) []uint64 {
	t.Helper()
	out := make([]uint64, 0, n)
	for i := 0; i < n; i++ {
		v, err := g.Next()
		require.NoError(t, err)
		out = append(out, v)
	}
	return out
}

// requireCorruptFile checks that err is ErrCorrupt naming (as a
// FileError's path) a file whose name holds suffix: the counter's own
// errors name the counter, those of the files beside it that file.
func requireCorruptFile(t *testing.T, err error, suffix string, msgAndArgs ...any) {
	t.Helper()
	require.ErrorIs(t, err, ErrCorrupt, msgAndArgs...)
	var fe *FileError
	require.ErrorAs(t, err, &fe, "a corrupt file's error names the file: %v", err)
	require.Contains(t, filepath.Base(fe.Path), suffix, "the file named: %v", err)
}

// watchLastSeen moves the host's fake clock d forward in steps of
// by, and after each samples the row's last-seen age and tries a clone's
// claim (same owner token, another machine) with the clone window: it
// must be refused while the host runs. It returns the worst age seen and
// whether the clone's claim went through. stalled are processes whose
// refresh is stopped mid-call (step does not wait for them).
func watchLastSeen(t *testing.T, h *fakeHost, reg *registrytest.Registry, window, d, by time.Duration, stalled ...*Generator) (worst time.Duration, cloned bool) {
	t.Helper()
	row, ok := reg.Row("web_1")
	require.True(t, ok)
	owner := row.Owner
	cloned = h.run(d, by, func() bool {
		row, _ := reg.Row("web_1")
		worst = max(worst, h.clk.Since(row.LastSeen))
		if window == 0 {
			return false // only watch
		}
		_, err := reg.Claim(context.Background(), registry.Claim{Name: "web_1", Owner: owner, Hostname: "h2", MachineID: "m2", CloneWindow: window})
		return err == nil
	}, stalled...)
	return worst, cloned
}

// fakeStart is where fake clocks start: a fixed time, far from the wall
// clock's, so that a reading of the real clock by mistake shows.
var fakeStart = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// settleBound bounds a test's real waits for goroutines to catch up with a
// fake clock: seconds, which no starvation of a busy machine reaches.
const settleBound = 30 * time.Second

// fakeHost is one host's clock in a test: a fake clock shared by the
// Generators the test opens on it (one host's processes) and, when given,
// by the in-memory registry (last-seen, clone windows). Time moves only in
// step, and step waits until every heartbeat loop has handled the move, so
// what happens depends on no scheduler and no load.
type fakeHost struct {
	t    *testing.T
	clk  *clock.Fake
	gens []*Generator
}

func newFakeHost(t *testing.T, reg *registrytest.Registry) *fakeHost {
	h := &fakeHost{t: t, clk: clock.NewFake(fakeStart)}
	if reg != nil {
		reg.SetClock(h.clk.Now)
	}
	return h
}

// opt is the Option putting a Generator on the host's clock.
func (h *fakeHost) opt() Option { return ExportWithClock(h.clk) }

// open is openReg on the host's clock; step waits for its heartbeat.
func (h *fakeHost) open(path, name string, reg registry.Registry, opts ...Option) *Generator {
	h.t.Helper()
	g := openReg(h.t, path, name, reg, append(slices.Clone(opts), h.opt())...)
	h.gens = append(h.gens, g)
	return g
}

// settle waits until every running heartbeat loop of the host's
// Generators is back waiting on the clock, and each refresh in flight
// (but stalled's) is waiting on it too (for a record lock held by another
// process, say): a waiter armed for each.
func (h *fakeHost) settle(stalled ...*Generator) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settleBound)
	defer cancel()
	for {
		running, busy := 0, 0
		for _, g := range h.gens {
			if g.ExportHeartbeatRunning() {
				running++
			}
			if g.ExportHeartbeatBusy() && !slices.Contains(stalled, g) {
				busy++
			}
		}
		if h.clk.Waiters() >= running+busy {
			return
		}
		select {
		case <-ctx.Done():
			h.t.Fatalf("the heartbeats did not settle in %v (%d waiting on the clock, %d loops running, %d refreshes in flight)", settleBound, h.clk.Waiters(), running, busy)
		case <-time.After(100 * time.Microsecond):
		}
	}
}

// step moves the clock d forward once the host has settled, and waits
// for it to settle again.
func (h *fakeHost) step(d time.Duration, stalled ...*Generator) {
	h.t.Helper()
	h.settle(stalled...)
	h.clk.Advance(d)
	h.settle(stalled...)
}

// run moves the clock total forward in steps of by, calling each (if not
// nil) after every step; each returning true ends it early. It reports
// whether each did.
func (h *fakeHost) run(total, by time.Duration, each func() bool, stalled ...*Generator) bool {
	h.t.Helper()
	for moved := time.Duration(0); moved < total; moved += by {
		h.step(by, stalled...)
		if each != nil && each() {
			return true
		}
	}
	return false
}

// until steps the clock by by until cond holds, at most max steps; it
// fails the test otherwise.
func (h *fakeHost) until(by time.Duration, max int, cond func() bool, msg string, stalled ...*Generator) {
	h.t.Helper()
	for range max {
		if cond() {
			return
		}
		h.step(by, stalled...)
	}
	require.True(h.t, cond(), msg)
}

// close closes g while moving the clock on: a refresh or a record update
// of g that waits on the clock (a slow registry's reply, a record lock
// held by another process) ends, so Close does not wait for it forever.
// While a registry call is in flight (a context waits for its deadline on
// the clock) the clock stands still for closeGrace of real time first: a
// call Close makes is sent and answered however busy the machine is, and
// only one that hangs is timed out.
func (h *fakeHost) close(g *Generator) {
	h.t.Helper()
	done := make(chan error, 1)
	go func() { done <- g.Close() }()
	bound := time.After(settleBound)
	var inFlight time.Time // since when a call has been in flight (zero: none)
	for {
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, ErrClosed) {
				h.t.Errorf("Close: %v", err)
			}
			return
		case <-bound:
			h.t.Fatalf("Close did not return in %v", settleBound)
		case <-time.After(time.Millisecond):
			// Steps shorter than any registry timeout the tests set: a
			// call that starts during a step is not timed out by it.
			switch {
			case h.clk.AdvanceIdle(closeStep):
				inFlight = time.Time{}
			case inFlight.IsZero():
				inFlight = time.Now()
			case time.Since(inFlight) > closeGrace:
				h.clk.Advance(time.Second)
			}
		}
	}
}

// closeGrace is how long close lets a registry call in flight run before
// moving the clock past its deadline; closeStep is how far it moves the
// clock at a time while none is.
const (
	closeGrace = 2 * time.Second
	closeStep  = 50 * time.Millisecond
)

// Set-up shared by the tests that put another user (nobody) on the host
// beside root.

// nobody is the uid (and gid) of the other user.
const nobody = 65534

// requireRoot skips (or, under the test command, fails) a test that needs
// root.
func requireRoot(t *testing.T) { t.Helper(); testfs.RequireRoot(t) }

// skipShort skips a test that waits more than a second under -short
// (see the package's export_test.go).
var skipShort = SkipShort

// lockDir is a directory the other user can reach.
func lockDir(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp("", "snapid-lockwait-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	require.NoError(t, os.Chmod(root, 0o755))
	// A level below: the test's own host for the records of names (see
	// export_test.go).
	host := filepath.Join(root, "host")
	require.NoError(t, os.Mkdir(host, 0o755))
	return host
}

// requireLockedWithin runs fn and checks that it returns, within limit,
// an ErrLocked naming the holder.
func requireLockedWithin(t *testing.T, limit time.Duration, fn func() error) {
	t.Helper()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- fn() }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrLocked)
		require.Contains(t, err.Error(), "held by pid")
		t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(limit):
		t.Fatalf("still waiting %v later for another process's flock", limit)
	}
}
