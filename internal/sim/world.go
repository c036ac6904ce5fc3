package sim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/snapid/snapid/admin"
	libclock "github.com/snapid/snapid/internal/clock"
	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry/registrytest"
)

// world runs one history against the real library: every host a
// directory of its own with its own disk (seams) and bindings, every
// process a Generator opened on the host's counter, one in-memory
// registry with faults for all, one clock.
type world struct {
	h        History
	dir      string
	reg0     cluster            // the registry: in memory, or the Cassandra adapter on a simulated cluster
	contract *contract          // what the registry reported done, checked against its rows
	regs     [2]*faultyRegistry // each data centre's view, one armed fault for both
	reg      *faultyRegistry    // regs[0], the operators' view
	clock    *clock
	rng      *rand.Rand
	log      *slog.Logger
	hosts    []*host
	check    *checker
	cut      [2]bool        // data centres cut off now
	down     bool           // the registry is down
	reached  map[string]int // events reached (Result.Reached)
	step     int            // index of the step running
	stepNow  atomic.Int64   // step, for the library's background goroutines (heartbeats) to read
	never    chan struct{}  // a channel never closed: the Done of opCtx's contexts that can end
	parallel bool           // a step whose calls run concurrently is running
	ops      int            // operations that did something (see did)
	faults   int            // faults the steps made (a process killed, a power cut, files restored or damaged, a data centre cut, an outage); armed faults count as they fire
}

// did counts n operations that did something: a call that handed out n
// numbers counts n, any other call that succeeded (or, bad input, was
// refused) one.
func (w *world) did(n int) { w.ops += n }

// faulted counts a fault a step made happen.
func (w *world) faulted() { w.faults++ }

type host struct {
	i        int
	cfg      HostConfig
	dir      string
	counter  string
	bindings string
	disk     *disk
	info     engine.HostInfo
	procs    [3]*engine.Generator
	seqs     [3]map[int]*engine.Sequence // each process's open Sequences
	backup   map[string][]byte
	// exempt: something done to this host (its files corrupted, restored
	// or cloned, its name released, forced or taken over) may rightly
	// keep it from issuing again; liveness is not asked of it.
	exempt string
	// damaged: its counter was corrupted and not repaired since; it
	// rightly cannot issue.
	damaged bool
	damage  string // how
	// backupDamage: how the counter was damaged when the files were
	// copied aside ("": it was not).
	backupDamage string
	// seqDamaged: the lease file or floor (its path after the counter's)
	// of a sequence (by index) that was corrupted, until an operator
	// removes it; the host rightly cannot take numbers of that sequence.
	seqDamaged map[int][]string
	// released: its name was released on this host (Release reported
	// done); it issues again only when reclaimed.
	released bool
	// releaseUnsynced: released is known only from the host's record,
	// written by a Release that then failed: the write may not have
	// reached the disk, so a power cut may take it back.
	releaseUnsynced bool
	// raisePending: a replaced counter's raise waits for a power cut
	// that came inside the Open that was refused on it.
	raisePending bool
	takeover     uint64 // WithTakeover floor for its opens, if takeoverSet
	takeSet      bool
	// lastNum is the last number the host handed out (strict mode);
	// dense: nothing since then may rightly leave a gap before the next
	// (a process died, a call failed, the counter was raised or put back).
	lastNum uint64
	dense   bool
	// raiseBack: the processes open when the counter was repaired
	// under them; at its next update each may raise the counter back
	// above what it saw (a gap).
	raiseBack [3]bool
	// issuers: the processes that handed out numbers since the last
	// backup.
	issuers map[*engine.Generator]bool
	// altStride, nodeShift: a form change moved the host to simStride2,
	// or its standalone node number up by nodeShift.
	altStride bool
	// procStride: the stride each process opened with (0: ho.stride()).
	procStride [3]uint64
	// formLeftAt: for each stride a form change left while processes of
	// it ran on, the counter's value then.
	formLeftAt map[uint64]uint64
	// maxStriped is the highest striped id the host handed out;
	// procFloor[p], if not 0, an id process p (opened with a new stride)
	// must hand out only ids above: the highest striped id when its form
	// changed.
	maxStriped uint64
	procFloor  [3]uint64
	// cloneOf: the host this one is a copy of (same owner token, another
	// machine), if it is one.
	cloneOf *host
	// exts: what the simulator records of each open process's
	// registry calls (heartbeat.go).
	exts      [3]*extensions
	nodeShift uint64
	moved     bool // an operator moved its counter directory
	// joinPending: a standalone host joined the registry and none of
	// its processes has claimed the name yet.
	joinPending bool
	opened      bool // an Open of it succeeded
	// clk is the host's clock (hostclock.go), hb what the simulator
	// knows of its heartbeat (heartbeat.go).
	clk *libclock.Fake
	hb  hostHeartbeat
}

// clock is the simulator's true time: the registry's and the registry
// side's of the library (each host's own clock is skewed from it, see
// hostclock.go).
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }
func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

// opCtx is the context of an operation's calls: in every other step, one
// that can end (it has a Done channel) but does not, so that the
// library's paths for callers who may leave (group commit's leader
// waiting apart from its flush) run as often as those for callers who
// cannot.
func (w *world) opCtx() context.Context {
	if (w.h.Seed+uint64(w.step))%2 == 0 {
		return context.Background()
	}
	return liveCtx{context.Background(), w.never}
}

// liveCtx is a context that can end but never does.
type liveCtx struct {
	context.Context
	done chan struct{}
}

func (c liveCtx) Done() <-chan struct{} { return c.done }

func (w *world) hostOf(s Step) (*host, bool) { return w.host(s.Host) }

func (w *world) host(i int) (*host, bool) {
	if i < 0 || i >= len(w.hosts) {
		return nil, false
	}
	return w.hosts[i], true
}

func newWorld(h History, dir string) (*world, error) {
	w := &world{
		h:       h,
		dir:     dir,
		clock:   newClock(),
		rng:     rand.New(rand.NewPCG(h.Seed, 0x5eed)),
		reached: map[string]int{},
		never:   make(chan struct{}),
		log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if h.Cassandra {
		w.reg0 = newCQLCluster(h, w)
	} else {
		mem := registrytest.NewRegistry()
		mem.SetClock(w.clock.now)
		w.reg0 = memCluster{mem}
	}
	fault := &armed[bool]{}
	w.contract = &contract{truth: w.reg0}
	for dc := range w.regs {
		w.regs[dc] = newFaultyRegistry(w.reg0.inDC(dc), dc, fault, w.contract)
	}
	w.reg = w.regs[0]
	w.check = newChecker(w)
	for _, c := range h.Sequences {
		if _, err := admin.CreateSequence(context.Background(), w.reg0.inDC(0), c.Name, c.Start, c.Max); err != nil {
			w.reg0.close()
			return nil, fmt.Errorf("sequence %s: %w", c.Name, err)
		}
		w.check.seqs = append(w.check.seqs, &seqCheck{cfg: c, start: c.Start, max: c.Max})
	}
	for _, c := range h.Hosts {
		if _, err := w.addHost(c); err != nil {
			w.reg0.close()
			return nil, err
		}
	}
	if c, ok := w.reg0.(*cqlCluster); ok {
		c.start() // faults from the first step on, not in the set-up
	}
	return w, nil
}

// addHost makes a new host's directory (durable from the start).
func (w *world) addHost(c HostConfig) (*host, error) {
	i := len(w.hosts)
	hd := filepath.Join(w.dir, fmt.Sprintf("h%d", i))
	state := filepath.Join(hd, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, err
	}
	ho := &host{
		i: i, cfg: c, dir: hd,
		counter:    filepath.Join(state, "counter"),
		bindings:   filepath.Join(hd, "names"),
		disk:       newDisk(hd),
		seqDamaged: map[int][]string{},
		info:       engine.HostInfo{Hostname: fmt.Sprintf("host%d", i), Address: fmt.Sprintf("10.0.0.%d", i+1), MachineID: fmt.Sprintf("machine-%d", i)},
	}
	if err := ho.disk.settle(); err != nil {
		return nil, err
	}
	w.hosts = append(w.hosts, ho)
	return ho, nil
}

// reserveStep is the reservation step of a registered host's processes.
const reserveStep = 50

// standaloneNumber is the node number a standalone host is configured
// with: one per name (a standalone host's name is its own).
func standaloneNumber(ho *host) uint64 { return 100 + uint64(ho.i) + ho.nodeShift }

// stride is the stride of ho's striped ids.
func (ho *host) stride() uint64 {
	if ho.altStride {
		return simStride2
	}
	return simStride
}

// strideOf is the stride process p of ho opened with (a form change
// while others run leaves them on the stride they had).
func (ho *host) strideOf(p int) uint64 {
	if s := ho.procStride[p]; s != 0 {
		return s
	}
	return ho.stride()
}

// options are the Options of a process of ho.
func (w *world) options(ho *host, extra ...engine.Option) []engine.Option {
	o := []engine.Option{
		engine.WithSync(ho.cfg.Sync),
		engine.WithBindingDir(ho.bindings),
		engine.WithLogger(w.log),
		engine.WithIO(ho.disk),
		engine.WithFS(ho.disk),
		engine.WithClock(w.hostClock(ho)),
	}
	if ho.cfg.Block > 0 {
		o = append(o, engine.WithBlock(ho.cfg.Block), engine.WithCPUShards(ho.cfg.Shards))
	}
	if f := ho.cfg.Form; f != engine.FormatName {
		o = append(o, engine.WithFormat(f))
		if !ho.cfg.Registry {
			o = append(o, engine.WithNodeNumber(standaloneNumber(ho)))
		}
		if f == engine.FormatStriped {
			o = append(o, engine.WithStride(ho.stride()))
		}
	}
	if ho.cfg.MaxID != 0 {
		o = append(o, engine.WithMaxID(ho.cfg.MaxID))
	}
	if ho.cfg.Registry {
		o = append(o,
			engine.WithRegistry(w.regs[ho.cfg.DC]),
			engine.WithHostInfo(ho.info),
			// Retries of a start-up's registry calls do not wait.
			engine.WithRetryWait(func(int) time.Duration { return 0 }),
			// The heartbeat runs on the host's clock (hostclock.go).
			engine.WithHeartbeat(hbInterval),
			engine.WithCloneWindow(cloneWindow),
			engine.WithReserveStep(reserveStep),
		)
		if ho.takeSet {
			o = append(o, engine.WithTakeover(ho.takeover))
		}
	}
	o = append(o, w.freezeHost(ho)...) // through the host's freezer (freeze.go)
	return append(o, extra...)
}

// crashAll kills every process of ho.
func (w *world) crashAll(ho *host) {
	for p := range ho.procs {
		w.crash(ho, p)
	}
}

// crash kills process p of ho (its Sequences with it).
func (w *world) crash(ho *host, p int) {
	if g := ho.procs[p]; g != nil {
		_ = engine.Crash(g)
		ho.procs[p], ho.seqs[p] = nil, nil
		w.check.crashGap(ho)
	}
}

// closeProc closes process p of ho: its Sequences, then its Generator; a
// Close that fails is a crash.
func (w *world) closeProc(ho *host, p int) {
	g := ho.procs[p]
	if g == nil {
		return
	}
	failed := false
	for _, sq := range ho.seqs[p] {
		if err := sq.Close(); err != nil {
			failed = true
		}
	}
	if err := g.Close(); err != nil || failed {
		_ = engine.Crash(g)
	}
	ho.procs[p], ho.seqs[p] = nil, nil
}

// closeAll closes every process of ho; a Close that fails is a crash.
func (w *world) closeAll(ho *host) {
	for p := range ho.procs {
		w.closeProc(ho, p)
	}
}

func (w *world) running(ho *host) bool {
	for _, g := range ho.procs {
		if g != nil {
			return true
		}
	}
	return false
}

// open opens process p of ho if it is not open.
func (w *world) open(ho *host, p int, extra ...engine.Option) error {
	if ho.procs[p] != nil {
		return nil
	}
	ho.raiseBack[p] = false // a new process saw nothing before the repair
	running := w.running(ho)
	clone := w.cloneClaim(ho, running)
	pre, ext := w.beforeOpen(ho), &extensions{w: w, ho: ho, p: p, last: reserveStep}
	g, err := engine.OpenContext(w.opCtx(), ho.counter, ho.cfg.Name, w.options(ho, append(append(w.procOptions(ho, p, ext), w.freezeProc(ho, p, ext)...), extra...)...)...)
	w.afterOpen(ho, p, g, err, pre, ext)
	if err != nil {
		return err
	}
	if clone != "" {
		w.check.violation("h%d claimed %s, though %s", ho.i, ho.cfg.Name, clone)
	}
	w.check.opened(ho, running)
	ho.procs[p] = g
	ho.procStride[p] = ho.stride()
	ho.procFloor[p] = 0
	ho.exts[p] = ext
	ho.joinPending = false
	ho.opened = true
	return nil
}

// stepLimit is how long, on the wall clock, a step (with the settling
// after it), or the end of a history, may run: a step takes milliseconds,
// so one that has not finished after this long on a loaded machine makes
// no progress (a loop that never ends, a lock never released), and is
// reported as a hang (SNAPID_SIM_STEP_LIMIT changes it).
var stepLimit = 20 * time.Second

// run runs every step, then the end-of-history checks. It returns "", or
// what hung: then the goroutine running the step is left behind (it
// cannot be stopped) and nothing of w may be read any more.
func (w *world) run() (hung string) {
	for i, s := range w.h.Steps {
		w.step = i
		w.stepNow.Store(int64(i))
		if !guard(stepLimit, func() {
			w.reg0.tick()
			w.do(s)
			w.settle()
			w.afterFreeze()
			w.passTime(stepTime) // time passes between steps (hostclock.go)
		}) {
			return fmt.Sprintf("step %d: %s made no progress for %v: a hang", i, s, stepLimit)
		}
		w.check.afterStep(s)
	}
	w.step = len(w.h.Steps)
	w.stepNow.Store(int64(w.step))
	if !guard(stepLimit, w.finish) {
		return fmt.Sprintf("the end of the history (faults stopped, every host asked to issue, every process closed) made no progress for %v: a hang", stepLimit)
	}
	for _, v := range w.contract.take() {
		w.check.violation("%s", v)
	}
	return ""
}

// guard runs fn in a goroutine of its own and reports whether it returned
// within limit (the watchdog: a history that stops making progress is a
// violation, not a test that runs until go test's timeout).
func guard(limit time.Duration, fn func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// settle waits for every background extension to end, then for the
// registry's own background work (a data centre's next sequence range).
func (w *world) settle() {
	for _, ho := range w.hosts {
		for _, g := range ho.procs {
			if g != nil {
				engine.Settle(g)
			}
		}
	}
	w.reg0.settle()
	w.settleClocks()
}

// exempt marks every host using name as one that may rightly stop.
func (w *world) exempt(name, why string) {
	for _, ho := range w.hosts {
		if ho.cfg.Name == name {
			ho.exempt = why
		}
	}
}

// finish stops the faults, asks every host that may issue to issue once
// more (liveness), closes everything, and checks that nothing is left
// behind.
func (w *world) finish() {
	w.reg.fault.disarm()
	w.reg0.stop()
	w.reg0.setDown(false)
	for dc := range w.regs {
		w.reg0.setCut(dc, false, false)
		w.cut[dc] = false
	}
	for _, ho := range w.hosts {
		ho.disk.fault.disarm()
		w.holderDown(ho, false)
		ho.disk.freeze.disarm()
	}
	// A freeze that fired after the last step's end (a background call
	// as time passed) is applied first: its processes are gone.
	w.afterFreeze()
	for _, ho := range w.hosts {
		w.closeAll(ho)
	}
	for _, ho := range w.hosts {
		w.check.live(ho)
	}
	for _, ho := range w.hosts {
		w.closeAll(ho)
	}
	w.reg0.close()
}

// stepCtx is the context of a step's call: one already ended if the step
// says so.
func (w *world) stepCtx(s Step) context.Context {
	if !s.Cancelled {
		return w.opCtx()
	}
	ctx, cancel := context.WithCancel(w.opCtx())
	cancel()
	return ctx
}
