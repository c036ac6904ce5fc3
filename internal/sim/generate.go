package sim

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"
)

// How a seed becomes a history: its hosts, sequences and steps, drawn
// from the seed's random source in a fixed order (the kinds of step are
// in history.go, the rarer cases in generate_cases.go).

// Generate makes the history of seed with about steps steps.
func Generate(seed uint64, steps int) History {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	h := History{Seed: seed}
	nh := 1 + rng.IntN(3)
	h.Hosts = genHosts(rng, nh)
	h.Sequences = genSequences(rng)
	// g.hosts: hosts that exist at this point of the history (clones and
	// take-overs add some)
	g := &stepGen{rng: rng, hosts: nh, seqs: h.Sequences}
	for range steps {
		h.Steps = append(h.Steps, g.step())
	}
	addDataCentres(&h)
	addForms(&h)
	addCases(&h)
	addClockCases(&h)
	addCassandra(&h)
	addCLI(&h)
	addRollback(&h)
	addRollbackBelowFloor(&h)
	addRepairWhileRunning(&h)
	addFreezes(&h)
	addReplicaLoss(&h)
	return h
}

// genHosts draws the nh hosts a history starts with.
func genHosts(rng *rand.Rand, nh int) []HostConfig {
	var hosts []HostConfig
	for i := range nh {
		c := HostConfig{
			Name:     fmt.Sprintf("n%d", i),
			Registry: rng.IntN(4) != 0,
			Sync:     rng.IntN(4) != 0,
			Procs:    1 + rng.IntN(3),
		}
		switch rng.IntN(3) {
		case 1:
			c.Block = 1 + uint64(rng.IntN(64))
		case 2:
			c.Block = 1 + uint64(rng.IntN(64))
			c.Shards = true
		}
		if !c.Registry {
			c.Name = fmt.Sprintf("solo%d", i)
		}
		hosts = append(hosts, c)
	}
	return hosts
}

// genSequences draws the one or two sequences a history starts with.
func genSequences(rng *rand.Rand) []SeqConfig {
	// Sequences at the edges: a small one used up within a history, one
	// ending at 2^31-1 and one at 2^63-1 (the largest a registry keeps).
	bounds := [][2]uint64{{1, 1 << 40}, {1, 300}, {1<<31 - 200, 1<<31 - 1}, {1<<63 - 300, 1<<63 - 1}, {5, 5}}
	var seqs []SeqConfig
	for i := range 1 + rng.IntN(2) {
		b := bounds[rng.IntN(len(bounds))]
		seqs = append(seqs, SeqConfig{
			Name: fmt.Sprintf("seq%d", i), Start: b[0], Max: b[1],
			Block: 1 + uint64(rng.IntN(8)), Lease: 1 + uint64(rng.IntN(64)),
		})
	}
	return seqs
}

// stepGen draws the random steps of a history, one after another, from
// the history's generator.
type stepGen struct {
	rng   *rand.Rand
	hosts int         // hosts that exist at this point of the history
	seqs  []SeqConfig // the history's sequences
}

// step draws the next step: a sequence's, one of the rare steps, or one
// of the common ones (commonSteps).
func (g *stepGen) step() Step {
	rng := g.rng
	s := Step{Host: rng.IntN(g.hosts)}
	s.Proc = rng.IntN(3)
	if rng.IntN(100) < 15 {
		g.seqStep(&s)
		return s
	}
	if rng.IntN(200) < 1 {
		s.Kind = KMove
		return s
	}
	if rng.IntN(100) < 1 {
		s.Kind = KInit
		s.N = []uint64{1, 2, 50, 1000, 1 << 40}[rng.IntN(5)]
		return s
	}
	if rng.IntN(100) < 2 {
		g.storm(&s)
		return s
	}
	if rng.IntN(100) < 4 {
		s.Kind = KConcurrent
		s.N = 1 + uint64(rng.IntN(20))
		s.Keep = rng.IntN(3) == 0
		return s
	}
	r := rng.IntN(100)
	for _, c := range commonSteps {
		if r < c.below {
			c.fill(g, &s)
			break
		}
	}
	return s
}

// seqStep makes s a step of one of the sequences: mostly taking numbers,
// sometimes creating the sequence again.
func (g *stepGen) seqStep(s *Step) {
	rng := g.rng
	s.Seq = rng.IntN(len(g.seqs))
	if rng.IntN(20) != 0 {
		s.Kind = KSeqNext
		s.N = 1
		if rng.IntN(3) == 0 {
			s.N = 1 + uint64(rng.IntN(40))
		}
		s.Cancelled = rng.IntN(40) == 0
		return
	}
	s.Kind = KSeqCreate
	c := g.seqs[s.Seq]
	switch rng.IntN(3) {
	case 0:
		s.Start = c.Start + 1 + uint64(rng.IntN(100)) // a raised start
	case 1:
		s.Start, s.Max = c.Start, c.Start+uint64(rng.IntN(50)) // a lowered max
	default:
		s.Start = c.Start // kept
	}
}

// storm makes s a start-up storm, in a third of them (while there are
// fewer than eight hosts) with a take-over by a new host.
func (g *stepGen) storm(s *Step) {
	s.Kind = KStorm
	s.Keep = g.hosts < 8 && g.rng.IntN(3) == 0
	if s.Keep {
		g.hosts++
	}
}

// commonSteps are the common steps, drawn by a number r from 0 to 99:
// each entry is picked for r below its bound and at or above the bound
// of the entry before.
var commonSteps = []struct {
	below int
	fill  func(*stepGen, *Step)
}{
	{12, kindStep(KOpen)},
	{58, (*stepGen).next},
	{63, kindStep(KClose)},
	{68, kindStep(KCrash)},
	{71, (*stepGen).powerCut},
	{73, kindStep(KRelease)},
	{74, (*stepGen).force},
	{75, (*stepGen).takeover},
	{76, kindStep(KReclaim)},
	{78, kindStep(KBackup)},
	{79, kindStep(KRestore)},
	{80, kindStep(KRestoreLive)},
	{83, (*stepGen).clone},
	{84, (*stepGen).corrupt},
	{87, (*stepGen).clock},
	{91, (*stepGen).regFault},
	{93, (*stepGen).regDown},
	{97, (*stepGen).diskFault},
	{100, (*stepGen).badInput},
}

// kindStep returns a filler that makes a step of kind k, drawing
// nothing more.
func kindStep(k Kind) func(*stepGen, *Step) {
	return func(_ *stepGen, s *Step) { s.Kind = k }
}

// next makes s a call taking ids: mostly one, sometimes up to 200, one
// in forty with a context already ended (half of those ending while the
// call waits for the counter's lock).
func (g *stepGen) next(s *Step) {
	rng := g.rng
	s.Kind = KNext
	s.N = 1
	if rng.IntN(4) == 0 {
		s.N = 1 + uint64(rng.IntN(200))
	}
	s.Cancelled = rng.IntN(40) == 0
	s.Keep = s.Cancelled && rng.IntN(2) == 0
}

// powerCut makes s a power cut, forgetting every unsynced write or
// keeping some.
func (g *stepGen) powerCut(s *Step) {
	s.Kind = KPowerCut
	s.Keep = g.rng.IntN(2) == 0
}

// force makes s a ForceRelease with one of a few floors.
func (g *stepGen) force(s *Step) {
	s.Kind = KForce
	s.N = []uint64{0, 1000, 2000, 1<<64 - 200}[g.rng.IntN(4)]
}

// takeover makes s a take-over by a new host with one of a few floors,
// or, once there are eight hosts, a minute passing.
func (g *stepGen) takeover(s *Step) {
	if g.hosts >= 8 {
		s.Kind = KClock
		s.D = time.Minute
		return
	}
	s.Kind = KTakeover
	s.N = []uint64{0, 500, 1000, 1<<64 - 300}[g.rng.IntN(4)]
	g.hosts++
}

// clone makes s a clone onto a new machine, started within the clone
// window or after it, or, once there are eight hosts, a minute passing.
func (g *stepGen) clone(s *Step) {
	if g.hosts >= 8 {
		s.Kind = KClock
		s.D = time.Minute
		return
	}
	s.Kind = KClone
	s.Keep = g.rng.IntN(2) == 0
	g.hosts++
}

// corrupt makes s a corrupted file, of one of four kinds.
func (g *stepGen) corrupt(s *Step) {
	s.Kind = KCorrupt
	s.Arg = []string{"counter", "mark", "session", "owner"}[g.rng.IntN(4)]
}

// clock makes s time passing, forward or back, by one of a few
// durations.
func (g *stepGen) clock(s *Step) {
	s.Kind = KClock
	s.D = []time.Duration{time.Second, time.Minute, 10 * time.Minute, 3 * time.Hour, -time.Minute, -time.Hour}[g.rng.IntN(6)]
}

// regFault makes s a registry fault: which change, after how many, and
// whether the change is applied.
func (g *stepGen) regFault(s *Step) {
	rng := g.rng
	s.Kind = KRegFault
	s.Arg = []string{"", "claim", "extend", "touch", "release", "lease", "closelease", "adopt"}[rng.IntN(8)]
	s.N = uint64(rng.IntN(3))
	s.Applied = rng.IntN(2) == 0
}

// regDown makes s the registry going down or coming up.
func (g *stepGen) regDown(s *Step) {
	s.Kind = KRegDown
	s.Keep = g.rng.IntN(2) == 0
}

// diskFault makes s a disk fault: which file operation, after how many,
// and with which errno.
func (g *stepGen) diskFault(s *Step) {
	rng := g.rng
	errnos := []syscall.Errno{syscall.EIO, syscall.ENOSPC}
	s.Kind = KDiskFault
	s.Arg = []string{"", "write", "sync", "syncdir", "link", "rename"}[rng.IntN(6)]
	s.N = uint64(rng.IntN(4))
	s.Errno = errnos[rng.IntN(len(errnos))]
}

// badInput makes s a call with bad input, of one of six kinds.
func (g *stepGen) badInput(s *Step) {
	s.Kind = KBadInput
	s.Arg = []string{"name", "counter-dir", "takeover-max", "block-0", "next-0", "other-name"}[g.rng.IntN(6)]
}
