package sim

import (
	"context"
	"fmt"

	"github.com/snapid/snapid"
)

// faultyRegistry is the history's registry (the in-memory one, or the
// Cassandra adapter on the simulated cluster: backend) with
// the registry faults of a history, seen from one data centre: an answer lost before the change was
// made, or after it was made (a timeout, Overloaded, a lost reply: both
// look the same to the caller, snapid.ErrRegistry, and the caller must
// not guess which happened), an outage, and a data centre cut off from
// the cluster's quorum.
type faultyRegistry struct {
	backend

	// fault: the next changing call of a kind (claim, extend, touch,
	// release, lease, closelease, adopt) whose answer is lost, after the
	// change was applied (true) or before.
	fault *armed[bool]
}

func newFaultyRegistry(r backend, fault *armed[bool]) *faultyRegistry {
	return &faultyRegistry{backend: r, fault: fault}
}

// dcName is the name of data centre i of a history.
func dcName(i int) string { return fmt.Sprintf("dc%d", i) }

func unknown(op, name string, applied bool) error {
	how := "lost before it was applied"
	if applied {
		how = "applied, then the reply was lost"
	}
	return fmt.Errorf("sim: %w: %s %q: operation timed out (outcome unknown; here %s)", snapid.ErrRegistry, op, name, how)
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

func (r *faultyRegistry) Claim(ctx context.Context, c snapid.Claim) (snapid.Holder, error) {
	return faulty(r, "claim", c.Name, func() (snapid.Holder, error) { return r.backend.Claim(ctx, c) })
}

func (r *faultyRegistry) Extend(ctx context.Context, name, owner, session string, old, new uint64) (snapid.Holder, error) {
	return faulty(r, "extend", name, func() (snapid.Holder, error) { return r.backend.Extend(ctx, name, owner, session, old, new) })
}

func (r *faultyRegistry) Touch(ctx context.Context, name, owner, session string) error {
	_, err := faulty(r, "touch", name, none(func() error { return r.backend.Touch(ctx, name, owner, session) }))
	return err
}

func (r *faultyRegistry) Release(ctx context.Context, name, owner string, final uint64) error {
	_, err := faulty(r, "release", name, none(func() error { return r.backend.Release(ctx, name, owner, final) }))
	return err
}

func (r *faultyRegistry) AssignNumber(ctx context.Context, name, owner, session string) (uint64, error) {
	return faulty(r, "assign", name, func() (uint64, error) { return r.backend.AssignNumber(ctx, name, owner, session) })
}

func (r *faultyRegistry) SetStride(ctx context.Context, stride uint64) (uint64, error) {
	return faulty(r, "stride", "", func() (uint64, error) { return r.backend.SetStride(ctx, stride) })
}

func (r *faultyRegistry) LeaseSequence(ctx context.Context, req snapid.LeaseRequest) (snapid.SequenceLease, error) {
	return faulty(r, "lease", req.Sequence, func() (snapid.SequenceLease, error) { return r.backend.LeaseSequence(ctx, req) })
}

func (r *faultyRegistry) CloseLease(ctx context.Context, l snapid.SequenceLease, pos uint64) error {
	_, err := faulty(r, "closelease", l.Name, none(func() error { return r.backend.CloseLease(ctx, l, pos) }))
	return err
}

func (r *faultyRegistry) AdoptLease(ctx context.Context, a snapid.LeaseAdoption) (snapid.SequenceLease, error) {
	return faulty(r, "adopt", a.Name, func() (snapid.SequenceLease, error) { return r.backend.AdoptLease(ctx, a) })
}

var (
	_ snapid.Registry         = (*faultyRegistry)(nil)
	_ snapid.SequenceRegistry = (*faultyRegistry)(nil)
	_ snapid.NumberRegistry   = (*faultyRegistry)(nil)
)
