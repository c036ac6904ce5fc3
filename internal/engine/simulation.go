package engine

import (
	"runtime"
	"time"

	"github.com/snapid/snapid/internal/clock"
	"github.com/snapid/snapid/internal/statefile"
)

// What the simulator (internal/sim) drives: a Generator's I/O, file
// system, clock and retry waits replaced through options, a Generator
// abandoned as a killed process would be, and what it waits on between
// steps. Package snapid gives users none of these.

// FileIO is the counter and lease files' I/O, which WithIO replaces.
type FileIO interface {
	fileIO
}

// WithIO replaces the counter and lease files' I/O.
func WithIO(x FileIO) Option { return withIO(x) }

// WithFS replaces the file-system layer (creating, linking, renaming,
// removing and syncing state files).
func WithFS(f statefile.FS) Option { return withFS(f) }

// WithClock replaces the Generator's clock: every time it reads
// (heartbeats, clone windows, reservation rates, block and lease sizes),
// every timer, ticker and sleep, every context deadline it creates. Each
// Generator has its own, so each simulated host may run its own clock.
func WithClock(c clock.Clock) Option { return withClock(c) }

// WithRetryWait replaces the waits between a start-up's retried registry
// calls.
func WithRetryWait(wait func(attempt int) time.Duration) Option { return withRetryWait(wait) }

// Crash abandons g as a killed process would: its locks and descriptors
// go away (its Sequences' lease files too), but nothing is written and
// nothing is returned to the registry.
func Crash(g *Generator) error {
	g.closed.Store(true)
	if g.block != nil {
		g.block.Close()
	}
	for _, s := range g.seqs.Open() {
		_ = s.Close() // as a killed process: its prefetch stops, its locks and descriptors go; the registry is told nothing (the Generator's last Close does)
	}
	if g.res != nil {
		if err := g.res.Abandon(); err != nil {
			return err
		}
	}
	g.host.drop() // its presence lock goes, nothing is written
	return g.file.Close()
}

// Settle waits until g has no background work running (an extension, a
// block or lease reserved ahead, a group commit finishing for callers that
// left), so that a simulator running one operation at a time sees the
// same history on every run.
func Settle(g *Generator) {
	for g.busy() {
		runtime.Gosched()
		time.Sleep(10 * time.Microsecond)
	}
}

// busy reports whether g has background work running (see Settle).
func (g *Generator) busy() bool {
	if g.res != nil && g.res.Extending() {
		return true
	}
	if g.block != nil && g.block.Busy() {
		return true // the next block, reserved ahead
	}
	if gc := g.gc; gc != nil {
		// A leader whose caller left finishes its update in a goroutine
		// of its own (an extension among it).
		if gc.Flushing() {
			return true
		}
	}
	for _, s := range g.seqs.Open() {
		if s.Busy() {
			return true
		}
	}
	return false
}

// GroupMembers returns how many of g's calls got their numbers from
// another caller's counter update (they joined a group commit as members
// rather than leading one).
func GroupMembers(g *Generator) uint64 {
	if gc := g.gc; gc != nil {
		return gc.Members()
	}
	return 0
}

// GroupQueued returns how many of g's callers are in the group waiting for
// the update in progress (0: no group waits; 2 or more: a caller joined
// another's group).
func GroupQueued(g *Generator) int {
	if g.gc == nil {
		return 0
	}
	callers, _ := g.gc.Waiting()
	return callers
}

// HeartbeatState is what a Generator's heartbeat is doing (see
// HeartbeatOf).
type HeartbeatState struct {
	Running bool   // the loop has not returned (a Generator with a registry, not closed, not crashed, its name not lost)
	Busy    bool   // a refresh (Touch) of this process is in flight
	Holder  bool   // the process holds the host's heartbeat role
	Session string // the session of the host's claim the process runs under
	Lost    error  // why the process stopped issuing under its name (ErrNameTaken), or nil
}

// HeartbeatOf returns the state of g's heartbeat: the simulator moves each
// host's clock itself and, after each move, waits until every heartbeat
// loop the move woke is back waiting on the clock.
func HeartbeatOf(g *Generator) HeartbeatState {
	r := g.res
	if r == nil {
		return HeartbeatState{}
	}
	st := HeartbeatState{
		Running: !r.HeartbeatDone(),
		Busy:    r.Touching(),
		Holder:  r.HeartbeatHolder(),
		Session: r.Session(),
		Lost:    r.Lost(),
	}
	return st
}

// ReservationStep returns the size of g's current reservation step (0
// without a registry).
func ReservationStep(g *Generator) uint64 {
	if r := g.res; r != nil {
		return r.Step()
	}
	return 0
}
