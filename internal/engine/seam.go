package engine

import (
	"runtime"
	"time"

	"github.com/snapid/snapid/internal/clock"
	"github.com/snapid/snapid/internal/seam"
	"github.com/snapid/snapid/internal/statefile"
)

// The simulator's way in (see package internal/seam).
func init() {
	seam.WithIO = func(x seam.FileIO) any { return withIO(x) }
	seam.WithFS = func(f statefile.FS) any { return withFS(f) }
	seam.WithClock = func(c clock.Clock) any { return withClock(c) }
	seam.WithRetryWait = func(wait func(int) time.Duration) any { return withRetryWait(wait) }
	seam.Crash = func(g any) error { return crash(g.(*Generator)) }
	seam.Settle = func(g any) {
		gen := g.(*Generator)
		busy := func() bool {
			if gen.res != nil && gen.res.extending.Load() {
				return true
			}
			if gen.block != nil && gen.block.busy() {
				return true // the next block, reserved ahead
			}
			if gc := gen.gc; gc != nil {
				// A leader whose caller left finishes its update in a
				// goroutine of its own (an extension among it).
				gc.mu.Lock()
				flushing := gc.flushing
				gc.mu.Unlock()
				if flushing {
					return true
				}
			}
			gen.seqMu.Lock()
			defer gen.seqMu.Unlock()
			for _, s := range gen.seqs {
				if s.prefetching.Load() || s.alloc.busy() {
					return true
				}
			}
			return false
		}
		for busy() {
			runtime.Gosched()
			time.Sleep(10 * time.Microsecond)
		}
	}
}

// crash abandons g as a killed process would: its locks and descriptors
// go away (its Sequences' lease files too), but nothing is written and
// nothing is returned to the registry.
func crash(g *Generator) error {
	g.closed.Store(true)
	if g.block != nil {
		g.block.close()
	}
	g.seqMu.Lock()
	seqs := append([]*Sequence(nil), g.seqs...)
	g.seqMu.Unlock()
	for _, s := range seqs {
		s.crash()
	}
	if g.res != nil {
		g.res.cancel()
		g.res.wg.Wait()
		if err := g.res.host.close(); err != nil {
			return err
		}
	}
	g.host.drop() // its presence lock goes, nothing is written
	return g.file.close()
}

// crash abandons s as a killed process would: its prefetch stops and its
// locks and descriptors go away. Closing a Sequence writes nothing and
// tells the registry nothing (the Generator's last Close does), so this
// is Close.
func (s *Sequence) crash() { _ = s.Close() }
