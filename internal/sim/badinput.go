package sim

import (
	"errors"
	"math"
	"path/filepath"

	"github.com/snapid/snapid/internal/engine"
)

// badInput makes a call that must fail and change nothing.
func (w *world) badInput(ho *host, s Step) {
	var sq *engine.Sequence
	if s.Arg == "seq-next-0" {
		// Opening the sequence is not the bad call: before the snapshot.
		if !ho.cfg.Registry || ho.procs[s.Proc] == nil || s.Seq >= len(w.h.Sequences) {
			return
		}
		var err error
		if sq, err = w.sequence(ho, s.Proc, s.Seq); err != nil {
			return
		}
		w.settle()
	}
	before := w.check.snapshot(ho)
	var err error
	switch s.Arg {
	case "seq-block-0", "seq-name":
		g := ho.procs[s.Proc]
		if !ho.cfg.Registry || g == nil || s.Seq >= len(w.h.Sequences) {
			return
		}
		name, opts := w.h.Sequences[s.Seq].Name, []engine.SequenceOption{engine.SequenceBlock(0)}
		if s.Arg == "seq-name" {
			name, opts = "-bad", nil
		}
		var bad *engine.Sequence
		if bad, err = g.SequenceContext(w.opCtx(), name, opts...); err == nil {
			_ = bad.Close()
		}
	case "seq-next-0":
		_, err = sq.NextNContext(w.opCtx(), 0)
	case "name":
		var g *engine.Generator
		g, err = engine.OpenContext(w.opCtx(), ho.counter, "-bad name", w.options(ho)...)
		if err == nil {
			_ = g.Close()
		}
	case "counter-dir":
		var g *engine.Generator
		g, err = engine.OpenContext(w.opCtx(), filepath.Join(ho.dir, "missing", "counter"), ho.cfg.Name, w.options(ho)...)
		if err == nil {
			_ = g.Close()
		}
	case "takeover-max":
		var g *engine.Generator
		g, err = engine.OpenContext(w.opCtx(), ho.counter, ho.cfg.Name, w.options(ho, engine.WithTakeover(uint64(math.MaxUint64)))...)
		if err == nil {
			_ = g.Close()
		}
	case "block-0":
		var g *engine.Generator
		g, err = engine.OpenContext(w.opCtx(), ho.counter, ho.cfg.Name, w.options(ho, engine.WithBlock(0))...)
		if err == nil {
			_ = g.Close()
		}
	case "other-name":
		// A second name on a counter that processes of the host use
		// under its own name (one counter, one name), also during an
		// outage, when the registry cannot be asked.
		// (Without a registry a counter may serve two names: their ids
		// differ by the name; only one counter per name is required.)
		if !w.running(ho) || !ho.cfg.Registry {
			return
		}
		var g *engine.Generator
		g, err = engine.OpenContext(w.opCtx(), ho.counter, "other", w.options(ho)...)
		if err == nil {
			_ = g.Close()
		}
	case "next-0":
		g := ho.procs[s.Proc]
		if g == nil {
			return
		}
		_, err = g.NextNContext(w.opCtx(), 0)
	}
	w.did(1)
	if err == nil {
		w.check.violation("bad input %q was accepted on h%d", s.Arg, ho.i)
		return
	}
	w.check.unchanged(ho, before, "bad input "+s.Arg)
}

// refusedAsInput reports whether an Open failed on what it was given or
// found (a damaged file, a name the counter does not serve, a bad option),
// not on a fault: such a refusal changes nothing in the registry.
func refusedAsInput(err error) bool {
	return err != nil && (errors.Is(err, engine.ErrCorrupt) || errors.Is(err, engine.ErrNameMismatch) ||
		errors.Is(err, engine.ErrInvalidOption) || errors.Is(err, engine.ErrInvalidName))
}
