package sim

import (
	"math/rand/v2"
	"time"
)

// addClockCases adds, from a generator of its own, what makes the
// heartbeat's paths run (hostclock.go, heartbeat.go): in half the
// histories time passing past the heartbeat interval and its hand-over
// and stale thresholds; in a quarter a registered host's heartbeat holder
// cut off from the registry while its other processes reach it, then the
// holder closing (the role moves); in a quarter a name taken over by
// another host while three processes of its host run, time passing (the
// one that refreshes learns it, the others from the record), then a
// process of the host opening during an outage (a join the record
// refuses); in half a host's clock stepped alone (skew); in a sixth a
// host cloned and started after the clone window while the original's
// machine is suspended, then a process of the original joining (the
// registry shows another session); in a sixth a host suspended past an
// interval, its name taken over, and a process joining (the record is
// stale: the registry must be read); in a quarter a host's process
// through an outage of five minutes, then time passing (the holder's
// back-off after four failures must not keep it from refreshing soon
// after the outage ends).
func addClockCases(h *History) {
	rng := rand.New(rand.NewPCG(h.Seed, 0xc10c))
	insert := func(steps ...Step) {
		at := rng.IntN(len(h.Steps) + 1)
		insertSteps(h, at, steps...)
	}
	var regs []int
	for i, c := range h.Hosts {
		if c.Registry {
			regs = append(regs, i)
		}
	}
	if rng.IntN(2) == 0 {
		insert(Step{Kind: KClock, D: 5 * time.Minute})
	}
	if rng.IntN(2) == 0 {
		for range 1 + rng.IntN(2) {
			d := []time.Duration{4 * time.Minute, -4 * time.Minute, 90 * time.Second, -30 * time.Second, time.Hour, -time.Hour}[rng.IntN(6)]
			insert(Step{Kind: KClock, Host: rng.IntN(len(h.Hosts)), D: d, Arg: "skew"})
		}
	}
	if len(regs) == 0 {
		return
	}
	pick := func() int { return regs[rng.IntN(len(regs))] }
	if rng.IntN(4) == 0 {
		// A burst far above the step (50): the next extensions size the
		// step by the rate, at most 16-fold from one to the next.
		ho := pick()
		insert(Step{Kind: KOpen, Host: ho, Proc: 0}, Step{Kind: KNext, Host: ho, Proc: 0, N: 5000},
			Step{Kind: KNext, Host: ho, Proc: 0, N: 1}, Step{Kind: KNext, Host: ho, Proc: 0, N: 100},
			Step{Kind: KNext, Host: ho, Proc: 0, N: 100})
	}
	if rng.IntN(4) == 0 {
		ho := pick()
		insert(Step{Kind: KOpen, Host: ho, Proc: 0}, Step{Kind: KOpen, Host: ho, Proc: 1},
			Step{Kind: KRegDown, Host: ho, Arg: "holder", Keep: true},
			Step{Kind: KClock, Host: ho, D: 2 * time.Minute}, Step{Kind: KClock, Host: ho, D: time.Minute},
			Step{Kind: KRegDown, Host: ho, Arg: "holder"},
			Step{Kind: KClose, Host: ho, Proc: 0}, Step{Kind: KClock, Host: ho, D: time.Minute})
	}
	if rng.IntN(4) == 0 {
		ho := pick()
		// In half of them an operator removes the host's heartbeat file
		// as soon as its record says "taken", before the other
		// processes poll it.
		rmHB := ""
		if h.Seed%2 == 0 {
			rmHB = "rm-heartbeat"
		}
		insert(Step{Kind: KOpen, Host: ho, Proc: 0}, Step{Kind: KOpen, Host: ho, Proc: 1}, Step{Kind: KOpen, Host: ho, Proc: 2},
			Step{Kind: KTakeover, Host: ho, DC: h.Hosts[ho].DC}, Step{Kind: KClock, Host: ho, D: 90 * time.Second, Arg: rmHB},
			Step{Kind: KNext, Host: ho, Proc: 1, N: 1},
			Step{Kind: KClose, Host: ho, Proc: 2}, Step{Kind: KRegDown, Host: ho, Keep: true},
			Step{Kind: KOpen, Host: ho, Proc: 2}, Step{Kind: KNext, Host: ho, Proc: 2, N: 1},
			Step{Kind: KRegDown, Host: ho})
	}
	if rng.IntN(6) == 0 {
		ho := pick()
		insert(Step{Kind: KOpen, Host: ho, Proc: 0}, Step{Kind: KOpen, Host: ho, Proc: 2},
			Step{Kind: KClone, Host: ho, Keep: true, DC: h.Hosts[ho].DC},
			Step{Kind: KOpen, Host: ho, Proc: 1}, Step{Kind: KNext, Host: ho, Proc: 1, N: 1},
			Step{Kind: KClock, Host: ho, D: time.Minute})
	}
	if rng.IntN(6) == 0 {
		ho := pick()
		insert(Step{Kind: KOpen, Host: ho, Proc: 0}, Step{Kind: KClock, Host: ho, D: 10 * time.Minute},
			Step{Kind: KTakeover, Host: ho, DC: h.Hosts[ho].DC},
			Step{Kind: KOpen, Host: ho, Proc: 1}, Step{Kind: KNext, Host: ho, Proc: 1, N: 1})
	}
	if rng.IntN(4) == 0 {
		ho := pick()
		// (Each step of time within runFor: the host runs through all
		// of it, its holder's tries and back-off included.)
		insert(Step{Kind: KOpen, Host: ho, Proc: 0}, Step{Kind: KRegDown, Host: ho, Keep: true},
			Step{Kind: KClock, Host: ho, D: 2 * time.Minute}, Step{Kind: KClock, Host: ho, D: 2 * time.Minute},
			Step{Kind: KClock, Host: ho, D: time.Minute}, Step{Kind: KRegDown, Host: ho},
			Step{Kind: KClock, Host: ho, D: 2 * time.Minute}, Step{Kind: KClock, Host: ho, D: 2 * time.Minute})
	}
}
