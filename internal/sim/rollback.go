package sim

import (
	"math/rand/v2"

	"github.com/snapid/snapid/internal/engine"
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
	if h.Hosts[host].Form == engine.FormatDecimal {
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
	insertSteps(h, rng.IntN(len(h.Steps)+1), steps...)
}

// addRollbackBelowFloor gives a history with a standalone host in the
// name or striped form a counter put back in place from a copy more than
// a step behind, below the host's record's floor, while a process that
// never saw the later value runs: p1 takes over two steps of numbers after the
// copy and closes, the counter is put back, and p0, which took one number
// before the copy, takes the next: the record's floor, not what p0 saw,
// raises it (hoststate.Hold.Check). Then p1 opens again and takes one. One
// history in four (rng from the history's seed).
func addRollbackBelowFloor(h *History) {
	rng := rand.New(rand.NewPCG(h.Seed, 0xf100))
	if rng.IntN(4) != 0 {
		return
	}
	host := -1
	for i, c := range h.Hosts {
		if !c.Registry && c.Form != engine.FormatDecimal {
			host = i
			break
		}
	}
	if host < 0 {
		return
	}
	steps := []Step{
		{Kind: KClose, Host: host, Proc: 1}, {Kind: KClose, Host: host, Proc: 2},
		{Kind: KOpen, Host: host, Proc: 0}, {Kind: KOpen, Host: host, Proc: 1},
		{Kind: KNext, Host: host, Proc: 0, N: 1},
		{Kind: KBackup, Host: host},
		{Kind: KNext, Host: host, Proc: 1, N: 2100 + uint64(rng.IntN(1000))},
		{Kind: KClose, Host: host, Proc: 1},
		{Kind: KRestoreLive, Host: host},
		{Kind: KNext, Host: host, Proc: 0, N: 1},
		{Kind: KOpen, Host: host, Proc: 1}, {Kind: KNext, Host: host, Proc: 1, N: 1},
	}
	insertSteps(h, rng.IntN(len(h.Steps)+1), steps...)
}

// addRepairWhileRunning gives one history in four with a standalone host
// in strict mode (half of them with sync off) an operator's Repair while
// p0 runs, to the next number above every one issued: p0 takes a few
// numbers past it and the power is cut. The next Open must raise the
// counter above what p0 took after the Repair, which only the host's
// record, written again by p0 before it went past the Repair's mark,
// can tell with sync off (rng from the history's seed).
func addRepairWhileRunning(h *History) {
	rng := rand.New(rand.NewPCG(h.Seed, 0x2e9a))
	if rng.IntN(4) != 0 {
		return
	}
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
	if rng.IntN(2) == 0 {
		h.Hosts[host].Sync = false
	}
	steps := []Step{
		{Kind: KOpen, Host: host, Proc: 0}, {Kind: KNext, Host: host, Proc: 0, N: 1 + uint64(rng.IntN(50))},
		{Kind: KRepair, Host: host},
		{Kind: KNext, Host: host, Proc: 0, N: 5},
		{Kind: KPowerCut, Host: host},
		{Kind: KOpen, Host: host, Proc: 0}, {Kind: KNext, Host: host, Proc: 0, N: 5},
	}
	insertSteps(h, rng.IntN(len(h.Steps)+1), steps...)
}
