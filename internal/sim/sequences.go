package sim

import (
	"encoding/binary"
	"math/rand/v2"

	"github.com/snapid/snapid"
)

// sequence returns process p's Sequence s, opening it if needed.
func (w *world) sequence(ho *host, p, s int) (*snapid.Sequence, error) {
	if sq := ho.seqs[p][s]; sq != nil {
		return sq, nil
	}
	c := w.h.Sequences[s]
	sq, err := ho.procs[p].SequenceContext(w.opCtx(), c.Name, snapid.SequenceBlock(c.Block), snapid.SequenceLeaseSize(c.Lease))
	if err != nil {
		return nil, err
	}
	if ho.seqs[p] == nil {
		ho.seqs[p] = map[int]*snapid.Sequence{}
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
	var info snapid.SequenceInfo
	var err error
	if s.Max == 0 {
		info, err = snapid.CreateSequenceKeepMax(w.opCtx(), w.reg, name, s.Start)
	} else {
		info, err = snapid.CreateSequence(w.opCtx(), w.reg, name, s.Start, s.Max)
	}
	if err == nil {
		w.did(1)
	}
	w.check.seqCreated(s.Seq, s, info, err)
}

// addSeqRestores adds, from a generator of its own, to a third of the
// histories whose first host is registered, host 0's lease file of its
// first sequence restored in place from a copy that is, most often,
// exactly one generation behind: p0 takes numbers (with Next, blocks and
// a lease taken in advance now and then, or straight from the file), the
// host's files are copied, and p0 takes a lease's worth straight from the
// file (a new lease, or the switch to the one the copy took in advance).
// p1 opens the sequence at the copy (only the floor then tells it the
// file went back) or, with the floor restored too, after p0 moved (only
// what it saw tells). After the restore, before anything else is taken:
// p1 takes; p1 closes and opens again while p0 runs; or p0 closed before
// the restore, p1 closes (the host's last process records where the
// lease stands) and opens again (the host's next start). Without the
// floor, a process that opens the sequence after the restore takes too.
func addSeqRestores(h *History) {
	rng := rand.New(rand.NewPCG(h.Seed, 0x5e9f))
	if !h.Hosts[0].Registry || len(h.Sequences) == 0 || rng.IntN(3) != 0 {
		return
	}
	lease := h.Sequences[0].Lease
	seq := func(p int, n uint64, nextn bool) Step {
		s := Step{Kind: KSeqNext, Host: 0, Proc: p, Seq: 0, N: n}
		if nextn {
			s.Arg = "nextn"
		}
		return s
	}
	open := func(p int) []Step {
		return []Step{{Kind: KOpen, Host: 0, Proc: p}, {Kind: KSeqOpen, Host: 0, Proc: p, Seq: 0}}
	}
	floors := rng.IntN(2) == 0
	steps := []Step{{Kind: KClose, Host: 0, Proc: 1}, {Kind: KClose, Host: 0, Proc: 2}, {Kind: KOpen, Host: 0, Proc: 0}}
	for range 1 + rng.IntN(6) {
		if rng.IntN(2) == 0 {
			steps = append(steps, seq(0, 1, false))
		} else {
			steps = append(steps, seq(0, 1+uint64(rng.IntN(int(lease))), true))
		}
	}
	if !floors {
		steps = append(steps, open(1)...)
	}
	steps = append(steps, Step{Kind: KBackup, Host: 0})
	for range 1 + rng.IntN(3) {
		steps = append(steps, seq(0, 1, true)) // the copy's lease, mostly
	}
	steps = append(steps, seq(0, lease, true))
	if floors {
		steps = append(steps, open(1)...)
	}
	restore := Step{Kind: KRestoreLive, Host: 0, Arg: "leases"}
	if floors {
		restore.Arg = "leases+floors"
	}
	then := rng.IntN(4)
	if floors && then == 3 {
		// A process opening the sequence after a lease file and its
		// floor restored together is not covered when the copy's lease
		// taken in advance is the registry's record (docs/ARCHITECTURE.md).
		then = rng.IntN(3)
	}
	switch then {
	case 0: // p1 takes
		steps = append(steps, restore, seq(1, 1, true))
	case 1: // p1's Sequence and process closed and opened again (p0 runs on)
		steps = append(steps, restore, Step{Kind: KClose, Host: 0, Proc: 1})
		steps = append(steps, append(open(1), seq(1, 1, true))...)
	case 2: // the host's next start: p0 closed before the restore, p1 after it
		steps = append(steps, Step{Kind: KClose, Host: 0, Proc: 0}, restore, Step{Kind: KClose, Host: 0, Proc: 1})
		steps = append(steps, append(open(1), seq(1, 1, true))...)
	case 3: // a process that opens the sequence after the restore
		steps = append(steps, restore)
		steps = append(steps, append(open(2), seq(2, 1, true))...)
	}
	steps = append(steps, seq(0, 1, true), seq(1, 1, true))
	// At the start in half of them (host 0 fresh, before the history
	// releases its name, has it taken over or uses the sequence up).
	at := 0
	if rng.IntN(2) == 0 {
		at = rng.IntN(len(h.Steps) + 1)
	}
	h.Steps = append(h.Steps[:at], append(steps, h.Steps[at:]...)...)
}

// leaseGen is the generation of a lease record b (0 if b is not one).
func leaseGen(b []byte) uint64 {
	if len(b) != 512 || string(b[:8]) != "snapseq2" {
		return 0
	}
	return binary.LittleEndian.Uint64(b[272:])
}
