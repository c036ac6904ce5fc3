package sim

import (
	"fmt"
	"math/rand/v2"
)

// addFreezes arms, in about four histories of five, one to three faults
// inside an operation (KFreeze, freeze.go): each just before an operation
// of its host, at one of its first few I/O or registry calls (or those
// of a sequence lease refill), which then kills the process making it or
// cuts the host's power.
func addFreezes(h *History) {
	rng := rand.New(rand.NewPCG(h.Seed, 0xf5ee2e))
	if rng.IntN(5) >= 4 {
		return
	}
	for range 1 + rng.IntN(3) {
		var at []int
		for i, s := range h.Steps {
			switch s.Kind {
			case KNext, KSeqNext, KOpen, KClose, KRelease, KReclaim, KTakeover, KConcurrent, KStorm, KSeqOpen, KCloseOpen, KForm:
				at = append(at, i)
			}
		}
		if len(at) == 0 {
			return
		}
		i := at[rng.IntN(len(at))]
		s := Step{Kind: KFreeze, Host: h.Steps[i].Host, N: uint64(rng.IntN(6)), Applied: rng.IntN(2) == 0, Keep: rng.IntN(2) == 0}
		if h.Steps[i].Kind == KSeqNext && rng.IntN(2) == 0 {
			s.Arg, s.N = "lease", uint64(rng.IntN(2))
		}
		h.Steps = append(h.Steps[:i], append([]Step{s}, h.Steps[i:]...)...)
	}
}

// freezeString is how a KFreeze step reads.
func freezeString(s Step) string {
	what := "cuts the power (forget-all)"
	switch {
	case s.Applied:
		what = "kills the process making it"
	case s.Keep:
		what = "cuts the power (keep-some)"
	}
	calls := "I/O or registry call"
	if s.Arg == "lease" {
		calls = "call of a sequence lease refill"
	}
	return fmt.Sprintf(" after %d: the next %s %s", s.N, calls, what)
}
