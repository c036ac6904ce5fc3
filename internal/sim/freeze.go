package sim

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/statefile"
	"github.com/snapid/snapid/registry"
)

// A fault inside an operation: a host's power cut, or one process
// killed, at the k-th I/O or registry call the seed chose, whoever makes
// it (a caller, or a background extension, block prefetch or sequence
// lease refill).
//
// Every process of a host reaches the disk and the registry through a
// gate of its own (procSeam, freezeRegistry), the host's other users (an
// operator's Release, Init, Repair) through the host's gate (process -1).
// When the chosen call comes, the host freezes at that instant: for a
// power cut the disk's state is taken (what is durable, and what is in
// the page cache, so that the cut can be computed from it: cut.go), for
// a kill nothing need be taken (the files stay as they are). From then
// on every call of the frozen processes (all of the host's for a cut)
// fails with EIO, or a registry error, and changes nothing; the call at
// the instant itself fails so. The step goes on to its end (the
// operation returns whatever it returns; numbers it returned count as
// handed out); then the simulator abandons the frozen processes
// (engine.Crash) and, for a cut, puts the host's files back to what the
// cut leaves (applyFrozen).
type freezer struct {
	mu    sync.Mutex
	armed bool
	after int    // calls to let pass before the one it fires at
	only  string // "lease": count only the calls of a sequence lease refill
	kill  bool   // kill the process making the call; else a power cut of the host
	keep  bool   // the cut keeps some of what was not synced
	step  int    // the step that armed it

	fired   bool
	proc    int         // the process killed (-1: the host's other users)
	at      string      // the call it fired at
	refill  bool        // it fired during a sequence lease refill
	state   *diskState  // what the disk held at the instant (a cut)
	leasing map[int]int // process → the lease refills it has in flight (a LeaseSequence answered, its lease file not yet written)
	hold    *hold       // a process to hold at a call (hold.go)
}

// arm makes the after-th next call (of the kind only says) freeze the
// host: kill the process making it, or cut the power.
func (f *freezer) arm(after int, only string, kill, keep bool, step int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fired {
		return
	}
	f.armed, f.after, f.only, f.kill, f.keep, f.step = true, after, only, kill, keep, step
}

func (f *freezer) disarm() {
	f.mu.Lock()
	f.armed = false
	f.mu.Unlock()
}

// hasFired reports whether the freeze fired and its processes are not
// abandoned yet (afterFreeze).
func (f *freezer) hasFired() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fired
}

// frozen reports whether process p's calls fail.
func (f *freezer) frozen(p int) bool { return f.fired && (!f.kill || f.proc == p) }

// enter (a kill fires only at a process's call, never at an operator's)
// is called before every I/O call (op: read, write, sync, syncdir,
// link, rename, remove) on path, and every registry call (op "reg:" and
// its name), of process p: it returns an error if the call must fail (the
// host or the process is frozen, or freezes now).
func (f *freezer) enter(d *disk, p int, op, path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fired {
		if f.frozen(p) {
			return syscall.EIO
		}
		return nil
	}
	if f.leasing == nil {
		f.leasing = map[int]int{}
	}
	leaseIO := isLeasePath(path) && (op == "write" || op == "sync")
	refill := op == "reg:lease" || (leaseIO && f.leasing[p] > 0)
	if leaseIO && op == "sync" && f.leasing[p] > 0 {
		defer func() { f.leasing[p]-- }() // the refill's record is synced: it is done
	}
	if !f.armed || (f.only == "lease" && !refill) || (f.kill && p < 0) {
		return nil
	}
	if f.after > 0 {
		f.after--
		return nil
	}
	f.armed, f.fired, f.proc, f.at, f.refill = false, true, p, op+" "+path, refill
	if !f.kill {
		st, err := d.capture()
		if err != nil {
			st = nil // applyFrozen reports it
		}
		f.state = st
	}
	return syscall.EIO
}

// leased records that process p's LeaseSequence was answered: the
// refill writes its lease file next.
func (f *freezer) leased(p int) {
	f.mu.Lock()
	if f.leasing == nil {
		f.leasing = map[int]int{}
	}
	f.leasing[p]++
	f.mu.Unlock()
}

// isLeasePath reports whether path is a sequence lease file (or its
// floor).
func isLeasePath(path string) bool { return strings.Contains(path, ".lease") }

// procSeam is process p's way to its host's disk, through the freezer.
type procSeam struct {
	d *disk
	p int
}

func (s procSeam) enter(op, path string) error {
	if err := s.d.freeze.enter(s.d, s.p, op, path); err != nil {
		return &fs.PathError{Op: op, Path: path, Err: err}
	}
	return nil
}

func (s procSeam) ReadAt(f *os.File, b []byte, off int64) (int, error) {
	if err := s.enter("read", f.Name()); err != nil {
		return 0, err
	}
	return s.d.ReadAt(f, b, off)
}

func (s procSeam) WriteAt(f *os.File, b []byte, off int64) (int, error) {
	if err := s.enter("write", f.Name()); err != nil {
		return 0, err
	}
	return s.d.WriteAt(f, b, off)
}

func (s procSeam) Sync(f *os.File) error {
	if err := s.enter("sync", f.Name()); err != nil {
		return err
	}
	return s.d.Sync(f)
}

func (s procSeam) SyncFile(f *os.File) error {
	if err := s.enter("sync", f.Name()); err != nil {
		return err
	}
	return s.d.SyncFile(f)
}

func (s procSeam) Link(oldname, newname string) error {
	if err := s.enter("link", newname); err != nil {
		return err
	}
	return s.d.Link(oldname, newname)
}

func (s procSeam) LinkNoReplace(oldname, newname string) error {
	if err := s.enter("link", newname); err != nil {
		return err
	}
	return s.d.LinkNoReplace(oldname, newname)
}

func (s procSeam) Rename(oldname, newname string) error {
	if err := s.enter("rename", newname); err != nil {
		return err
	}
	return s.d.Rename(oldname, newname)
}

func (s procSeam) Remove(name string) error {
	if err := s.enter("remove", name); err != nil {
		return err
	}
	return s.d.Remove(name)
}

func (s procSeam) SyncDir(dir string) error {
	if err := s.enter("syncdir", dir); err != nil {
		return err
	}
	return s.d.SyncDir(dir)
}

func (s procSeam) Check(op, path, to string) error {
	if err := s.enter(op, path); err != nil {
		return err
	}
	return s.d.Check(op, path, to)
}

var (
	_ statefile.FS      = procSeam{}
	_ statefile.Checker = procSeam{}
	_ statefile.Writer  = procSeam{}

	_ statefile.NoReplaceLinker = procSeam{}
	_ engine.FileIO             = procSeam{}
)

// freezeRegistry is process p's way to the registry, through its host's
// freezer: a frozen process's calls fail and change nothing.
type freezeRegistry struct {
	backend
	d *disk
	p int
}

func (r freezeRegistry) enter(op, name string) error {
	r.d.freeze.held(r.p, "reg:"+op)
	if r.d.freeze.enter(r.d, r.p, "reg:"+op, name) != nil {
		return fmt.Errorf("sim: %w: %s %q: the host is down", engine.ErrRegistry, op, name)
	}
	return nil
}

func (r freezeRegistry) Claim(ctx context.Context, c registry.Claim) (registry.Holder, error) {
	if err := r.enter("claim", c.Name); err != nil {
		return registry.Holder{}, err
	}
	return r.backend.Claim(ctx, c)
}

func (r freezeRegistry) Extend(ctx context.Context, name, owner, session string, old, new uint64) (registry.Holder, error) {
	if err := r.enter("extend", name); err != nil {
		return registry.Holder{}, err
	}
	return r.backend.Extend(ctx, name, owner, session, old, new)
}

func (r freezeRegistry) Touch(ctx context.Context, name, owner, session string) error {
	if err := r.enter("touch", name); err != nil {
		return err
	}
	return r.backend.Touch(ctx, name, owner, session)
}

func (r freezeRegistry) Release(ctx context.Context, name, owner string, final uint64) error {
	if err := r.enter("release", name); err != nil {
		return err
	}
	return r.backend.Release(ctx, name, owner, final)
}

func (r freezeRegistry) Get(ctx context.Context, name string) (registry.Holder, error) {
	if err := r.enter("get", name); err != nil {
		return registry.Holder{}, err
	}
	return r.backend.Get(ctx, name)
}

func (r freezeRegistry) List(ctx context.Context) ([]registry.Holder, error) {
	if err := r.enter("list", ""); err != nil {
		return nil, err
	}
	return r.backend.List(ctx)
}

func (r freezeRegistry) AssignNumber(ctx context.Context, name, owner, session string) (uint64, error) {
	if err := r.enter("assign", name); err != nil {
		return 0, err
	}
	return r.backend.AssignNumber(ctx, name, owner, session)
}

func (r freezeRegistry) SetStride(ctx context.Context, stride uint64) (uint64, error) {
	if err := r.enter("stride", ""); err != nil {
		return 0, err
	}
	return r.backend.SetStride(ctx, stride)
}

func (r freezeRegistry) Stride(ctx context.Context) (uint64, error) {
	if err := r.enter("stride", ""); err != nil {
		return 0, err
	}
	return r.backend.Stride(ctx)
}

func (r freezeRegistry) CreateSequence(ctx context.Context, name string, start, max uint64) (registry.SequenceInfo, error) {
	if err := r.enter("createsequence", name); err != nil {
		return registry.SequenceInfo{}, err
	}
	return r.backend.CreateSequence(ctx, name, start, max)
}

func (r freezeRegistry) LeaseSequence(ctx context.Context, req registry.LeaseRequest) (registry.SequenceLease, error) {
	if err := r.enter("lease", req.Sequence); err != nil {
		return registry.SequenceLease{}, err
	}
	l, err := r.backend.LeaseSequence(ctx, req)
	if err == nil {
		r.d.freeze.leased(r.p)
	}
	return l, err
}

func (r freezeRegistry) CloseLease(ctx context.Context, l registry.SequenceLease, pos uint64) error {
	if err := r.enter("closelease", l.Name); err != nil {
		return err
	}
	return r.backend.CloseLease(ctx, l, pos)
}

func (r freezeRegistry) AdoptLease(ctx context.Context, a registry.LeaseAdoption) (registry.SequenceLease, error) {
	if err := r.enter("adopt", a.Name); err != nil {
		return registry.SequenceLease{}, err
	}
	return r.backend.AdoptLease(ctx, a)
}

func (r freezeRegistry) HostLease(ctx context.Context, sequence, name string) (registry.SequenceLease, error) {
	if err := r.enter("hostlease", name); err != nil {
		return registry.SequenceLease{}, err
	}
	return r.backend.HostLease(ctx, sequence, name)
}

var _ backend = freezeRegistry{}

// freezeHost are the seams of ho's other users (an operator's Release,
// Init, Repair), through the host's freezer (process -1).
func (w *world) freezeHost(ho *host) []engine.Option {
	ps := procSeam{d: ho.disk, p: -1}
	o := []engine.Option{engine.WithIO(ps), engine.WithFS(ps)}
	if ho.cfg.Registry {
		o = append(o, engine.WithRegistry(freezeRegistry{backend: w.regs[ho.cfg.DC], d: ho.disk, p: -1}))
	}
	return o
}

// freezeProc are the seams of process p of ho, through the host's
// freezer: its registry is the process slot's (procRegistry, as
// procOptions gives it) behind the freezer's gate; given after
// procOptions, it replaces that registry.
func (w *world) freezeProc(ho *host, p int, ext *extensions) []engine.Option {
	ps := procSeam{d: ho.disk, p: p}
	o := []engine.Option{engine.WithIO(ps), engine.WithFS(ps)}
	if ho.cfg.Registry {
		inner := procRegistry{w.regs[ho.cfg.DC], &ho.hb.down[p], ext}
		o = append(o, engine.WithRegistry(freezeRegistry{backend: inner, d: ho.disk, p: p}))
	}
	return o
}

// freezeArm is the step that arms a freeze on ho (KFreeze).
func (w *world) freezeArm(ho *host, s Step) {
	ho.disk.freeze.arm(int(s.N), s.Arg, s.Applied, s.Keep, w.step)
}

// afterFreeze runs after every step and its settling: a freeze that
// fired on a host abandons the frozen processes and, for a power cut,
// puts the host's files back to what the cut leaves. One armed and not
// fired within freezeSteps steps is disarmed.
func (w *world) afterFreeze() {
	for _, ho := range w.hosts {
		f := &ho.disk.freeze
		f.mu.Lock()
		fired, kill, proc, keep, st, at, refill, step := f.fired, f.kill, f.proc, f.keep, f.state, f.at, f.refill, f.step
		if !fired && f.armed && (f.only != "lease" || w.step-f.step >= leaseFreezeSteps) && w.step-f.step >= freezeSteps {
			f.armed = false
		}
		f.mu.Unlock()
		if !fired {
			continue
		}
		w.faulted()
		w.reached["fault-inside-op"]++
		for _, h := range w.hosts {
			h.dense = false
		}
		if refill {
			w.reached["lease-refill-cut"]++
		}
		if kill {
			w.reached["kill-inside-op"]++
			if proc >= 0 {
				w.crash(ho, proc)
			}
		} else {
			w.reached["cut-inside-op"]++
			w.crashAll(ho)
			switch {
			case st == nil:
				w.check.violation("power cut on h%d at %s (step %d): its state could not be taken", ho.i, at, step)
			default:
				if err := ho.disk.applyCut(st, w.rng, keep); err != nil {
					w.check.violation("power cut on h%d at %s: %v", ho.i, at, err)
				}
				w.afterCut(ho)
			}
		}
		if ho.raisePending {
			w.raiseReplacement(ho)
		}
		f.mu.Lock()
		f.fired, f.state, f.leasing = false, nil, nil
		f.mu.Unlock()
	}
}

// freezeSteps is how many steps an armed freeze waits for its call;
// leaseFreezeSteps, one waiting for a lease refill (which comes only
// when a lease is used up).
const (
	freezeSteps      = 3
	leaseFreezeSteps = 30
)
