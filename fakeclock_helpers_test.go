package snapid_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/clock"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

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
func (h *fakeHost) close(g *Generator) {
	h.t.Helper()
	done := make(chan error, 1)
	go func() { done <- g.Close() }()
	bound := time.After(settleBound)
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
			h.clk.Advance(time.Second)
		}
	}
}
