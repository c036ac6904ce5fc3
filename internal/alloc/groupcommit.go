package alloc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/snapid/snapid/internal/errs"
)

// GroupCommit turns concurrent reservations into as few counter file
// updates as possible. The first caller to arrive while no group is open
// becomes the group's leader; callers arriving before the leader starts its
// flush join the group. The leader waits for the previous flush to finish,
// closes the group, and does one locked update for the sum of the group's
// requests (one 8-byte write and, with sync on, one fdatasync). Members get
// consecutive slices of the reserved range in the order they joined, and
// nobody gets a number before the update covering it has returned. If the
// update fails, every member of the group gets the error and no number.
//
// A leader that finishes its flush while the next group's leader waits
// closes that group and hands the flush over by closing the group's turn:
// the next update starts without the waiting leader having to take mu
// again, which under load it would contend for with every member just
// woken. The hand-over names the group, so it cannot reach the leader of a
// group opened later.
type GroupCommit struct {
	// flush updates the counter by k; it takes nothing when gone, asked
	// once it holds the counter's lock, reports that every caller it
	// serves has left.
	flush func(k uint64, gone func() bool) (first uint64, err error)

	mu       sync.Mutex
	flushing bool
	open     *group // the group new callers join, nil if none
	spare    *group // a group whose leader stayed alone, for the next leader

	// members counts the calls whose numbers came from another caller's
	// update (a member of a group, not its leader): see Members.
	members atomic.Uint64
}

type group struct {
	k uint64 // numbers requested by all members
	// ks holds the numbers requested by each member, in joining order, and
	// done is closed when the results are set; both are made when a second
	// member joins, so a caller alone costs one allocation. After the
	// leader closes the group (under GroupCommit.mu) they no longer change.
	ks   []uint64
	done chan struct{}
	// ctxs holds each member's context, in joining order, made with ks;
	// nil for a context that never ends.
	ctxs  []context.Context
	first uint64
	err   error
	each  []memberResult // set instead of first and err when served one by one
	// turn is made when the leader must wait for a flush in progress, and
	// closed by that flush's leader once it has closed this group.
	turn chan struct{}
}

type memberResult struct {
	first uint64
	err   error
}

// result returns member i's result; off is the member's offset.
func (g *group) result(i int, off uint64) (uint64, error) {
	if g.each != nil {
		return g.each[i].first, g.each[i].err
	}
	if g.err != nil {
		return 0, g.err
	}
	return g.first + off, nil
}

func NewGroupCommit(flush func(uint64, func() bool) (uint64, error)) *GroupCommit {
	return &GroupCommit{flush: flush}
}

// Reserve returns the first of k consecutive numbers (k >= 1). A caller
// whose ctx ends first returns the context's error at once; the numbers
// its group reserved for it are then never handed out (a gap). A leader
// with such a context leaves the group's flush to a goroutine, since the
// other members need it whether or not the leader stays.
func (gc *GroupCommit) Reserve(ctx context.Context, k uint64) (uint64, error) {
	cancel := ctx.Done() // nil for a context that never ends: no select, no goroutine
	if cancel != nil {
		if err := ContextError(ctx); err != nil {
			return 0, err
		}
	}
	gc.mu.Lock()
	g := gc.open
	leader := g == nil
	if leader {
		if g = gc.spare; g != nil {
			gc.spare = nil
		} else {
			g = &group{}
		}
		gc.open = g
	} else if k > math.MaxUint64-g.k {
		// The group would need more than 2^64-1 numbers: it cannot fit in
		// any counter, so this request is refused without joining it.
		gc.mu.Unlock()
		return 0, fmt.Errorf("snapid: %w: %d numbers cannot be reserved together with %d others", errs.ErrExhausted, k, g.k)
	}
	off := g.k
	g.k += k
	if !leader || cancel != nil {
		if g.done == nil {
			// The leader's request comes first: off is the leader's k
			// when a second member joins, and k for a leader itself.
			g.done = make(chan struct{})
			g.ks = append(make([]uint64, 0, 8), g.k-k)
			g.ctxs = append(make([]context.Context, 0, 8), nil)
			if leader {
				g.ks[0], g.ctxs[0] = k, ctx
			}
		}
	}
	i := 0
	if !leader {
		i = len(g.ks)
		g.ks = append(g.ks, k)
		if cancel != nil {
			g.ctxs = append(g.ctxs, ctx)
		} else {
			g.ctxs = append(g.ctxs, nil)
		}
		gc.mu.Unlock()
		first, err := wait(ctx, g, i, off)
		if err == nil {
			gc.members.Add(1)
		}
		return first, err
	}
	// While a flush runs, the group open is this leader's: the flushing
	// leader closes it when done and hands the flush over.
	handedOver := gc.flushing
	if handedOver {
		g.turn = make(chan struct{})
	} else {
		gc.flushing = true
		gc.open = nil // later callers start the next group
	}
	gc.mu.Unlock()
	if cancel == nil {
		return gc.lead(g, handedOver)
	}
	go gc.lead(g, handedOver)
	return wait(ctx, g, i, off)
}

// wait returns member i's result once its group is flushed, or the
// context's error if ctx ends first.
func wait(ctx context.Context, g *group, i int, off uint64) (uint64, error) {
	if cancel := ctx.Done(); cancel != nil {
		select {
		case <-g.done:
		case <-cancel:
			return 0, ContextError(ctx)
		}
	} else {
		<-g.done
	}
	return g.result(i, off)
}

// gone reports whether every member of the closed group g has left (its
// context ended), so that its update may take nothing: a caller that left
// while the counter's lock was held elsewhere must not burn its numbers.
func (g *group) gone() bool {
	if len(g.ctxs) == 0 {
		return false // a leader alone whose context never ends
	}
	for _, c := range g.ctxs {
		if !ended(c) {
			return false
		}
	}
	return true
}

// ended reports whether ctx (nil: one that never ends) has ended.
func ended(ctx context.Context) bool { return ctx != nil && ctx.Err() != nil }

// ErrCallersLeft is a counter update's result when every caller it served
// left before it held the counter's lock: nothing was taken.
var ErrCallersLeft = fmt.Errorf("snapid: every caller left before the counter's lock was free; nothing was taken: %w", context.Canceled)

// ContextError is ctx's error, with its cause when it has one, or nil.
func ContextError(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() {
		return fmt.Errorf("snapid: %w (%w)", ctx.Err(), cause)
	}
	return fmt.Errorf("snapid: %w", ctx.Err())
}

// lead flushes the closed group g, once the previous flush handed it
// over if handedOver, then passes the flush on to the next group waiting
// and returns the leader's own result.
func (gc *GroupCommit) lead(g *group, handedOver bool) (uint64, error) {
	if handedOver {
		<-g.turn
	}
	// A leader alone whose context never ends cannot leave: no check is
	// passed, and none is made (a method value would cost an allocation
	// per update).
	var gone func() bool
	if len(g.ctxs) > 0 {
		gone = g.gone
	}
	g.first, g.err = gc.flush(g.k, gone)
	if errors.Is(g.err, errs.ErrExhausted) && len(g.ks) > 1 {
		// Near 2^64-1 the group may not fit where some members would:
		// serve them one by one, in order, so that each gets what is left.
		g.each = make([]memberResult, len(g.ks))
		for j, kj := range g.ks {
			g.each[j].first, g.each[j].err = gc.flush(kj, func() bool { return ended(g.ctxs[j]) })
		}
	}
	first, err := g.result(0, 0)
	done := g.done
	gc.mu.Lock()
	next := gc.open
	if next != nil {
		gc.open = nil // its members are fixed; flushing stays true for its leader
	} else {
		gc.flushing = false
	}
	if done == nil {
		// Nobody joined, so nobody else holds g: the next leader may
		// reuse it, and a caller alone allocates nothing here.
		*g = group{}
		gc.spare = g
	}
	gc.mu.Unlock()
	// Members are woken first, the next leader last: the runtime runs the
	// goroutine readied last first, so the next update starts at once.
	if done != nil {
		close(done)
	}
	if next != nil {
		close(next.turn)
	}
	return first, err
}

// Members counts the calls whose numbers came from another caller's
// update: they joined a group as members.
func (gc *GroupCommit) Members() uint64 { return gc.members.Load() }

// Flushing reports whether an update is in progress (a leader whose
// caller left finishes its update in a goroutine of its own).
func (gc *GroupCommit) Flushing() bool {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	return gc.flushing
}

// Waiting is the group waiting for the update in progress: how many
// callers (0: no group waits) and how many numbers they asked for.
func (gc *GroupCommit) Waiting() (callers int, numbers uint64) {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	if gc.open == nil {
		return 0, 0
	}
	return max(1, len(gc.open.ks)), gc.open.k
}
