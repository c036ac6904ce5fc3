package sim

import (
	"fmt"

	"math/rand/v2"
	"strings"
	"syscall"
	"time"

	"github.com/snapid/snapid/internal/engine"
)

// A History is what one seed makes: the hosts at the start and the
// steps, operations and faults, run one at a time. It is made whole
// before it runs, so that a shorter history (a shrunk one) runs the same
// steps without drawing anything again.
type History struct {
	Seed      uint64
	Hosts     []HostConfig
	Sequences []SeqConfig
	Steps     []Step
	// Cassandra: the registry is the real Cassandra adapter on the
	// simulated CQL cluster (cassandra.go), whose requests meet a random
	// fault at the rate CQLFaults; otherwise the in-memory registry.
	Cassandra bool
	CQLFaults float64
}

// SeqConfig is an integer sequence made before the history starts, and
// how its processes take numbers from it.
type SeqConfig struct {
	Name       string
	Start, Max uint64
	Block      uint64 // SequenceBlock
	Lease      uint64 // SequenceLeaseSize
}

func (c SeqConfig) String() string {
	return fmt.Sprintf("%s: [%d, %d], block %d, lease %d", c.Name, c.Start, c.Max, c.Block, c.Lease)
}

// HostConfig is one simulated host at the start of a history.
type HostConfig struct {
	Name     string // node name
	Registry bool   // claims its name in the registry
	Sync     bool
	Block    uint64 // 0: strict mode
	Shards   bool   // CPU shards (block mode only)
	Procs    int    // processes (Generators on the host's counter)
	DC       int    // data centre (0 or 1) its registry calls come from
	Form     engine.Format
	MaxID    uint64 // WithMaxID (0: the form's default bound)
}

// in returns c in data centre dc.
func (c HostConfig) in(dc int) HostConfig {
	c.DC = dc
	return c
}

func (c HostConfig) String() string {
	mode := "strict"
	if c.Block > 0 {
		mode = fmt.Sprintf("block %d", c.Block)
		if c.Shards {
			mode += "+cpushards"
		}
	}
	reg := "standalone"
	if c.Registry {
		reg = "registry"
	}
	sync := "sync on"
	if !c.Sync {
		sync = "sync off"
	}
	if c.Registry {
		reg += " in " + dcName(c.DC)
	}
	if c.Form != engine.FormatName {
		mode += ", " + c.Form.String() + " ids"
	}
	if c.MaxID != 0 {
		mode += fmt.Sprintf(" up to %d", c.MaxID)
	}
	return fmt.Sprintf("%s: %s, %s, %s, %d processes", c.Name, reg, mode, sync, c.Procs)
}

// Kind is what a step does.
type Kind int

const (
	KOpen        Kind = iota // process opens its Generator (OpenContext)
	KNext                    // NextNContext(N) (N 1: UniqueIDContext); Cancelled: with a context already ended (Keep: one that ends while the call waits for the counter's lock, which an outsider holds); Arg "any-open": by the first open process if Proc is not open
	KClose                   // Close
	KCrash                   // the process is killed
	KPowerCut                // every process of the host is killed, then the power is cut (Keep: keep-some)
	KRelease                 // every process of the host closes, then Release
	KForce                   // ForceRelease of the host's name by an operator (Next: the floor it is given)
	KTakeover                // a new host takes the host's name over (WithTakeover(N))
	KReclaim                 // the host reopens its released name (WithReclaim)
	KBackup                  // the host's files are copied aside
	KRestore                 // every process of the host is killed; its files are put back from the copy
	KClone                   // a new host with a copy of the host's files (same owner token) on another machine
	KCorrupt                 // a byte of the counter is changed while no process runs (Arg: which file)
	KClock                   // time passes by D (negative: every clock steps back); Arg "skew": host Host's clock alone steps by D; Arg "rm-heartbeat": host Host's heartbeat file removed when its record first says taken
	KRegFault                // the N-th next registry change (Arg: of which kind) fails, applied or not
	KRegDown                 // the registry is down (Keep: true) or up; Arg "holder": for host Host's heartbeat holder alone (up: for all its processes)
	KDiskFault               // the N-th next file operation (Arg: of which kind) on the host fails with Errno
	KBadInput                // a call with bad input (Arg: which); nothing may change
	KSeqNext                 // the process takes N numbers of sequence Seq (N 1: Next, else NextN)
	KSeqCreate               // sequence Seq is created again with start Start and max Max (0: kept)
	KRestoreLive             // the counter (Arg "leases": the sequence lease files) is put back in place from the copy while processes run
	KConcurrent              // every open process of the host calls N times at once from two goroutines each (and its Sequences); Keep: a process closes meanwhile
	KStorm                   // every process of the host not running starts at once (and, with Keep, a take-over of its name by a new host at the same moment)
	KInit                    // an operator runs Init on the stopped host's counter with next number N (it never lowers the counter)
	KMove                    // an operator moves the stopped host's counter directory elsewhere on the host (and syncs); its programs then use the new path
	KCut                     // data centre DC is cut off from the cluster's quorum (Keep: true) or healed
	KRepair                  // an operator rewrites the counter with Repair above every number issued (Arg "next-0": with next 0, refused); or removes a damaged lease file or floor
	KSeqOpen                 // the process opens its Sequence Seq without taking a number
	KSecond                  // a second counter file on the host opened under the host's name (refused while the first exists)
	KRename                  // the counter replaced by a copy renamed over it while processes run (they must stop using the old file)
	KForm                    // every process of the host closes, and p0 opens with another stride (striped) or node number (decimal); Arg "live": only p0 closes, and opens with the other stride while the others run on (striped, standalone)
	KCloseOpen               // process Proc closes while the next process of the host opens, at the same moment; then the new one takes N numbers; Arg "held": the closing one held at its close's read of the name's row (hold.go)
	KJoin                    // a standalone host stops, and its processes claim its name in the registry from then on
	KCLI                     // an operator runs the snapctl command Arg in-process (cli.go; N: release --force's start, register --force's floor, setup's stride)
	KFreeze                  // the N-th next I/O or registry call on the host (Arg "lease": of a sequence lease refill) kills the process making it (Applied) or cuts the host's power (Keep: keep-some); see freeze.go
)

var kindNames = [...]string{"open", "next", "close", "crash", "power-cut", "release", "force-release", "takeover",
	"reclaim", "backup", "restore", "clone", "corrupt", "clock", "registry-fault", "registry-down", "disk-fault", "bad-input",
	"seq-next", "seq-create", "restore-live", "concurrent", "storm", "init", "move", "dc-cut", "repair", "seq-open",
	"second-counter", "counter-renamed", "form-change", "close-racing-open", "join-registry", "snapctl", "freeze"}

func (k Kind) String() string { return kindNames[k] }

// Step is one operation or fault.
type Step struct {
	Kind      Kind
	Host      int
	Proc      int
	N         uint64
	D         time.Duration
	Arg       string
	Keep      bool
	Applied   bool
	Cancelled bool
	Errno     syscall.Errno
	Seq       int
	Start     uint64
	Max       uint64
	DC        int // KCut: the data centre; KTakeover, KClone, KStorm: the new host's
}

func (s Step) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s h%d", s.Kind, s.Host)
	if detail := stepDetails[s.Kind]; detail != nil {
		detail(s, &b)
	}
	return b.String()
}

// stepDetails writes, for each kind of step that has any, what the step's
// kind and host leave out.
var stepDetails = map[Kind]func(Step, *strings.Builder){
	KOpen:        Step.procDetail,
	KClose:       Step.procDetail,
	KCrash:       Step.procDetail,
	KForm:        Step.formDetail,
	KNext:        Step.nextDetail,
	KPowerCut:    Step.powerCutDetail,
	KForce:       Step.forceDetail,
	KTakeover:    Step.takeoverDetail,
	KCut:         Step.cutDetail,
	KCorrupt:     Step.argDetail,
	KBadInput:    Step.argDetail,
	KRepair:      Step.argDetail,
	KRestoreLive: Step.argDetail,
	KClone:       Step.cloneDetail,
	KClock:       Step.clockDetail,
	KRegFault:    Step.regFaultDetail,
	KRegDown:     Step.regDownDetail,
	KDiskFault:   Step.diskFaultDetail,
	KFreeze:      Step.freezeDetail,
	KSeqNext:     Step.seqNextDetail,
	KSeqCreate:   Step.seqCreateDetail,
	KSeqOpen:     Step.seqOpenDetail,
	KInit:        Step.initDetail,
	KStorm:       Step.stormDetail,
	KCloseOpen:   Step.closeOpenDetail,
	KCLI:         Step.cliDetail,
	KConcurrent:  Step.concurrentDetail,
}

// procDetail writes the step's process.
func (s Step) procDetail(b *strings.Builder) {
	fmt.Fprintf(b, "/p%d", s.Proc)
}

// formDetail writes a form change's variant, if it has one.
func (s Step) formDetail(b *strings.Builder) {
	if s.Arg != "" {
		fmt.Fprintf(b, " (%s)", s.Arg)
	}
}

// nextDetail writes the process and count of a call taking ids, and how
// its context ends.
func (s Step) nextDetail(b *strings.Builder) {
	fmt.Fprintf(b, "/p%d n=%d", s.Proc, s.N)
	switch {
	case s.Cancelled && s.Keep:
		b.WriteString(" (context ends while it waits for the counter's lock)")
	case s.Cancelled:
		b.WriteString(" (context ended)")
	}
	if s.Arg == "any-open" {
		b.WriteString(" (or the first open process)")
	}
}

// powerCutDetail writes what a power cut keeps.
func (s Step) powerCutDetail(b *strings.Builder) {
	if s.Keep {
		b.WriteString(" keep-some")
	} else {
		b.WriteString(" forget-all")
	}
}

// forceDetail writes the floor a ForceRelease is given.
func (s Step) forceDetail(b *strings.Builder) {
	fmt.Fprintf(b, " floor=%d", s.N)
}

// takeoverDetail writes a take-over's floor and the new host's data
// centre.
func (s Step) takeoverDetail(b *strings.Builder) {
	fmt.Fprintf(b, " floor=%d from %s", s.N, dcName(s.DC))
}

// cutDetail writes which data centre is cut off or healed.
func (s Step) cutDetail(b *strings.Builder) {
	fmt.Fprintf(b, " %s cut=%v", dcName(s.DC), s.Keep)
	if s.Arg != "" {
		fmt.Fprintf(b, " (%s)", s.Arg)
	}
}

// argDetail writes the step's argument: which file, input or repair.
func (s Step) argDetail(b *strings.Builder) {
	fmt.Fprintf(b, " %s", s.Arg)
}

// cloneDetail writes when a clone starts and the data centre it is in.
func (s Step) cloneDetail(b *strings.Builder) {
	if s.Keep {
		b.WriteString(" (started after the clone window)")
	}
	fmt.Fprintf(b, " in %s", dcName(s.DC))
}

// clockDetail writes how far the clocks move, and which.
func (s Step) clockDetail(b *strings.Builder) {
	fmt.Fprintf(b, " %+v", s.D)
	if s.Arg == "skew" {
		b.WriteString(" (this host's clock alone)")
	}
	if s.Arg == "rm-heartbeat" {
		b.WriteString(" (this host's heartbeat file removed when its record says taken)")
	}
}

// regFaultDetail writes which registry change fails, and how.
func (s Step) regFaultDetail(b *strings.Builder) {
	fmt.Fprintf(b, " %s after %d, applied=%v", orAny(s.Arg), s.N, s.Applied)
}

// regDownDetail writes whether the registry goes down or up, and for
// whom.
func (s Step) regDownDetail(b *strings.Builder) {
	fmt.Fprintf(b, " down=%v", s.Keep)
	if s.Arg == "holder" {
		b.WriteString(" (for the host's heartbeat holder alone; up: for all its processes)")
	}
}

// diskFaultDetail writes which file operation fails, and with what.
func (s Step) diskFaultDetail(b *strings.Builder) {
	fmt.Fprintf(b, " %s after %d: %v", orAny(s.Arg), s.N, s.Errno)
}

// freezeDetail writes which call a freeze stops at, and what it does.
func (s Step) freezeDetail(b *strings.Builder) {
	b.WriteString(freezeString(s))
}

// seqNextDetail writes the process, sequence and count of a call taking
// sequence numbers, which call it is and whether its context ended.
func (s Step) seqNextDetail(b *strings.Builder) {
	fmt.Fprintf(b, "/p%d s%d n=%d", s.Proc, s.Seq, s.N)
	if s.Arg == "nextn" {
		b.WriteString(" (NextN)")
	}
	if s.Cancelled {
		b.WriteString(" (context ended)")
	}
}

// seqCreateDetail writes the sequence created again and its bounds.
func (s Step) seqCreateDetail(b *strings.Builder) {
	fmt.Fprintf(b, " s%d start=%d max=%d", s.Seq, s.Start, s.Max)
}

// seqOpenDetail writes the process and the sequence it opens.
func (s Step) seqOpenDetail(b *strings.Builder) {
	fmt.Fprintf(b, "/p%d s%d", s.Proc, s.Seq)
}

// initDetail writes the next number Init is given.
func (s Step) initDetail(b *strings.Builder) {
	fmt.Fprintf(b, " next=%d", s.N)
}

// stormDetail writes the take-over racing a start-up storm, if any.
func (s Step) stormDetail(b *strings.Builder) {
	if s.Keep {
		fmt.Fprintf(b, " (with a take-over by a new host in %s)", dcName(s.DC))
	}
}

// closeOpenDetail writes which process closes while which opens, what
// the new one takes, and whether the close is held.
func (s Step) closeOpenDetail(b *strings.Builder) {
	fmt.Fprintf(b, " p%d closes while p%d opens, n=%d", s.Proc, (s.Proc+1)%3, s.N)
	if s.Arg == "held" {
		b.WriteString(", held at its close's read of the name's row")
	}
}

// cliDetail writes the snapctl command and its number.
func (s Step) cliDetail(b *strings.Builder) {
	fmt.Fprintf(b, " %s (n=%d)", s.Arg, s.N)
}

// concurrentDetail writes how many calls each caller of a burst makes,
// and whether a process closes meanwhile.
func (s Step) concurrentDetail(b *strings.Builder) {
	fmt.Fprintf(b, " n=%d", s.N)
	if s.Keep {
		b.WriteString(" (p0 closes meanwhile)")
	}
}

func orAny(s string) string {
	if s == "" {
		return "any"
	}
	return s
}

func (h History) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d\n", h.Seed)
	if h.Cassandra {
		fmt.Fprintf(&b, "  registry: the Cassandra adapter on the simulated CQL cluster, fault rate %v\n", h.CQLFaults)
	}
	for i, c := range h.Hosts {
		fmt.Fprintf(&b, "  host h%d %s\n", i, c)
	}
	for i, c := range h.Sequences {
		fmt.Fprintf(&b, "  sequence s%d %s\n", i, c)
	}
	for i, s := range h.Steps {
		fmt.Fprintf(&b, "  %3d %s\n", i, s)
	}
	return b.String()
}

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
	addFreezes(&h)
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

// Serial returns h without its concurrent steps (bursts of calls from
// several goroutines, start-up storms), whose interleaving the scheduler
// decides: what is left runs one operation at a time, and a seed replays
// exactly the same history every time.
func Serial(h History) History {
	out := h
	out.Steps = nil
	for _, s := range h.Steps {
		if s.Kind != KConcurrent && s.Kind != KStorm && s.Kind != KCloseOpen {
			out.Steps = append(out.Steps, s)
		}
	}
	return out
}

// concurrent reports whether h has steps whose interleaving the scheduler
// decides.
func (h History) concurrent() bool { return len(Serial(h).Steps) != len(h.Steps) }
