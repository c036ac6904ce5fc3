package sim

import (
	"context"
	"os"
	"strconv"

	"github.com/snapid/snapid/internal/engine"
)

// Taking ids through each of the Generator's ways.

// next takes numbers from process s.Proc of ho, through one of the
// Generator's ways the step picks: UniqueIDContext, AppendUniqueIDContext,
// UniqueUint64Context (striped), NextID or NextIDsContext for one;
// NextNContext or NextIDsContext (the decimal form's only way) for more;
// with a context already ended if the step says so (then, if the call
// fails, the counter is unchanged).
func (w *world) next(ho *host, s Step) {
	if s.Arg == "any-open" && ho.procs[s.Proc] == nil {
		for p, g := range ho.procs {
			if g != nil {
				s.Proc = p
				break
			}
		}
	}
	g := ho.procs[s.Proc]
	if g == nil {
		return
	}
	w.check.requested(ho, s.N)
	if s.Cancelled && s.Keep {
		w.nextCancelledWaiting(ho, s, g)
		return
	}
	ctx := w.stepCtx(s)
	var before []byte
	if s.Cancelled {
		before, _ = os.ReadFile(ho.counter)
	}
	var err error
	api := w.pick(0xa91, 4)
	switch {
	case s.N > 1 && (ho.cfg.Form == engine.FormatDecimal || api%2 == 1):
		// The decimal form has no NextN (it skips numbers ending in 0).
		err = w.nextIDs(ho, s.Proc, g, ctx, s.N)
	case s.N > 1:
		var first uint64
		if first, err = g.NextNContext(ctx, s.N); err == nil {
			w.did(int(s.N))
			w.check.issued(ho, s.Proc, ho.cfg.Name, first, s.N)
		}
	case api == 1:
		err = w.nextIDs(ho, s.Proc, g, ctx, 1)
	case api == 2 && ho.cfg.Form == engine.FormatStriped:
		var v uint64
		if v, err = g.UniqueUint64Context(ctx); err == nil {
			w.did(1)
			w.check.issuedID(ho, s.Proc, strconv.FormatUint(v, 10))
		}
	case api == 2:
		var b []byte
		if b, err = g.AppendUniqueIDContext(ctx, make([]byte, 0, 8)); err == nil {
			w.did(1)
			w.check.issuedID(ho, s.Proc, string(b))
		}
	case api == 3 && !s.Cancelled:
		var id engine.ID
		if id, err = g.NextID(); err == nil {
			w.did(1)
			w.check.issuedParsed(ho, s.Proc, id)
		}
	default:
		var id string
		if id, err = g.UniqueIDContext(ctx); err == nil {
			w.did(1)
			w.check.issuedID(ho, s.Proc, id)
		}
	}
	switch {
	case err == nil && s.Cancelled:
		w.check.violation("h%d/p%d took a number with a context that had ended", ho.i, s.Proc)
	case err != nil && s.Cancelled:
		w.check.tookNothing(ho, before)
	case err != nil:
		ho.dense = false
	}
}

// nextIDs takes n ids from process p of ho with NextIDsContext (all or
// none, in order).
func (w *world) nextIDs(ho *host, p int, g *engine.Generator, ctx context.Context, n uint64) error {
	var ids []engine.ID
	err := g.NextIDsContext(ctx, n, func(id engine.ID) { ids = append(ids, id) })
	if err == nil && uint64(len(ids)) != n {
		w.check.violation("h%d/p%d: NextIDsContext(%d) gave %d ids", ho.i, p, n, len(ids))
	}
	if err != nil && len(ids) > 0 {
		w.check.violation("h%d/p%d: NextIDsContext(%d) failed (%v) after giving %d ids", ho.i, p, n, err, len(ids))
	}
	for _, id := range ids {
		w.did(1)
		w.check.issuedParsed(ho, p, id)
	}
	return err
}

// pick is a number below n drawn from the seed, the step and salt alone
// (not from the world's generator, whose draws it leaves as they were).
func (w *world) pick(salt uint64, n int) int {
	x := w.h.Seed*0x9e3779b97f4a7c15 ^ uint64(w.step+1)*0xbf58476d1ce4e5b9 ^ salt*0x94d049bb133111eb
	x ^= x >> 31
	x *= 0xd6e9_8a9c_4c15_9b23
	x ^= x >> 29
	return int(x % uint64(n))
}
