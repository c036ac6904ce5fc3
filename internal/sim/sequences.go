package sim

import (
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
)

// sequence returns process p's Sequence s, opening it if needed.
func (w *world) sequence(ho *host, p, s int) (*engine.Sequence, error) {
	if sq := ho.seqs[p][s]; sq != nil {
		return sq, nil
	}
	c := w.h.Sequences[s]
	sq, err := ho.procs[p].SequenceContext(w.opCtx(), c.Name, engine.SequenceBlock(c.Block), engine.SequenceLeaseSize(c.Lease))
	if err != nil {
		return nil, err
	}
	if ho.seqs[p] == nil {
		ho.seqs[p] = map[int]*engine.Sequence{}
	}
	ho.seqs[p][s] = sq
	return sq, nil
}

func (w *world) seqNext(ho *host, s Step) {
	if !ho.cfg.Registry || ho.procs[s.Proc] == nil || s.Seq >= len(w.h.Sequences) {
		return
	}
	sq, err := w.sequence(ho, s.Proc, s.Seq)
	if err != nil {
		return
	}
	ctx := w.stepCtx(s)
	var first uint64
	if s.N == 1 && s.Arg != "nextn" {
		first, err = sq.NextContext(ctx)
	} else {
		first, err = sq.NextNContext(ctx, s.N)
	}
	if err == nil && s.Cancelled {
		w.check.violation("h%d/p%d took %s number %d with a context that had ended", ho.i, s.Proc, w.h.Sequences[s.Seq].Name, first)
	}
	if err == nil {
		w.did(int(s.N))
		w.check.seqIssued(ho, s.Proc, s.Seq, first, s.N)
		w.check.seqCovered(ho, s.Proc, s.Seq, first+s.N-1)
		if w.cut[ho.cfg.DC] {
			w.reached["sequence numbers taken in a data centre cut off"]++
		}
		if ho.cfg.DC > 0 {
			w.reached["sequence numbers taken in a second data centre"]++
		}
	}
}

func (w *world) seqCreate(s Step) {
	if s.Seq >= len(w.h.Sequences) {
		return
	}
	name := w.h.Sequences[s.Seq].Name
	var info registry.SequenceInfo
	var err error
	if s.Max == 0 {
		info, err = admin.CreateSequenceKeepMax(w.opCtx(), w.reg, name, s.Start)
	} else {
		info, err = admin.CreateSequence(w.opCtx(), w.reg, name, s.Start, s.Max)
	}
	if err == nil {
		w.did(1)
	}
	w.check.seqCreated(s.Seq, s, info, err)
}
