package sim

import (
	"fmt"

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
