package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/seam"
	"github.com/snapid/snapid/snapidtest"
)

// world runs one history against the real library: every host a
// directory of its own with its own disk (seams) and bindings, every
// process a Generator opened on the host's counter, one in-memory
// registry with faults for all, one clock.
type world struct {
	h     History
	dir   string
	mem   *snapidtest.Registry
	reg   *faultyRegistry
	clock *clock
	rng   *rand.Rand
	log   *slog.Logger
	hosts []*host
	check *checker
	step  int // index of the step running
	ops   int // operations run (steps, and each number of a NextN)
}

type host struct {
	i        int
	cfg      HostConfig
	dir      string
	counter  string
	bindings string
	disk     *disk
	info     snapid.HostInfo
	procs    [3]*snapid.Generator
	seqs     [3]map[int]*snapid.Sequence // each process's open Sequences
	backup   map[string][]byte
	// exempt: something done to this host (its files corrupted, restored
	// or cloned, its name released, forced or taken over) may rightly
	// keep it from issuing again; liveness is not asked of it.
	exempt string
	// released: its name was released on this host (Release reported
	// done); it issues again only when reclaimed.
	released bool
	takeover uint64 // WithTakeover floor for its opens, if takeoverSet
	takeSet  bool
}

// clock is the simulated clock of the registry and of the library's
// registry side.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }
func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (w *world) opCtx() context.Context      { return context.Background() }
func (w *world) hostOf(s Step) (*host, bool) { return w.host(s.Host) }

func (w *world) host(i int) (*host, bool) {
	if i < 0 || i >= len(w.hosts) {
		return nil, false
	}
	return w.hosts[i], true
}

func newWorld(h History, dir string) (*world, error) {
	w := &world{
		h:     h,
		dir:   dir,
		mem:   snapidtest.NewRegistry(),
		clock: newClock(),
		rng:   rand.New(rand.NewPCG(h.Seed, 0x5eed)),
		log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	w.mem.SetClock(w.clock.now)
	w.reg = newFaultyRegistry(w.mem)
	w.check = newChecker(w)
	for _, c := range h.Sequences {
		if _, err := snapid.CreateSequence(context.Background(), w.mem, c.Name, c.Start, c.Max); err != nil {
			return nil, fmt.Errorf("sequence %s: %w", c.Name, err)
		}
		w.check.seqs = append(w.check.seqs, &seqCheck{cfg: c, start: c.Start, max: c.Max})
	}
	for _, c := range h.Hosts {
		if _, err := w.addHost(c); err != nil {
			return nil, err
		}
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
		counter:  filepath.Join(state, "counter"),
		bindings: filepath.Join(hd, "names"),
		disk:     newDisk(hd),
		info:     snapid.HostInfo{Hostname: fmt.Sprintf("host%d", i), Address: fmt.Sprintf("10.0.0.%d", i+1), MachineID: fmt.Sprintf("machine-%d", i)},
	}
	if err := ho.disk.settle(); err != nil {
		return nil, err
	}
	w.hosts = append(w.hosts, ho)
	return ho, nil
}

// options are the Options of a process of ho.
func (w *world) options(ho *host, extra ...snapid.Option) []snapid.Option {
	o := []snapid.Option{
		snapid.WithSync(ho.cfg.Sync),
		snapid.WithBindingDir(ho.bindings),
		snapid.WithLogger(w.log),
		seam.WithIO(ho.disk).(snapid.Option),
		seam.WithFS(ho.disk).(snapid.Option),
	}
	if ho.cfg.Block > 0 {
		o = append(o, snapid.WithBlock(ho.cfg.Block), snapid.WithCPUShards(ho.cfg.Shards))
	}
	if ho.cfg.Registry {
		o = append(o,
			snapid.WithRegistry(w.reg),
			snapid.WithHostInfo(ho.info),
			seam.WithClock(w.clock.now).(snapid.Option),
			// No heartbeat fires while a history runs (it would run on
			// the real clock, at a moment no seed decides): liveness is
			// decided by the simulated clock alone.
			snapid.WithHeartbeat(time.Hour),
			snapid.WithCloneWindow(3*time.Hour),
			snapid.WithReserveStep(50),
		)
		if ho.takeSet {
			o = append(o, snapid.WithTakeover(ho.takeover))
		}
	}
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
		_ = seam.Crash(g)
		ho.procs[p], ho.seqs[p] = nil, nil
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
		_ = seam.Crash(g)
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
func (w *world) open(ho *host, p int, extra ...snapid.Option) error {
	if ho.procs[p] != nil {
		return nil
	}
	g, err := snapid.OpenContext(w.opCtx(), ho.counter, ho.cfg.Name, w.options(ho, extra...)...)
	if err != nil {
		return err
	}
	ho.procs[p] = g
	return nil
}

// run runs every step, then the end-of-history checks.
func (w *world) run() {
	for i, s := range w.h.Steps {
		w.step = i
		w.do(s)
		w.ops++
		w.settle()
		w.check.afterStep(s)
	}
	w.step = len(w.h.Steps)
	w.finish()
}

// settle waits for every background extension to end.
func (w *world) settle() {
	for _, ho := range w.hosts {
		for _, g := range ho.procs {
			if g != nil {
				seam.Settle(g)
			}
		}
	}
}

func (w *world) do(s Step) {
	ho, ok := w.hostOf(s)
	if !ok {
		return
	}
	switch s.Kind {
	case KOpen:
		if ho.released {
			return
		}
		before := w.check.rows()
		if err := w.open(ho, s.Proc); refusedAsInput(err) {
			// A file found damaged, or a name the counter does not serve,
			// is refused before the registry is touched.
			w.check.rowsUnchanged(before, fmt.Sprintf("an Open of h%d refused (%v)", ho.i, err))
		}
	case KNext:
		g := ho.procs[s.Proc]
		if g == nil {
			return
		}
		ctx := w.stepCtx(s)
		if s.N == 1 {
			id, err := g.UniqueIDContext(ctx)
			if err == nil {
				parsed, perr := snapid.ParseID(id)
				if perr != nil {
					w.check.violation("an id that does not parse: %q: %v", id, perr)
					return
				}
				w.check.issued(ho, s.Proc, parsed.Name, parsed.Number, 1)
			} else if s.Cancelled {
				w.check.counterUnchangedAfterCancel(ho)
			}
			return
		}
		first, err := g.NextNContext(ctx, s.N)
		if err == nil {
			w.ops += int(s.N) - 1
			w.check.issued(ho, s.Proc, ho.cfg.Name, first, s.N)
		}
	case KClose:
		w.closeProc(ho, s.Proc)
	case KCrash:
		w.crash(ho, s.Proc)
	case KPowerCut:
		w.crashAll(ho)
		if !ho.cfg.Sync && !ho.cfg.Registry {
			// Without sync and without a registry, numbers after a power
			// cut repeat by design (SPEC §4, guarantee 2): a crash only.
			return
		}
		if err := ho.disk.powerCut(w.rng, s.Keep); err != nil {
			w.check.violation("power cut on h%d: %v", ho.i, err)
		}
	case KRelease:
		w.closeAll(ho)
		before := w.check.snapshot(ho)
		final, err := snapid.Release(w.opCtx(), ho.counter, ho.cfg.Name, w.options(ho)...)
		w.check.released(ho, final, err, before)
	case KForce:
		if !ho.cfg.Registry {
			return
		}
		final, err := snapid.ForceRelease(w.opCtx(), w.reg, ho.cfg.Name, s.N)
		w.check.forceReleased(ho, final, err)
		if err == nil || errors.Is(err, snapid.ErrRegistry) {
			w.exempt(ho.cfg.Name, "its name was force-released")
		}
	case KTakeover:
		if !ho.cfg.Registry {
			return
		}
		c := ho.cfg
		nh, err := w.addHost(c)
		if err != nil {
			w.check.violation("take-over: %v", err)
			return
		}
		nh.takeover, nh.takeSet = s.N, true
		w.exempt(c.Name, "its name was taken over")
		nh.exempt = ""
		_ = w.open(nh, 0)
	case KReclaim:
		if !ho.cfg.Registry || w.running(ho) {
			return
		}
		if err := w.open(ho, s.Proc, snapid.WithReclaim()); err == nil {
			ho.released = false
		}
	case KBackup:
		b, err := readTree(ho.dir)
		if err != nil {
			w.check.violation("backup of h%d: %v", ho.i, err)
			return
		}
		ho.backup = b
	case KRestore:
		if ho.backup == nil || !ho.cfg.Registry {
			// Without a registry a counter restored from an earlier copy
			// while nothing runs repeats by design (SPEC §5).
			return
		}
		w.crashAll(ho)
		if err := writeTree(ho.dir, ho.backup); err != nil {
			w.check.violation("restore of h%d: %v", ho.i, err)
			return
		}
		if err := ho.disk.settle(); err != nil {
			w.check.violation("restore of h%d: %v", ho.i, err)
		}
		ho.exempt = "its files were restored from a copy"
		ho.released = false
	case KRestoreLive:
		// Put back in place (same file, so running processes keep it
		// open): what a backup tool restoring over a live host does. The
		// running processes must notice and never repeat; a process that
		// starts later is covered by the registry's mark. Without a
		// registry only the running process can tell (a documented
		// limit), so standalone hosts are left out.
		if ho.backup == nil || !ho.cfg.Registry || !w.running(ho) {
			return
		}
		// The counter only: a whole directory (counter and mark
		// together) restored under running processes is not covered
		// (docs/guarantees.md): the mark's floor goes back with it.
		for _, p := range []string{ho.counter} {
			if b, ok := ho.backup[p]; ok {
				if err := os.WriteFile(p, b, 0o600); err != nil {
					w.check.violation("restore in place on h%d: %v", ho.i, err)
				}
			}
		}
		ho.exempt = "its files were restored from a copy"
	case KClone:
		if !ho.cfg.Registry {
			return
		}
		files, err := readTree(ho.dir)
		if err != nil {
			w.check.violation("clone of h%d: %v", ho.i, err)
			return
		}
		nh, err := w.addHost(ho.cfg)
		if err == nil {
			err = writeTree(nh.dir, rebase(files, ho.dir, nh.dir))
		}
		if err == nil {
			err = nh.disk.settle()
		}
		if err != nil {
			w.check.violation("clone of h%d: %v", ho.i, err)
			return
		}
		ho.exempt = "it was cloned"
		nh.exempt = "it is a clone"
		nh.released = ho.released
		if s.Keep {
			// Started once the clone window has passed: its claim
			// supersedes the original's session, which may still run.
			w.clock.add(3*time.Hour + time.Minute)
			_ = w.open(nh, 0)
		}
	case KCorrupt:
		if w.running(ho) {
			return
		}
		w.corrupt(ho, s.Arg)
	case KClock:
		w.clock.add(s.D)
	case KRegFault:
		w.reg.arm(regFault{op: s.Arg, after: int(s.N), applied: s.Applied})
	case KRegDown:
		w.mem.SetDown(s.Keep)
	case KDiskFault:
		ho.disk.arm(s.Arg, int(s.N), s.Errno)
	case KBadInput:
		w.badInput(ho, s)
	case KSeqNext:
		w.seqNext(ho, s)
	case KSeqCreate:
		w.seqCreate(s)
	case KConcurrent:
		w.concurrent(ho, s)
	case KStorm:
		w.storm(ho, s.Keep)
	case KMove:
		// The whole counter directory, files beside the counter included,
		// moved with mv and synced: the same counter under a new path.
		// Without a registry the binding then names a path that is gone
		// (stale) and the name goes with the new one; with a registry the
		// owner token moves with it.
		if w.running(ho) {
			return
		}
		from := filepath.Dir(ho.counter)
		to := filepath.Join(ho.dir, fmt.Sprintf("state%d", w.step))
		if err := os.Rename(from, to); err != nil {
			w.check.violation("move on h%d: %v", ho.i, err)
			return
		}
		ho.counter = filepath.Join(to, filepath.Base(ho.counter))
		if err := ho.disk.settle(); err != nil {
			w.check.violation("move on h%d: %v", ho.i, err)
		}
		if ho.backup != nil {
			ho.backup = rebase(ho.backup, from, to)
		}
	case KInit:
		// Only while no process runs, as an operator would; Init raises a
		// counter below next-1 and refuses to lower one (ErrLowered).
		if w.running(ho) {
			return
		}
		before, err := snapid.Init(ho.counter, s.N, w.options(ho)...)
		if err == nil {
			if v, rerr := snapid.ReadCounter(ho.counter); rerr != nil || v < max(before, s.N-1) {
				w.check.violation("Init of h%d with next %d reported done, but the counter reads %d (%v), below %d", ho.i, s.N, v, rerr, max(before, s.N-1))
			}
		}
	}
}

// sequence returns process p's Sequence s, opening it if needed.
func (w *world) sequence(ho *host, p, s int) (*snapid.Sequence, error) {
	if sq := ho.seqs[p][s]; sq != nil {
		return sq, nil
	}
	c := w.h.Sequences[s]
	sq, err := ho.procs[p].SequenceContext(w.opCtx(), c.Name, snapid.SequenceBlock(c.Block), snapid.SequenceLeaseSize(c.Lease))
	if err != nil {
		return nil, err
	}
	if ho.seqs[p] == nil {
		ho.seqs[p] = map[int]*snapid.Sequence{}
	}
	ho.seqs[p][s] = sq
	return sq, nil
}

func (w *world) seqNext(ho *host, s Step) {
	if !ho.cfg.Registry || ho.procs[s.Proc] == nil || s.Seq >= len(w.h.Sequences) {
		return
	}
	sq, err := w.sequence(ho, s.Proc, s.Seq)
	if err != nil {
		return
	}
	ctx := w.stepCtx(s)
	var first uint64
	if s.N == 1 {
		first, err = sq.NextContext(ctx)
	} else {
		first, err = sq.NextNContext(ctx, s.N)
	}
	if err == nil {
		w.ops += int(s.N) - 1
		w.check.seqIssued(ho, s.Proc, s.Seq, first, s.N)
	}
}

func (w *world) seqCreate(s Step) {
	if s.Seq >= len(w.h.Sequences) {
		return
	}
	name := w.h.Sequences[s.Seq].Name
	var info snapid.SequenceInfo
	var err error
	if s.Max == 0 {
		info, err = snapid.CreateSequenceKeepMax(w.opCtx(), w.reg, name, s.Start)
	} else {
		info, err = snapid.CreateSequence(w.opCtx(), w.reg, name, s.Start, s.Max)
	}
	w.check.seqCreated(s.Seq, s, info, err)
}

// exempt marks every host using name as one that may rightly stop.
func (w *world) exempt(name, why string) {
	for _, ho := range w.hosts {
		if ho.cfg.Name == name {
			ho.exempt = why
		}
	}
}

// corrupt damages one file of ho (no process runs).
func (w *world) corrupt(ho *host, which string) {
	var p string
	switch which {
	case "counter":
		p = ho.counter
	case "mark":
		p = ho.counter + ".mark"
	case "session":
		p = ho.counter + ".session"
	case "owner":
		p = ho.counter + ".owner"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return // not made yet
	}
	switch {
	case which == "counter":
		b = b[:len(b)/2] // torn: a counter that cannot be read
	case which == "mark":
		b = append(b, 0) // a size no mark file has
	case len(b) > 0:
		b[len(b)/2] ^= 0x5a
	default:
		b = []byte("garbage")
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		w.check.violation("corrupt %s: %v", p, err)
	}
	_ = ho.disk.settle()
	ho.exempt = "its " + which + " file was corrupted"
}

// badInput makes a call that must fail and change nothing.
func (w *world) badInput(ho *host, s Step) {
	before := w.check.snapshot(ho)
	var err error
	switch s.Arg {
	case "name":
		var g *snapid.Generator
		g, err = snapid.OpenContext(w.opCtx(), ho.counter, "-bad name", w.options(ho)...)
		if err == nil {
			_ = g.Close()
		}
	case "counter-dir":
		var g *snapid.Generator
		g, err = snapid.OpenContext(w.opCtx(), filepath.Join(ho.dir, "missing", "counter"), ho.cfg.Name, w.options(ho)...)
		if err == nil {
			_ = g.Close()
		}
	case "takeover-max":
		var g *snapid.Generator
		g, err = snapid.OpenContext(w.opCtx(), ho.counter, ho.cfg.Name, w.options(ho, snapid.WithTakeover(snapid.MaxNumber))...)
		if err == nil {
			_ = g.Close()
		}
	case "block-0":
		var g *snapid.Generator
		g, err = snapid.OpenContext(w.opCtx(), ho.counter, ho.cfg.Name, w.options(ho, snapid.WithBlock(0))...)
		if err == nil {
			_ = g.Close()
		}
	case "other-name":
		// A second name on a counter that processes of the host use
		// under its own name (one counter, one name), also during an
		// outage, when the registry cannot be asked.
		// (Without a registry a counter may serve two names: their ids
		// differ by the name; only one counter per name is required.)
		if !w.running(ho) || !ho.cfg.Registry {
			return
		}
		var g *snapid.Generator
		g, err = snapid.OpenContext(w.opCtx(), ho.counter, "other", w.options(ho)...)
		if err == nil {
			_ = g.Close()
		}
	case "next-0":
		g := ho.procs[s.Proc]
		if g == nil {
			return
		}
		_, err = g.NextNContext(w.opCtx(), 0)
	}
	if err == nil {
		w.check.violation("bad input %q was accepted on h%d", s.Arg, ho.i)
		return
	}
	w.check.unchanged(ho, before, "bad input "+s.Arg)
}

// finish stops the faults, asks every host that may issue to issue once
// more (liveness), closes everything, and checks that nothing is left
// behind.
func (w *world) finish() {
	w.reg.disarm()
	w.mem.SetDown(false)
	for _, ho := range w.hosts {
		ho.disk.disarm()
	}
	for _, ho := range w.hosts {
		w.closeAll(ho)
	}
	for _, ho := range w.hosts {
		w.check.live(ho)
	}
	for _, ho := range w.hosts {
		w.closeAll(ho)
	}
}

// readTree reads every regular file under dir.
func readTree(dir string) (map[string][]byte, error) {
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil || !de.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		files[p] = b
		return err
	})
	return files, err
}

// writeTree makes dir hold exactly files (directories are kept).
func writeTree(dir string, files map[string][]byte) error {
	if err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return err
		}
		if _, ok := files[p]; !ok {
			return os.Remove(p)
		}
		return nil
	}); err != nil {
		return err
	}
	for p, b := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := rewrite(p, b); err != nil {
			return err
		}
	}
	return nil
}

// rebase moves the paths of files from under from to under to.
func rebase(files map[string][]byte, from, to string) map[string][]byte {
	out := make(map[string][]byte, len(files))
	for p, b := range files {
		rel, _ := filepath.Rel(from, p)
		out[filepath.Join(to, rel)] = b
	}
	return out
}

// refusedAsInput reports whether an Open failed on what it was given or
// found (a damaged file, a name the counter does not serve, a bad option),
// not on a fault: such a refusal changes nothing in the registry.
func refusedAsInput(err error) bool {
	return err != nil && (errors.Is(err, snapid.ErrCorrupt) || errors.Is(err, snapid.ErrNameMismatch) ||
		errors.Is(err, snapid.ErrInvalidOption) || errors.Is(err, snapid.ErrInvalidName))
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
