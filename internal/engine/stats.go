package engine

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"time"

	"github.com/snapid/snapid/internal/clock"
	"github.com/snapid/snapid/registry"
)

// Stats describes a Generator's work since Open, for metrics (package
// github.com/snapid/snapid/prometheus turns it into Prometheus metrics)
// and for logs. Field names carry their unit; the JSON names are stable.
type Stats struct {
	// CounterUpdates counts the counter file updates that succeeded.
	CounterUpdates uint64 `json:"counter_updates"`
	// NumbersReserved counts the numbers those updates took from the
	// counter file.
	NumbersReserved uint64 `json:"numbers_reserved"`
	// IDsIssued counts the numbers handed to callers. In strict mode it
	// equals NumbersReserved (a number reserved for a caller of
	// UniqueIDContext or NextContext whose context ended first is counted
	// although it was never handed out: a gap). In block mode it leaves out the unused rest
	// of the current block and a block reserved ahead; it is approximate
	// there (numbers held in per-core runs of WithCPUShards count as
	// issued, and while a new block is being installed it may run ahead by
	// up to one block), but it never goes down.
	IDsIssued uint64 `json:"ids_issued"`
	// UpdateLatencySeconds: how long each successful counter update took,
	// lock wait, write and fdatasync included (with sync on, mostly the
	// fsync).
	UpdateLatencySeconds Histogram `json:"update_latency_seconds"`
	// UpdateSizeNumbers: how many numbers each successful update took. In
	// strict mode with one number per call, it is the size of the group
	// that shared the update (group commit); in block mode, a block.
	UpdateSizeNumbers Histogram `json:"update_size_numbers"`
	// Registry is set when the Generator uses a registry.
	Registry *RegistryStats `json:"registry,omitempty"`
}

// Histogram is a distribution of observations in fixed buckets.
type Histogram struct {
	// Bounds are the buckets' inclusive upper bounds, increasing; the
	// last bucket (+Inf) is implied.
	Bounds []float64 `json:"bounds"`
	// Counts[i] is the number of observations at or below Bounds[i]
	// (cumulative, as Prometheus counts buckets).
	Counts []uint64 `json:"counts"`
	Count  uint64   `json:"count"` // all observations
	Sum    float64  `json:"sum"`   // their sum, in the histogram's unit
}

// RegistryStats describes a Generator's calls to its registry.
type RegistryStats struct {
	// Calls counts the calls by kind and outcome; every combination is
	// listed, zeros included.
	Calls []RegistryCalls `json:"calls"`
	// LastContact is when a call last reached the registry (any outcome
	// but RegistryError); zero if none did.
	LastContact time.Time `json:"last_contact"`
	// LastExtension is when the reserved-up-to mark was last raised.
	LastExtension time.Time `json:"last_extension"`
	// LastHeartbeat is when last-seen was last refreshed, by this process
	// or by the host's process that holds the heartbeat (one per host;
	// its claim counts as a refresh).
	LastHeartbeat time.Time `json:"last_heartbeat"`
	// SessionHeld is false once the registry said that this host's claim
	// no longer stands (another owner took the name, or a later claim with
	// this owner token, such as a copy of the counter directory, replaced
	// the session): the Generator then issues nothing more.
	SessionHeld bool `json:"session_held"`
}

// RegistryCalls counts one kind of registry call with one outcome.
type RegistryCalls struct {
	// Call is "claim", "extend", "touch", "release", "get" or "list".
	Call string `json:"call"`
	// Outcome is one of RegistryApplied, RegistryConditionFailed,
	// RegistryResolved and RegistryError.
	Outcome string `json:"outcome"`
	Count   uint64 `json:"count"`
}

// Outcomes of registry calls in RegistryCalls.
const (
	// RegistryApplied: the call succeeded at once (a change applied, or a
	// read answered).
	RegistryApplied = "applied"
	// RegistryConditionFailed: the registry answered, and the call's
	// condition did not hold: ErrNameTaken, ErrProbableClone, ErrMarkMoved
	// or ErrNotRegistered.
	RegistryConditionFailed = "condition_failed"
	// RegistryResolved: the outcome of a change was unknown (a timeout, a
	// lost reply) and a read resolved it (see NoteOutcomeResolved).
	RegistryResolved = "resolved"
	// RegistryError: the call failed; the registry could not be reached or
	// refused the statement.
	RegistryError = "error"
)

var (
	registryCallKinds = [...]string{"claim", "extend", "touch", "release", "get", "list"}
	registryOutcomes  = [...]string{RegistryApplied, RegistryConditionFailed, RegistryResolved, RegistryError}

	// latencyBounds are the buckets of UpdateLatencySeconds: 50 µs to 10 s.
	latencyBounds = []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
		100e-3, 250e-3, 500e-3, 1, 2.5, 5, 10}
	// sizeBounds are the buckets of UpdateSizeNumbers.
	sizeBounds = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096, 16384, 65536, 1 << 20}
)

// histogram is a Histogram filled concurrently.
type histogram struct {
	bounds []float64
	counts []atomic.Uint64 // per bucket, not cumulative; one more than bounds
	count  atomic.Uint64
	sum    atomic.Uint64 // float64 bits
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i := 0
	for i < len(h.bounds) && v > h.bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.count.Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

func (h *histogram) snapshot() Histogram {
	out := Histogram{Bounds: append([]float64(nil), h.bounds...), Counts: make([]uint64, len(h.bounds))}
	var cum uint64
	for i := range h.bounds {
		cum += h.counts[i].Load()
		out.Counts[i] = cum
	}
	// Count is at least every bucket read, so the +Inf bucket is never
	// below the last bound's.
	out.Count = max(h.count.Load(), cum)
	out.Sum = math.Float64frombits(h.sum.Load())
	return out
}

// genStats is what a Generator counts; safe for concurrent use.
type genStats struct {
	updates  atomic.Uint64
	reserved atomic.Uint64
	issued   atomic.Uint64 // the highest IDsIssued reported (block mode)
	latency  *histogram
	size     *histogram
}

func newGenStats() *genStats {
	return &genStats{latency: newHistogram(latencyBounds), size: newHistogram(sizeBounds)}
}

// updated records a counter update of k numbers that took d.
func (s *genStats) updated(k uint64, d time.Duration, err error) {
	if err != nil {
		return
	}
	s.updates.Add(1)
	s.reserved.Add(k)
	s.latency.observe(d.Seconds())
	s.size.observe(float64(k))
}

// Stats returns what the Generator did since Open. It is safe for
// concurrent use, during and after Close.
func (g *Generator) Stats() Stats {
	st := Stats{
		CounterUpdates:       g.stats.updates.Load(),
		NumbersReserved:      g.stats.reserved.Load(),
		UpdateLatencySeconds: g.stats.latency.snapshot(),
		UpdateSizeNumbers:    g.stats.size.snapshot(),
	}
	st.IDsIssued = st.NumbersReserved
	if g.block != nil {
		st.IDsIssued = g.block.Issued(st.NumbersReserved, &g.stats.issued)
	}
	if g.res != nil {
		if obs := observerOf(g.res.Registry()); obs != nil {
			rs := obs.snapshot()
			if host := g.res.LastHostHeartbeat(); host.After(rs.LastHeartbeat) {
				rs.LastHeartbeat = host // refreshed by the host's heartbeat holder
			}
			rs.SessionHeld = g.res.Lost() == nil
			st.Registry = &rs
		}
	}
	return st
}

// ReservationStatus is the host's reservation as a Generator sees it,
// read from the files beside the counter.
type ReservationStatus struct {
	// Counter is the counter file's last issued number (host-wide: every
	// process on the counter moves it).
	Counter uint64 `json:"counter"`
	// Registry reports whether the Generator uses a registry; the other
	// fields are only set when it does.
	Registry bool `json:"registry"`
	// Mark is the host's reserved-up-to mark: no number above it is issued
	// until the registry extends it.
	Mark uint64 `json:"reserved_up_to"`
	// LeftNumbers is Mark minus Counter (zero if the counter is at or
	// above the mark).
	LeftNumbers uint64 `json:"left_numbers"`
	// SessionHeld: see RegistryStats.SessionHeld.
	SessionHeld bool `json:"session_held"`
}

// Reservation reads the counter and, with a registry, the host's mark,
// under the counter's lock (it waits for an update in progress, and for
// another process holding the lock until Close ends the wait). It is
// safe for concurrent use; after Close it returns ErrClosed.
func (g *Generator) Reservation() (ReservationStatus, error) {
	var st ReservationStatus
	err := g.withFileUnless(g.stopped, func(c *counterFile) error {
		cur, err := c.Load()
		if err != nil {
			return err
		}
		st.Counter = cur
		if g.res == nil {
			return nil
		}
		m, err := g.res.Files().ReadMark()
		if err != nil {
			return err
		}
		st.Registry, st.Mark = true, m.Mark
		if m.Mark > cur {
			st.LeftNumbers = m.Mark - cur
		}
		st.SessionHeld = g.res.Lost() == nil
		return nil
	})
	return st, err
}

// observedRegistry counts a Generator's registry calls (WithRegistry
// wraps every registry in one).
type observedRegistry struct {
	registry.Registry
	calls         [len(registryCallKinds)][len(registryOutcomes)]atomic.Uint64
	lastContact   atomic.Int64 // Unix nanoseconds; 0: never
	lastExtension atomic.Int64
	lastHeartbeat atomic.Int64
	clock         clock.Clock // the Generator's (nil: the real clock)
}

// now is the time on o's clock, in Unix nanoseconds.
func (o *observedRegistry) now() int64 { return clock.OrReal(o.clock).Now().UnixNano() }

// observedSequenceRegistry is an observedRegistry of a registry that also
// keeps sequences: wrapping it must not hide that (sequence calls are not
// counted).
type observedSequenceRegistry struct {
	*observedRegistry
	registry.SequenceRegistry
}

// observe wraps r to count its calls, keeping its sequences.
func observe(r registry.Registry) registry.Registry {
	o := &observedRegistry{Registry: r}
	if sr, ok := r.(registry.SequenceRegistry); ok {
		return &observedSequenceRegistry{o, sr}
	}
	return o
}

// observerOf returns the counts of a registry that observe wrapped.
func observerOf(r registry.Registry) *observedRegistry {
	switch o := r.(type) {
	case *observedRegistry:
		return o
	case *observedSequenceRegistry:
		return o.observedRegistry
	}
	return nil
}

// do runs one call of kind i and counts it.
func (o *observedRegistry) do(ctx context.Context, i int, call func(ctx context.Context) error) error {
	ctx, resolved := registry.WatchOutcome(ctx)
	err := call(ctx)
	var outcome int
	switch {
	case resolved() && (err == nil || conditionFailed(err)):
		outcome = 2
	case err == nil:
		outcome = 0
	case conditionFailed(err):
		outcome = 1
	default:
		outcome = 3
	}
	o.calls[i][outcome].Add(1)
	if outcome != 3 {
		o.lastContact.Store(o.now())
	}
	return err
}

func conditionFailed(err error) bool {
	return errors.Is(err, ErrNameTaken) || errors.Is(err, ErrProbableClone) ||
		errors.Is(err, registry.ErrMarkMoved) || errors.Is(err, registry.ErrNotRegistered)
}

func (o *observedRegistry) Claim(ctx context.Context, c registry.Claim) (h registry.Holder, err error) {
	err = o.do(ctx, 0, func(ctx context.Context) error { h, err = o.Registry.Claim(ctx, c); return err })
	return h, err
}

func (o *observedRegistry) Extend(ctx context.Context, name, owner, session string, old, new uint64) (h registry.Holder, err error) {
	err = o.do(ctx, 1, func(ctx context.Context) error {
		h, err = o.Registry.Extend(ctx, name, owner, session, old, new)
		return err
	})
	if err == nil && new > old {
		o.lastExtension.Store(o.now())
	}
	return h, err
}

func (o *observedRegistry) Touch(ctx context.Context, name, owner, session string) error {
	err := o.do(ctx, 2, func(ctx context.Context) error { return o.Registry.Touch(ctx, name, owner, session) })
	if err == nil {
		o.lastHeartbeat.Store(o.now())
	}
	return err
}

func (o *observedRegistry) Release(ctx context.Context, name, owner string, final uint64) error {
	return o.do(ctx, 3, func(ctx context.Context) error { return o.Registry.Release(ctx, name, owner, final) })
}

func (o *observedRegistry) Get(ctx context.Context, name string) (h registry.Holder, err error) {
	err = o.do(ctx, 4, func(ctx context.Context) error { h, err = o.Registry.Get(ctx, name); return err })
	return h, err
}

func (o *observedRegistry) List(ctx context.Context) (hs []registry.Holder, err error) {
	err = o.do(ctx, 5, func(ctx context.Context) error { hs, err = o.Registry.List(ctx); return err })
	return hs, err
}

func (o *observedRegistry) snapshot() RegistryStats {
	var rs RegistryStats
	for i, kind := range registryCallKinds {
		for j, outcome := range registryOutcomes {
			rs.Calls = append(rs.Calls, RegistryCalls{Call: kind, Outcome: outcome, Count: o.calls[i][j].Load()})
		}
	}
	rs.LastContact, rs.LastExtension, rs.LastHeartbeat = unixTime(o.lastContact.Load()),
		unixTime(o.lastExtension.Load()), unixTime(o.lastHeartbeat.Load())
	return rs
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
