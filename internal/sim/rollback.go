package sim

import (
	"math/rand/v2"

	"github.com/snapid/snapid"
)

// addRollback gives, from a generator of its own, every history with a
// standalone strict-mode host a counter put back in place from a
// copy under its one running process (restoreLive's case without a
// registry): the other processes close, p0 opens and takes numbers, the
// files are copied aside, p0 takes more, and the counter is put back
// from the copy while p0 runs; p0 then takes the next number, which the
// raise to the highest value it saw (counterFile.advance) keeps above
// every number it handed out (the strict order check and the duplicate
// check find a raise left out). Random steps alone almost never line
// these up.
func addRollback(h *History) {
	rng := rand.New(rand.NewPCG(h.Seed, 0x70b))
	host := -1
	for i, c := range h.Hosts {
		if !c.Registry && c.Block == 0 {
			host = i
			break
		}
	}
	if host < 0 {
		return
	}
	n := 1 + uint64(rng.IntN(30))
	if h.Hosts[host].Form == snapid.FormatDecimal {
		n = 1 // the decimal form hands out one number at a time
	}
	steps := []Step{
		{Kind: KClose, Host: host, Proc: 1}, {Kind: KClose, Host: host, Proc: 2},
		{Kind: KOpen, Host: host, Proc: 0}, {Kind: KNext, Host: host, Proc: 0, N: 1},
		{Kind: KBackup, Host: host},
		{Kind: KNext, Host: host, Proc: 0, N: n},
		{Kind: KRestoreLive, Host: host},
		{Kind: KNext, Host: host, Proc: 0, N: 1},
	}
	at := rng.IntN(len(h.Steps) + 1)
	h.Steps = append(h.Steps[:at], append(steps, h.Steps[at:]...)...)
}
