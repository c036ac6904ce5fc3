package main

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/registry"
)

// timedRegistry is a cassandra.Registry whose calls are timed and counted
// by kind and outcome: the same client the library uses, measured from
// the outside. Every Generator of a run shares a few of them (as many
// hosts share a few sessions, so that thousands fit on one machine).
type timedRegistry struct {
	*cassandra.Registry
	rec *recorder
}

// Kinds of calls, and whether each is a lightweight transaction.
var lwtKinds = map[string]bool{
	"claim": true, "extend": true, "touch": true, "release": true, "assign_number": true,
	"lease": true, "close_lease": true, "adopt_lease": true,
	"get": false, "host_lease": false, "status": false,
}

// recorder keeps, for one measurement window, every call's latency by
// kind and the failures: errors wrapping snapid.ErrRegistry (timeouts,
// unknown outcomes the adapter could not resolve, overload) apart from
// definite answers (a condition that failed, a name taken).
type recorder struct {
	mu      sync.Mutex
	on      bool
	lat     map[string][]time.Duration
	failed  map[string]int // ErrRegistry
	refused map[string]int // any other error
}

func newRecorder() *recorder {
	return &recorder{lat: map[string][]time.Duration{}, failed: map[string]int{}, refused: map[string]int{}}
}

// start clears the recorder and starts recording.
func (r *recorder) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = true
	clear(r.lat)
	clear(r.failed)
	clear(r.refused)
}

// stop stops recording and returns what was recorded.
func (r *recorder) stop() (lat map[string][]time.Duration, failed, refused map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = false
	lat, failed, refused = r.lat, r.failed, r.refused
	r.lat, r.failed, r.refused = map[string][]time.Duration{}, map[string]int{}, map[string]int{}
	return lat, failed, refused
}

func (r *recorder) add(kind string, d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.on {
		return
	}
	r.lat[kind] = append(r.lat[kind], d)
	switch {
	case errors.Is(err, snapid.ErrRegistry):
		r.failed[kind]++
	case err != nil:
		r.refused[kind]++
	}
}

func timed[T any](r *recorder, kind string, call func() (T, error)) (T, error) {
	start := time.Now()
	v, err := call()
	r.add(kind, time.Since(start), err)
	return v, err
}

func (t *timedRegistry) Claim(ctx context.Context, c registry.Claim) (registry.Holder, error) {
	return timed(t.rec, "claim", func() (registry.Holder, error) { return t.Registry.Claim(ctx, c) })
}

func (t *timedRegistry) Extend(ctx context.Context, name, owner, session string, old, new uint64) (registry.Holder, error) {
	return timed(t.rec, "extend", func() (registry.Holder, error) { return t.Registry.Extend(ctx, name, owner, session, old, new) })
}

func (t *timedRegistry) Touch(ctx context.Context, name, owner, session string) error {
	_, err := timed(t.rec, "touch", func() (struct{}, error) { return struct{}{}, t.Registry.Touch(ctx, name, owner, session) })
	return err
}

func (t *timedRegistry) Release(ctx context.Context, name, owner string, final uint64) error {
	_, err := timed(t.rec, "release", func() (struct{}, error) { return struct{}{}, t.Registry.Release(ctx, name, owner, final) })
	return err
}

func (t *timedRegistry) Get(ctx context.Context, name string) (registry.Holder, error) {
	return timed(t.rec, "get", func() (registry.Holder, error) { return t.Registry.Get(ctx, name) })
}

func (t *timedRegistry) AssignNumber(ctx context.Context, name, owner, session string) (uint64, error) {
	return timed(t.rec, "assign_number", func() (uint64, error) { return t.Registry.AssignNumber(ctx, name, owner, session) })
}

func (t *timedRegistry) LeaseSequence(ctx context.Context, req registry.LeaseRequest) (registry.SequenceLease, error) {
	return timed(t.rec, "lease", func() (registry.SequenceLease, error) { return t.Registry.LeaseSequence(ctx, req) })
}

func (t *timedRegistry) HostLease(ctx context.Context, seq, name string) (registry.SequenceLease, error) {
	return timed(t.rec, "host_lease", func() (registry.SequenceLease, error) { return t.Registry.HostLease(ctx, seq, name) })
}

func (t *timedRegistry) SequenceStatus(ctx context.Context, seq string) (registry.SequenceStatus, error) {
	return timed(t.rec, "status", func() (registry.SequenceStatus, error) { return t.Registry.SequenceStatus(ctx, seq) })
}

func (t *timedRegistry) CloseLease(ctx context.Context, l registry.SequenceLease, pos uint64) error {
	_, err := timed(t.rec, "close_lease", func() (struct{}, error) { return struct{}{}, t.Registry.CloseLease(ctx, l, pos) })
	return err
}

func (t *timedRegistry) AdoptLease(ctx context.Context, a registry.LeaseAdoption) (registry.SequenceLease, error) {
	return timed(t.rec, "adopt_lease", func() (registry.SequenceLease, error) { return t.Registry.AdoptLease(ctx, a) })
}

// Latency summarizes durations: quantiles in milliseconds.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) float64 {
		i := int(p * float64(len(s)-1))
		return float64(s[i]) / float64(time.Millisecond)
	}
	return Latency{Count: len(s), P50: q(0.50), P99: q(0.99), P999: q(0.999), Max: float64(s[len(s)-1]) / float64(time.Millisecond)}
}
