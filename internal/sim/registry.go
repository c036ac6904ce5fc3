package sim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
)

// faultyRegistry is the history's registry (the in-memory one, or the
// Cassandra adapter on the simulated cluster: backend) with
// the registry faults of a history, seen from one data centre: an answer lost before the change was
// made, or after it was made (a timeout, Overloaded, a lost reply: both
// look the same to the caller, engine.ErrRegistry, and the caller must
// not guess which happened), an outage, and a data centre cut off from
// the cluster's quorum.
type faultyRegistry struct {
	backend

	// fault: the next changing call of a kind (claim, extend, touch,
	// release, lease, closelease, adopt) whose answer is lost, after the
	// change was applied (true) or before.
	fault *armed[bool]
	dc    int // the data centre its calls come from
	// contract checks what the registry reported done against the row
	// as the registry settles it (nil: no check).
	contract *contract
	// beforeRelease, if set, runs once just before the next Release is
	// sent (a holder moving its mark while an operator releases it).
	hookMu        sync.Mutex
	beforeRelease func()
	touched       atomic.Int64 // Touch calls that succeeded (heartbeat refreshes)
}

// onNextRelease makes fn run just before the next Release is sent.
func (r *faultyRegistry) onNextRelease(fn func()) {
	r.hookMu.Lock()
	r.beforeRelease = fn
	r.hookMu.Unlock()
}

func newFaultyRegistry(r backend, dc int, fault *armed[bool], c *contract) *faultyRegistry {
	return &faultyRegistry{backend: r, dc: dc, fault: fault, contract: c}
}

// contract checks calls the registry reported done against the
// registry's row as it settles (cluster.Row): an Extend is done only on a
// row held under the caller's session; a claim is refused as taken only
// while another owner holds the row active; and a forced take-over of
// another owner's active row starts at or above that row's mark and the
// floor asked for; a sequence lease is granted only on the previous lease
// the registry records for the host's claim. Calls may come from any goroutine; during a step whose calls
// run concurrently (a burst, a storm) nothing is checked, as another
// call may change the row between the call and the check.
type contract struct {
	truth cluster
	mu    sync.Mutex
	off   bool     // a concurrent step is running
	found []string // broken, not yet reported
}

func (c *contract) setOff(off bool) {
	c.mu.Lock()
	c.off = off
	c.mu.Unlock()
}

func (c *contract) on() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.off
}

func (c *contract) broken(format string, args ...any) {
	c.mu.Lock()
	c.found = append(c.found, fmt.Sprintf(format, args...))
	c.mu.Unlock()
}

// take returns what was found broken since it was last called.
func (c *contract) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.found
	c.found = nil
	return out
}

// dcName is the name of data centre i of a history.
func dcName(i int) string { return fmt.Sprintf("dc%d", i) }

func unknown(op, name string, applied bool) error {
	how := "lost before it was applied"
	if applied {
		how = "applied, then the reply was lost"
	}
	return fmt.Errorf("sim: %w: %s %q: operation timed out (outcome unknown; here %s)", engine.ErrRegistry, op, name, how)
}

// faulty runs a changing call of kind op on name through the armed fault:
// lost before it is applied (call is not made), or applied and its answer
// lost.
func faulty[T any](r *faultyRegistry, op, name string, call func() (T, error)) (T, error) {
	var zero T
	applied, fires := r.fault.hit(op)
	if fires && !applied {
		return zero, unknown(op, name, false)
	}
	v, err := call()
	if fires {
		return zero, unknown(op, name, true)
	}
	return v, err
}

// none adapts a call that returns only an error to faulty.
func none(call func() error) func() (struct{}, error) {
	return func() (struct{}, error) { return struct{}{}, call() }
}

func (r *faultyRegistry) Claim(ctx context.Context, c registry.Claim) (registry.Holder, error) {
	var before registry.Holder
	var had bool
	check := r.contract != nil && r.contract.on()
	if check {
		before, had = r.contract.truth.Row(c.Name)
	}
	h, err := faulty(r, "claim", c.Name, func() (registry.Holder, error) { return r.backend.Claim(ctx, c) })
	if check && errors.Is(err, engine.ErrNameTaken) {
		if row, ok := r.contract.truth.Row(c.Name); !ok || row.Owner == c.Owner || row.State != registry.StateActive {
			r.contract.broken("a claim of %s refused as taken (%v), but the row is %+v (found %v)", c.Name, err, row, ok)
		}
	}
	if check && err == nil && c.Force && had && before.Owner != c.Owner && before.State == registry.StateActive {
		if want := max(before.Reserved, c.Floor); h.Reserved < want {
			r.contract.broken("a forced take-over of %s (held by another owner with mark %d, floor %d) starts at %d", c.Name, before.Reserved, c.Floor, h.Reserved)
		}
	}
	return h, err
}

func (r *faultyRegistry) Extend(ctx context.Context, name, owner, session string, old, new uint64) (registry.Holder, error) {
	h, err := faulty(r, "extend", name, func() (registry.Holder, error) { return r.backend.Extend(ctx, name, owner, session, old, new) })
	if err == nil && r.contract != nil && r.contract.on() {
		if row, ok := r.contract.truth.Row(name); ok && (row.Session != session || row.Owner != owner) {
			r.contract.broken("an Extend of %s under session %.8s reported done, but the row is held under session %.8s (owner %.8s)", name, session, row.Session, row.Owner)
		}
	}
	return h, err
}

func (r *faultyRegistry) Touch(ctx context.Context, name, owner, session string) error {
	_, err := faulty(r, "touch", name, none(func() error { return r.backend.Touch(ctx, name, owner, session) }))
	if err == nil {
		r.touched.Add(1)
	}
	return err
}

func (r *faultyRegistry) Release(ctx context.Context, name, owner string, final uint64) error {
	r.hookMu.Lock()
	fn := r.beforeRelease
	r.beforeRelease = nil
	r.hookMu.Unlock()
	if fn != nil {
		fn()
	}
	_, err := faulty(r, "release", name, none(func() error { return r.backend.Release(ctx, name, owner, final) }))
	return err
}

func (r *faultyRegistry) AssignNumber(ctx context.Context, name, owner, session string) (uint64, error) {
	return faulty(r, "assign", name, func() (uint64, error) { return r.backend.AssignNumber(ctx, name, owner, session) })
}

func (r *faultyRegistry) SetStride(ctx context.Context, stride uint64) (uint64, error) {
	return faulty(r, "stride", "", func() (uint64, error) { return r.backend.SetStride(ctx, stride) })
}

func (r *faultyRegistry) LeaseSequence(ctx context.Context, req registry.LeaseRequest) (registry.SequenceLease, error) {
	var before registry.SequenceLease
	var had bool
	check := r.contract != nil && r.contract.on()
	if check {
		before, had = r.contract.truth.hostLease(req.Sequence, r.dc, req.Name)
	}
	l, err := faulty(r, "lease", req.Sequence, func() (registry.SequenceLease, error) { return r.backend.LeaseSequence(ctx, req) })
	if check && err == nil && had && before.Owner == req.Owner && before.Session == req.Session &&
		(before.First != req.PrevFirst || before.Last != req.PrevLast) {
		r.contract.broken("a lease of %s for %s granted on a previous lease [%d, %d], but the registry recorded [%d, %d] for this claim",
			req.Sequence, req.Name, req.PrevFirst, req.PrevLast, before.First, before.Last)
	}
	return l, err
}

func (r *faultyRegistry) CloseLease(ctx context.Context, l registry.SequenceLease, pos uint64) error {
	_, err := faulty(r, "closelease", l.Name, none(func() error { return r.backend.CloseLease(ctx, l, pos) }))
	return err
}

func (r *faultyRegistry) AdoptLease(ctx context.Context, a registry.LeaseAdoption) (registry.SequenceLease, error) {
	return faulty(r, "adopt", a.Name, func() (registry.SequenceLease, error) { return r.backend.AdoptLease(ctx, a) })
}

var (
	_ registry.Registry         = (*faultyRegistry)(nil)
	_ registry.SequenceRegistry = (*faultyRegistry)(nil)
	_ registry.NumberRegistry   = (*faultyRegistry)(nil)
)
