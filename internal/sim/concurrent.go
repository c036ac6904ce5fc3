package sim

import (
	"context"
	"math/rand/v2"
	"sync"

	"github.com/snapid/snapid"
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
	for p, g := range ho.procs {
		if g == nil {
			continue
		}
		seqs := make(map[int]*snapid.Sequence, len(ho.seqs[p]))
		for i, sq := range ho.seqs[p] {
			seqs[i] = sq
		}
		for k := range 2 {
			rng := rand.New(rand.NewPCG(w.h.Seed, uint64(w.step*16+p*2+k)))
			wg.Go(func() {
				for range s.N {
					n := 1 + uint64(rng.IntN(3))
					first, err := g.NextNContext(context.Background(), n)
					if err == nil {
						r := got{p: p, seq: -1, first: first, n: n}
						r.uncovered = w.check.covered(ho, p, ho.cfg.Name, first+n-1)
						mu.Lock()
						results = append(results, r)
						mu.Unlock()
					}
					for i, sq := range seqs {
						if v, err := sq.NextContext(context.Background()); err == nil {
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
	for _, r := range results {
		w.ops++
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
