package sim

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/snapid/snapid/internal/engine"
)

// concurrent runs a burst: every open process of ho calls at once from
// two goroutines each, n calls per goroutine (NextNContext of 1 to 3
// numbers, and Next of each open Sequence), and, if closeOne, process 0
// closes while they run. Which goroutine gets which numbers depends on
// the scheduler: this step is the one part of a history that may differ
// between two runs of one seed (the checks hold either way).
func (w *world) concurrent(ho *host, s Step) {
	type got struct {
		p, seq    int // seq -1: the counter
		first, n  uint64
		uncovered string
	}
	var (
		mu      sync.Mutex
		results []got
		wg      sync.WaitGroup
	)
	// The first open process gets a third caller: with two, each caller
	// leads a group of its own while the other's update runs; a third
	// joins the group waiting (groups.go).
	var procs []*engine.Generator
	for _, g := range ho.procs {
		if g != nil {
			procs = append(procs, g)
		}
	}
	var running atomic.Int32
	members := groupMembers(procs)
	defer w.slowBurst(ho, procs, &running)()
	for p, g := range ho.procs {
		if g == nil {
			continue
		}
		seqs := make(map[int]*engine.Sequence, len(ho.seqs[p]))
		for i, sq := range ho.seqs[p] {
			seqs[i] = sq
		}
		callers := 2
		if g == procs[0] {
			callers = 3
		}
		for k := range callers {
			rng := rand.New(rand.NewPCG(w.h.Seed, uint64(w.step*16+p*3+k)))
			running.Add(1)
			wg.Go(func() {
				defer running.Add(-1)
				for range s.N {
					n := 1 + uint64(rng.IntN(3))
					if ho.cfg.Form == engine.FormatDecimal {
						// (No NextN in the decimal form: it skips numbers ending in 0.)
						var ids []engine.ID
						if g.NextIDsContext(w.opCtx(), n, func(id engine.ID) { ids = append(ids, id) }) == nil {
							mu.Lock()
							for _, id := range ids {
								results = append(results, got{p: p, seq: -1, first: id.Number, n: 1})
							}
							mu.Unlock()
						}
					} else if first, err := g.NextNContext(w.opCtx(), n); err == nil {
						r := got{p: p, seq: -1, first: first, n: n}
						r.uncovered = w.check.covered(ho, p, ho.cfg.Name, first+n-1)
						mu.Lock()
						results = append(results, r)
						mu.Unlock()
					}
					for i, sq := range seqs {
						if v, err := sq.NextContext(w.opCtx()); err == nil {
							mu.Lock()
							results = append(results, got{p: p, seq: i, first: v, n: 1})
							mu.Unlock()
						}
					}
				}
			})
		}
	}
	if s.Keep && ho.procs[0] != nil {
		g, sqs := ho.procs[0], ho.seqs[0]
		wg.Go(func() {
			for _, sq := range sqs {
				_ = sq.Close()
			}
			_ = g.Close()
		})
		ho.procs[0], ho.seqs[0] = nil, nil
	}
	wg.Wait()
	if groupMembers(procs) > members {
		w.reached["group-member"]++
	}
	for _, r := range results {
		w.did(int(r.n))
		if r.uncovered != "" {
			w.check.violation("%s", r.uncovered)
		}
		if r.seq >= 0 {
			w.check.seqIssued(ho, r.p, r.seq, r.first, r.n)
		} else {
			w.check.issued(ho, r.p, ho.cfg.Name, r.first, r.n)
		}
	}
}

// storm starts every process of ho that is not running at the same
// moment (a host's services after a reboot), and, if takeover, a new host
// taking ho's name over at that moment too; then each that opened issues
// one id. Who wins the host's gate and the registry is the scheduler's
// choice.
func (w *world) storm(ho *host, takeover bool, dc int) {
	var nh *host
	if takeover && ho.cfg.Registry && !ho.joinPending {
		var err error
		if nh, err = w.addHost(ho.cfg.in(dc)); err != nil {
			w.check.violation("storm: %v", err)
			return
		}
		nh.takeover, nh.takeSet = 0, true
		w.exempt(ho.cfg.Name, "its name was taken over")
		nh.exempt = ""
	}
	type slot struct {
		h *host
		p int
	}
	var slots []slot
	if !ho.released {
		for p, g := range ho.procs {
			if g == nil {
				slots = append(slots, slot{ho, p})
			}
		}
	}
	if nh != nil {
		slots = append(slots, slot{nh, 0})
	}
	opened := make([]*engine.Generator, len(slots))
	var wg sync.WaitGroup
	for i, sl := range slots {
		opts := w.options(sl.h)
		wg.Go(func() {
			g, err := engine.OpenContext(context.Background(), sl.h.counter, sl.h.cfg.Name, opts...)
			if err == nil {
				opened[i] = g
			}
		})
	}
	wg.Wait()
	for i, sl := range slots {
		if g := opened[i]; g != nil {
			sl.h.procs[sl.p] = g
			sl.h.procStride[sl.p] = sl.h.stride()
			sl.h.exts[sl.p] = nil
			sl.h.opened = true
			w.settle()
			w.did(1)
			if id, err := g.UniqueIDContext(w.opCtx()); err == nil {
				w.did(1)
				w.check.issuedID(sl.h, sl.p, id)
			}
		}
	}
}
