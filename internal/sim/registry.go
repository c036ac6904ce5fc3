package sim

import (
	"context"
	"fmt"
	"sync"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/snapidtest"
)

// faultyRegistry is the in-memory registry (snapidtest.Registry) with
// the registry faults of a history: an answer lost before the change was
// made, or after it was made (a timeout, Overloaded, a lost reply: both
// look the same to the caller, snapid.ErrRegistry, and the caller must
// not guess which happened), and an outage. It also keeps, per name, the
// lowest mark the registry ever showed after a number was issued, for
// the checker.
type faultyRegistry struct {
	*snapidtest.Registry

	mu    sync.Mutex
	fault *regFault
	calls int // changing calls seen
	fired int // faults that fired
}

// regFault fails the after-th next changing call (claim, extend, touch,
// release, or "" any) either before it is applied (applied false) or
// after.
type regFault struct {
	op      string
	after   int
	applied bool
}

func newFaultyRegistry(r *snapidtest.Registry) *faultyRegistry {
	return &faultyRegistry{Registry: r}
}

func (r *faultyRegistry) arm(f regFault) {
	r.mu.Lock()
	r.fault = &f
	r.mu.Unlock()
}

func (r *faultyRegistry) disarm() {
	r.mu.Lock()
	r.fault = nil
	r.mu.Unlock()
}

// hit returns the fault that fires on this call of op, if any.
func (r *faultyRegistry) hit(op string) *regFault {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	f := r.fault
	if f == nil || (f.op != "" && f.op != op) {
		return nil
	}
	if f.after > 0 {
		f.after--
		return nil
	}
	r.fault = nil
	r.fired++
	return f
}

func unknown(op, name string, applied bool) error {
	how := "lost before it was applied"
	if applied {
		how = "applied, then the reply was lost"
	}
	return fmt.Errorf("sim: %w: %s %q: operation timed out (outcome unknown; here %s)", snapid.ErrRegistry, op, name, how)
}

func (r *faultyRegistry) Claim(ctx context.Context, c snapid.Claim) (snapid.Holder, error) {
	f := r.hit("claim")
	if f != nil && !f.applied {
		return snapid.Holder{}, unknown("claim", c.Name, false)
	}
	h, err := r.Registry.Claim(ctx, c)
	if f != nil {
		return snapid.Holder{}, unknown("claim", c.Name, true)
	}
	return h, err
}

func (r *faultyRegistry) Extend(ctx context.Context, name, owner, session string, old, new uint64) (snapid.Holder, error) {
	f := r.hit("extend")
	if f != nil && !f.applied {
		return snapid.Holder{}, unknown("extend", name, false)
	}
	h, err := r.Registry.Extend(ctx, name, owner, session, old, new)
	if f != nil {
		return snapid.Holder{}, unknown("extend", name, true)
	}
	return h, err
}

func (r *faultyRegistry) Touch(ctx context.Context, name, owner, session string) error {
	f := r.hit("touch")
	if f != nil && !f.applied {
		return unknown("touch", name, false)
	}
	err := r.Registry.Touch(ctx, name, owner, session)
	if f != nil {
		return unknown("touch", name, true)
	}
	return err
}

func (r *faultyRegistry) Release(ctx context.Context, name, owner string, final uint64) error {
	f := r.hit("release")
	if f != nil && !f.applied {
		return unknown("release", name, false)
	}
	err := r.Registry.Release(ctx, name, owner, final)
	if f != nil {
		return unknown("release", name, true)
	}
	return err
}

func (r *faultyRegistry) LeaseSequence(ctx context.Context, req snapid.LeaseRequest) (snapid.SequenceLease, error) {
	f := r.hit("lease")
	if f != nil && !f.applied {
		return snapid.SequenceLease{}, unknown("lease", req.Sequence, false)
	}
	l, err := r.Registry.LeaseSequence(ctx, req)
	if f != nil {
		return snapid.SequenceLease{}, unknown("lease", req.Sequence, true)
	}
	return l, err
}

func (r *faultyRegistry) CloseLease(ctx context.Context, l snapid.SequenceLease, pos uint64) error {
	f := r.hit("closelease")
	if f != nil && !f.applied {
		return unknown("closelease", l.Name, false)
	}
	err := r.Registry.CloseLease(ctx, l, pos)
	if f != nil {
		return unknown("closelease", l.Name, true)
	}
	return err
}

func (r *faultyRegistry) AdoptLease(ctx context.Context, a snapid.LeaseAdoption) (snapid.SequenceLease, error) {
	f := r.hit("adopt")
	if f != nil && !f.applied {
		return snapid.SequenceLease{}, unknown("adopt", a.Name, false)
	}
	l, err := r.Registry.AdoptLease(ctx, a)
	if f != nil {
		return snapid.SequenceLease{}, unknown("adopt", a.Name, true)
	}
	return l, err
}

var (
	_ snapid.Registry         = (*faultyRegistry)(nil)
	_ snapid.SequenceRegistry = (*faultyRegistry)(nil)
)
