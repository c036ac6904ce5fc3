package sim

import (
	"math/rand/v2"

	"github.com/snapid/snapid/internal/engine"
)

// The cases Generate adds to a random history: form changes, the cases
// random steps alone would rarely reach (a released name reopened, a
// second counter, a counter renamed under its processes, …), and data
// centres.

// addForms gives the hosts of a third of the histories numeric id forms
// (decimal or striped, stride simStride), from a generator of its own.
func addForms(h *History) {
	rng := rand.New(rand.NewPCG(h.Seed, 0xf0))
	if rng.IntN(3) != 0 {
		return
	}
	for i := range h.Hosts {
		h.Hosts[i].Form = engine.Format(rng.IntN(3))
	}
}

// simStride is the stride of striped ids in a history; simStride2 the
// one a form change moves a host to.
const (
	simStride  = 1000
	simStride2 = 640
)

// addCases adds, from a generator of its own, cases a history would not
// reach otherwise: in a third of the histories a second counter opened
// under a host's name; in a third a host's counter replaced by rename
// under its running processes, which then take numbers (with a new
// process on the new file: standalone, the processes still on the old
// file would repeat its numbers); in every history with a standalone
// host with numeric ids, its stride or node number changed; up to three
// closes racing an open on one host; in a quarter, a standalone host
// joining the registry; in half the histories with a striped host, its
// counter put just below the striped bound.
func addCases(h *History) {
	rng := rand.New(rand.NewPCG(h.Seed, 0xca5e))
	addSecondCounter(h, rng)
	addRename(h, rng)
	addCloseOpens(h, rng)
	addJoin(h, rng)
	addLeaseBehindFloor(h, rng)
	addLeaseRecorded(h, rng)
	addLeaseHeldClose(h, rng)
	addStripedBound(h, rng)
	addFormChange(h, rng)
	addLiveStride(h, rng)
	addClusterStride(h, rng)
}

// insertSteps puts steps into h's steps at index at (at most the end).
func insertSteps(h *History, at int, steps ...Step) {
	at = min(at, len(h.Steps))
	h.Steps = append(h.Steps[:at], append(steps, h.Steps[at:]...)...)
}

// addSecondCounter, in a third of the histories, opens a second counter
// under host 0's name.
func addSecondCounter(h *History, rng *rand.Rand) {
	if rng.IntN(3) == 0 {
		insertSteps(h, rng.IntN(len(h.Steps)+1), Step{Kind: KOpen, Host: 0, Proc: 0}, Step{Kind: KSecond, Host: 0})
	}
}

// addRename, in a third of the histories, replaces a host's counter by
// rename under its running processes, which then take numbers (with a
// new process on the new file).
func addRename(h *History, rng *rand.Rand) {
	if rng.IntN(3) != 0 {
		return
	}
	ho := rng.IntN(len(h.Hosts))
	n := 1 + uint64(rng.IntN(100))
	insertSteps(h, rng.IntN(len(h.Steps)+1),
		Step{Kind: KOpen, Host: ho, Proc: 0}, Step{Kind: KNext, Host: ho, Proc: 0, N: n},
		Step{Kind: KClose, Host: ho, Proc: 2},
		Step{Kind: KRename, Host: ho},
		Step{Kind: KOpen, Host: ho, Proc: 2}, Step{Kind: KNext, Host: ho, Proc: 2, N: n},
		Step{Kind: KNext, Host: ho, Proc: 0, N: n}, Step{Kind: KNext, Host: ho, Proc: 1, N: n},
		Step{Kind: KNext, Host: ho, Proc: 2, N: n})
}

// addCloseOpens adds up to three closes racing an open on one host.
func addCloseOpens(h *History, rng *rand.Rand) {
	for range rng.IntN(4) {
		ho := rng.IntN(len(h.Hosts))
		p := rng.IntN(3)
		insertSteps(h, rng.IntN(len(h.Steps)+1), Step{Kind: KOpen, Host: ho, Proc: p},
			Step{Kind: KCloseOpen, Host: ho, Proc: p, N: 1 + uint64(rng.IntN(60))})
	}
}

// addJoin, in a quarter of the histories, has a standalone host (with
// ids in the name form) join the registry, at any point of the history.
func addJoin(h *History, rng *rand.Rand) {
	if rng.IntN(4) != 0 {
		return
	}
	for i, c := range h.Hosts {
		// (With sync off, what it handed out standalone may come
		// back after a power cut: not covered, registry or not.)
		if !c.Registry && c.Sync && c.Form == engine.FormatName {
			insertSteps(h, rng.IntN(len(h.Steps)+1), Step{Kind: KJoin, Host: i}, Step{Kind: KOpen, Host: i, Proc: 0},
				Step{Kind: KNext, Host: i, Proc: 0, N: 1 + uint64(rng.IntN(60))})
			return
		}
	}
}

// addLeaseBehindFloor, in a quarter of the histories whose host 0 is
// registered, restores a lease file in place exactly one number behind
// its floor (NextN takes straight from the file), then first touched by
// a process that never saw the later position.
func addLeaseBehindFloor(h *History, rng *rand.Rand) {
	if !h.Hosts[0].Registry || rng.IntN(4) != 0 {
		return
	}
	nextn := func(p int, n uint64) Step {
		return Step{Kind: KSeqNext, Host: 0, Proc: p, Seq: 0, N: n, Arg: "nextn"}
	}
	insertSteps(h, rng.IntN(len(h.Steps)+1), Step{Kind: KOpen, Host: 0, Proc: 0}, nextn(0, 2), Step{Kind: KBackup, Host: 0},
		nextn(0, 1), Step{Kind: KRestoreLive, Host: 0, Arg: "leases"}, Step{Kind: KClose, Host: 0, Proc: 1},
		Step{Kind: KOpen, Host: 0, Proc: 1}, nextn(1, 1))
}

// addLeaseRecorded, in a quarter of the histories whose host 0 is
// registered: the host's files copied while its sequence lease stands at
// one position, the host then taking more and closing cleanly (its last
// process records where the lease stands), the copy put back and the
// host started: the copy's position is behind the one recorded, and the
// numbers between must not come again.
func addLeaseRecorded(h *History, rng *rand.Rand) {
	if !h.Hosts[0].Registry || len(h.Sequences) == 0 || rng.IntN(4) != 0 {
		return
	}
	seq := func(p int) Step { return Step{Kind: KSeqNext, Host: 0, Proc: p, Seq: 0, N: 2 + uint64(rng.IntN(3))} }
	insertSteps(h, rng.IntN(len(h.Steps)+1), Step{Kind: KOpen, Host: 0, Proc: 0}, seq(0), Step{Kind: KBackup, Host: 0}, seq(0),
		Step{Kind: KClose, Host: 0, Proc: 0}, Step{Kind: KClose, Host: 0, Proc: 1}, Step{Kind: KClose, Host: 0, Proc: 2},
		Step{Kind: KRestore, Host: 0}, Step{Kind: KOpen, Host: 0, Proc: 1}, seq(1))
}

// addLeaseHeldClose, in a quarter of the histories whose host 0 is
// registered: the host's last process closing (held as it is about to
// set the name's mark back, after recording where the host's sequence
// lease stands) while another opens; the new one takes sequence numbers
// and dies, the host's files are restored from a copy made at the
// recorded position, and a third process starts: it must not take the
// second one's numbers again.
func addLeaseHeldClose(h *History, rng *rand.Rand) {
	if !h.Hosts[0].Registry || len(h.Sequences) == 0 || rng.IntN(4) != 0 {
		return
	}
	seq := func(p int) Step { return Step{Kind: KSeqNext, Host: 0, Proc: p, Seq: 0, N: 2 + uint64(rng.IntN(3))} }
	insertSteps(h, rng.IntN(len(h.Steps)+1), Step{Kind: KClose, Host: 0, Proc: 1}, Step{Kind: KClose, Host: 0, Proc: 2},
		Step{Kind: KOpen, Host: 0, Proc: 0}, seq(0), Step{Kind: KBackup, Host: 0},
		Step{Kind: KCloseOpen, Host: 0, Proc: 0, N: 1, Arg: "held"}, seq(1),
		Step{Kind: KRestore, Host: 0}, Step{Kind: KOpen, Host: 0, Proc: 2}, seq(2))
}

// addStripedBound, for half the hosts with striped ids, puts the counter
// near the striped form's bound (2^63-1 over the stride): the last ids
// below 2^63, then ErrExhausted, never one between 2^63 and 2^64. In
// half of them the bound is WithMaxID's, a multiple of both strides plus
// less than 200, often below the node number (the last id of the bound's
// own multiple is then above it).
func addStripedBound(h *History, rng *rand.Rand) {
	for i, c := range h.Hosts {
		if c.Form != engine.FormatStriped || rng.IntN(2) != 0 {
			continue
		}
		bound := uint64(1<<63 - 1)
		if rng.IntN(2) == 0 {
			bound = simStride*simStride2*10_000_000_000 + uint64(rng.IntN(200))
			h.Hosts[i].MaxID = bound
		}
		insertSteps(h, rng.IntN(len(h.Steps)+1),
			Step{Kind: KClose, Host: i, Proc: 0}, Step{Kind: KClose, Host: i, Proc: 1}, Step{Kind: KClose, Host: i, Proc: 2},
			Step{Kind: KInit, Host: i, N: bound/simStride - 5},
			Step{Kind: KOpen, Host: i, Proc: 0}, Step{Kind: KNext, Host: i, Proc: 0, N: 1},
			Step{Kind: KNext, Host: i, Proc: 0, N: 1}, Step{Kind: KNext, Host: i, Proc: 0, N: 8},
			Step{Kind: KNext, Host: i, Proc: 0, N: 1})
	}
}

// addFormChange changes the stride or node number of the first
// standalone host with numeric ids.
func addFormChange(h *History, rng *rand.Rand) {
	for i, c := range h.Hosts {
		if c.Form != engine.FormatName && !c.Registry {
			insertSteps(h, rng.IntN(len(h.Steps)+1), Step{Kind: KForm, Host: i}, Step{Kind: KNext, Host: i, Proc: 0, N: 1})
			return
		}
	}
}

// addLiveStride, for a standalone host with striped ids (each in turn
// with an even chance, up to the first picked), changes the stride by one
// process while another runs on with the one it had; both then take
// numbers, the new form first, more than the counter had reached (so
// that, if both issued, their ids would meet: 16×1000 = 25×640).
func addLiveStride(h *History, rng *rand.Rand) {
	for i, c := range h.Hosts {
		if c.Form == engine.FormatStriped && !c.Registry && rng.IntN(2) == 0 {
			next := func(p int) Step { return Step{Kind: KNext, Host: i, Proc: p, N: 1 + uint64(rng.IntN(40))} }
			insertSteps(h, rng.IntN(len(h.Steps)+1), Step{Kind: KOpen, Host: i, Proc: 0}, Step{Kind: KOpen, Host: i, Proc: 1}, next(1),
				Step{Kind: KForm, Host: i, Arg: "live"}, next(0), next(1), next(0), next(1), next(1))
			return
		}
	}
}

// addClusterStride has a registered host with striped ids try another
// stride than the cluster's, after its first Open or (while another host
// already opened with the cluster's) at its very first Open.
func addClusterStride(h *History, rng *rand.Rand) {
	var striped []int
	for i, c := range h.Hosts {
		if c.Registry && c.Form == engine.FormatStriped {
			striped = append(striped, i)
		}
	}
	switch {
	case len(striped) > 1 && rng.IntN(2) == 0:
		a, b := striped[0], striped[1]
		insertSteps(h, 0, Step{Kind: KOpen, Host: a, Proc: 0}, Step{Kind: KForm, Host: b}, Step{Kind: KNext, Host: b, Proc: 0, N: 1})
	case len(striped) > 0:
		i := striped[rng.IntN(len(striped))]
		insertSteps(h, rng.IntN(len(h.Steps)+1), Step{Kind: KForm, Host: i}, Step{Kind: KNext, Host: i, Proc: 0, N: 1})
	}
}

// addDataCentres puts the hosts of half the histories in two data
// centres, the new hosts of take-overs and clones in either, and cuts a
// data centre off from the cluster's quorum (or heals it) before about
// one step in twenty-five; it adds an operator's repairs. It draws from a
// generator of its own, so that the rest of a seed's history is what it
// was before these steps were simulated.
func addDataCentres(h *History) {
	rng := rand.New(rand.NewPCG(h.Seed, 0xdc))
	dcs := 1 + rng.IntN(2)
	for i := range h.Hosts {
		h.Hosts[i].DC = rng.IntN(dcs)
	}
	steps := make([]Step, 0, len(h.Steps)+len(h.Steps)/50)
	for _, s := range h.Steps {
		if rng.IntN(25) == 0 {
			steps = append(steps, Step{Kind: KCut, DC: rng.IntN(dcs), Keep: rng.IntN(3) != 0})
		}
		switch s.Kind {
		case KTakeover, KClone, KStorm:
			s.DC = rng.IntN(dcs)
		case KRestoreLive:
			if rng.IntN(2) == 0 {
				s.Arg = "leases"
			}
		}
		steps = append(steps, s)
		// An operator repairs a corrupted counter, now and then, or
		// tries a repair at any time (refused while registered
		// processes run, or with next 0).
		if s.Kind == KCorrupt && s.Arg == "counter" && rng.IntN(2) == 0 || rng.IntN(200) == 0 {
			r := Step{Kind: KRepair, Host: s.Host}
			if rng.IntN(4) == 0 {
				r.Arg = "next-0"
			}
			steps = append(steps, r)
		}
		if s.Kind == KSeqNext && rng.IntN(8) == 0 {
			// A lease file restored in place from a copy the process then
			// moved past, first touched by another process: one that
			// opened the sequence (without taking) just before, or that
			// opens it after. (A lease file restored with its floor is
			// the sequence tests' (seqlease_test.go): only what the
			// process that moved saw tells there, and the orders random
			// steps make around it include ones the design leaves out.)
			other := (s.Proc + 1 + rng.IntN(2)) % 3
			_ = rng.IntN(2) // (drawn as when the floors were restored too: each seed keeps its history)
			// (The process that moves is open: else another process
			// moves, unseen by the one that takes next.)
			steps = append(steps, Step{Kind: KOpen, Host: s.Host, Proc: s.Proc}, Step{Kind: KBackup, Host: s.Host},
				Step{Kind: KSeqNext, Host: s.Host, Proc: s.Proc, Seq: s.Seq, N: 1 + uint64(rng.IntN(60))})
			if rng.IntN(2) == 0 {
				steps = append(steps, Step{Kind: KOpen, Host: s.Host, Proc: other}, Step{Kind: KSeqOpen, Host: s.Host, Proc: other, Seq: s.Seq})
			}
			steps = append(steps, Step{Kind: KRestoreLive, Host: s.Host, Arg: "leases"},
				Step{Kind: KSeqNext, Host: s.Host, Proc: other, Seq: s.Seq, N: 1})
		}
		if s.Kind == KSeqNext && rng.IntN(40) == 0 {
			// The host's processes killed, a lease file or its floor
			// damaged, and, now and then, the operator removing it.
			for p := range 3 {
				steps = append(steps, Step{Kind: KCrash, Host: s.Host, Proc: p})
			}
			steps = append(steps, Step{Kind: KCorrupt, Host: s.Host, Arg: []string{"lease", "floor"}[rng.IntN(2)]})
			if rng.IntN(2) == 0 {
				steps = append(steps, Step{Kind: KRepair, Host: s.Host})
			}
		}
		if s.Kind == KSeqNext && rng.IntN(40) == 0 {
			steps = append(steps, Step{Kind: KBadInput, Host: s.Host, Proc: s.Proc, Seq: s.Seq,
				Arg: []string{"seq-block-0", "seq-name", "seq-next-0"}[rng.IntN(3)]})
		}
	}
	h.Steps = steps
}
