package sim

import "math/rand/v2"

// argLoseSeqs is the KCut step's argument for a data centre whose replicas
// lose its partition of every sequence (see simcql's LoseSequences).
const argLoseSeqs = "lose-seqs"

// addReplicaLoss gives, from a generator of its own, a quarter of the
// histories run against the Cassandra adapter with sequences one or two
// steps at which a data centre's replicas lose its sequence partitions
// (ranges and hosts' leases): a lost table, or a node come back from an
// older copy of itself. Its hosts go on leasing; nothing may be issued
// twice. It runs last, so that every other case of a seed stays as it
// was.
func addReplicaLoss(h *History) {
	rng := rand.New(rand.NewPCG(h.Seed, 0x1055))
	if !h.Cassandra || len(h.Sequences) == 0 || rng.IntN(4) != 0 {
		return
	}
	dcs := 1
	for _, c := range h.Hosts {
		dcs = max(dcs, c.DC+1)
	}
	for range 1 + rng.IntN(2) {
		at := len(h.Steps)/4 + rng.IntN(len(h.Steps)-len(h.Steps)/4+1)
		insertSteps(h, at, Step{Kind: KCut, DC: rng.IntN(dcs), Arg: argLoseSeqs})
	}
}

// loseSeqs is the KCut step whose replicas lose data centre s.DC's
// sequence partitions.
func (w *world) loseSeqs(s Step) {
	if w.reg0.loseSequences(s.DC) {
		w.faulted()
		w.reached["replica-loss"]++
	}
}
