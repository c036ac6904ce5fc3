package sim

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/hoststate"
	"golang.org/x/sys/unix"
)

// forceRelease has an operator release ho's name for a holder gone for
// good (ForceRelease with the next number given).
func (w *world) forceRelease(ho *host, next uint64) {
	if !ho.cfg.Registry || ho.joinPending {
		return
	}
	for p, g := range ho.procs {
		if g == nil {
			continue
		}
		// The holder still runs: between the operator's read of the row
		// and its release, the holder takes more numbers than its
		// reservation covers, and moves the mark above what the
		// operator read (a release must then be refused: recorded, it
		// would lower the mark below numbers handed out).
		w.reg.onNextRelease(func() {
			n := uint64(2 * reserveStep)
			if first, err := g.NextNContext(w.opCtx(), n); err == nil {
				w.did(int(n))
				w.check.issued(ho, p, ho.cfg.Name, first, n)
			}
			engine.Settle(g)
		})
		break
	}
	was, hadRow := w.reg0.Row(ho.cfg.Name)
	final, err := admin.ForceRelease(w.opCtx(), w.reg, ho.cfg.Name, next)
	w.reg.onNextRelease(nil)
	if err == nil {
		w.did(1)
	}
	w.check.forceReleased(ho, next, final, err, was, hadRow)
	if err == nil || errors.Is(err, engine.ErrRegistry) {
		w.exempt(ho.cfg.Name, "its name was force-released")
	}
}

// takeover starts a new host that takes ho's name over (WithTakeover
// with floor) and opens its first process.
func (w *world) takeover(ho *host, floor uint64, dc int) {
	if !ho.cfg.Registry || ho.joinPending {
		return
	}
	nh, err := w.addHost(ho.cfg.in(dc))
	if err != nil {
		w.check.violation("take-over: %v", err)
		return
	}
	nh.takeover, nh.takeSet = floor, true
	w.exempt(ho.cfg.Name, "its name was taken over")
	nh.exempt = ""
	if w.open(nh, 0) == nil {
		w.did(1)
	}
	if w.oldHolderIssues(ho) {
		w.reached["takeover-while-running"]++
	}
}

// backup copies ho's files aside, as they are (processes may run).
func (w *world) backup(ho *host) {
	b, err := readTree(ho.dir)
	if err != nil {
		w.check.violation("backup of h%d: %v", ho.i, err)
		return
	}
	ho.backup = b
	ho.backupDamage = ""
	if ho.damaged {
		ho.backupDamage = ho.damage
	}
	ho.issuers = map[*engine.Generator]bool{}
}

// reclaimFailed follows a claim of a released name on purpose
// (WithReclaim, snapctl register) that failed: one that failed after
// removing the host's record of the release leaves the name as any host
// may claim it. Only a reclaim removes that record: a Release reported
// done leaves it durable, and an Open without WithReclaim must then
// refuse the name.
func (w *world) reclaimFailed(ho *host) {
	if r, ok := hostRecord(ho); !ok || !r.Released {
		ho.released = false
		ho.releaseUnsynced = false
	}
}

// clone starts a new host on another machine with a copy of ho's files
// (the same owner token); started, it opens its first process once the
// clone window has passed, so that its claim supersedes the original's
// session, which may still run.
func (w *world) clone(ho *host, started bool, dc int) {
	if !ho.cfg.Registry {
		return
	}
	files, err := readTree(ho.dir)
	if err != nil {
		w.check.violation("clone of h%d: %v", ho.i, err)
		return
	}
	nh, err := w.addHost(ho.cfg.in(dc))
	if err == nil {
		// The copy's counter is where the original's is (moved, perhaps).
		rel, _ := filepath.Rel(ho.dir, ho.counter)
		nh.counter = filepath.Join(nh.dir, rel)
		if err = os.MkdirAll(filepath.Dir(nh.counter), 0o700); err == nil {
			err = writeTree(nh.dir, rebase(files, ho.dir, nh.dir))
		}
		if err == nil {
			err = cloneRecords(nh, ho.counter)
		}
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
	nh.cloneOf = ho
	// A clone of a virtual machine often keeps one of its identities:
	// its host name (the image's), or its machine id (copied with it).
	switch w.pick(0xc10e, 3) {
	case 1:
		nh.info.Hostname = ho.info.Hostname
	case 2:
		nh.info.MachineID = ho.info.MachineID
	}
	nh.released = ho.released
	nh.damaged, nh.damage = ho.damaged, ho.damage
	// A copy of a standalone host whose join has not claimed yet holds
	// numbers the registry never learnt, as the original does.
	nh.joinPending = ho.joinPending
	w.did(1)
	if started {
		// The original's machine is suspended meanwhile (its heartbeat
		// does not run): its last-seen ages past the clone window.
		w.passTime(cloneWindow+time.Minute, ho)
		if w.open(nh, 0) == nil {
			w.did(1)
		}
	}
}

// move has an operator move ho's whole counter directory, files beside
// the counter included, with mv and sync: the same counter under a new
// path. Without a registry the binding then names a path that is gone
// (stale) and the name goes with the new one; with a registry the owner
// token moves with it.
func (w *world) move(ho *host) {
	if w.running(ho) {
		return
	}
	if rec, ok := hostRecord(ho); ok {
		var st unix.Stat_t
		if unix.Stat(ho.counter, &st) != nil || rec.Dev != uint64(st.Dev) || rec.Ino != st.Ino {
			// The record names another file (a replacement not taken
			// over yet, or none there): only at the recorded path can
			// the host tell the counter is its own; an operator moves
			// the counter the record names.
			return
		}
	}
	from := filepath.Dir(ho.counter)
	to := filepath.Join(ho.dir, fmt.Sprintf("state%d", w.step))
	if err := os.Rename(from, to); err != nil {
		w.check.violation("move on h%d: %v", ho.i, err)
		return
	}
	ho.counter = filepath.Join(to, filepath.Base(ho.counter))
	ho.moved = true
	w.did(1)
	if err := ho.disk.settle(); err != nil {
		w.check.violation("move on h%d: %v", ho.i, err)
	}
	if ho.backup != nil {
		ho.backup = rebase(ho.backup, from, to)
	}
}

// initCounter has an operator run Init on ho's counter with next number next,
// only while no process runs; Init raises a counter below next-1 and
// refuses to lower one (ErrLowered).
func (w *world) initCounter(ho *host, next uint64) {
	if w.running(ho) {
		return
	}
	before, err := admin.Init(ho.counter, next, w.options(ho)...)
	if err != nil {
		return
	}
	w.did(1)
	if v, rerr := admin.ReadCounter(ho.counter); rerr != nil || v < max(before, next-1) {
		w.check.violation("Init of h%d with next %d reported done, but the counter reads %d (%v), below %d", ho.i, next, v, rerr, max(before, next-1))
	}
}

// repair is an operator rewriting ho's counter with Repair, as the
// documented procedure says: the host stopped, the next number above
// every number issued under its name (the registry's mark + 1 with a
// registry, else what the operator knows was issued). While processes of
// a registered host run it must be refused (ErrInUse) and change nothing;
// next 0 must be refused and change nothing. A counter repaired after it
// was corrupted issues again (liveness).
func (w *world) repair(ho *host, zero bool) {
	running := w.running(ho)
	if zero || running && ho.cfg.Registry {
		before := w.check.snapshot(ho)
		next := uint64(1 << 40)
		if zero {
			next = 0
		}
		_, err := admin.Repair(ho.counter, next, w.options(ho)...)
		switch {
		case err == nil:
			w.check.violation("Repair of h%d with next %d (in use: %v) was accepted", ho.i, next, running)
		case !zero && !errors.Is(err, engine.ErrInUse):
			w.check.violation("Repair of h%d in use failed with %v, want ErrInUse", ho.i, err)
		}
		w.did(1)
		w.check.unchanged(ho, before, fmt.Sprintf("refused Repair with next %d", next))
		return
	}
	if running && ho.cfg.Block > 0 {
		return // standalone processes may hold blocks above any floor the operator knows
	}
	// Standalone processes in strict mode may run through it: what they
	// handed out is what the operator knows (the highest number issued),
	// and each writes its record again before it goes past the mark the
	// Repair left.
	if suffixes, ok := ho.seqDamaged[0]; ok {
		// The documented procedure for a damaged lease file or floor:
		// the host stopped, remove it (a gap, never a repeat), and sync.
		p := ho.counter
		for _, suffix := range suffixes {
			if err := os.Remove(ho.counter + suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
				w.check.violation("removing the damaged %s: %v", ho.counter+suffix, err)
			}
		}
		if err := ho.disk.settle(); err != nil {
			w.check.violation("sync after removing %s: %v", p, err)
		}
		delete(ho.seqDamaged, 0)
		w.reached["damaged lease files removed by an operator"]++
	}
	high := w.check.high[ho.cfg.Name]
	if ho.cfg.Registry {
		row, ok := w.reg0.Row(ho.cfg.Name)
		if !ok {
			return
		}
		if ho.joinPending {
			// A standalone host that joined: what it handed out
			// before its first claim is not in the registry's mark.
			high = max(high, row.Reserved)
		} else {
			high = row.Reserved
		}
	}
	if high == uint64(math.MaxUint64) {
		return
	}
	if _, err := admin.Repair(ho.counter, high+1, w.options(ho)...); err != nil {
		return
	}
	w.did(1)
	w.reached["counters repaired"]++
	if running {
		w.reached["counters repaired under running processes"]++
		// A process that saw the counter above the repaired value
		// raises it back at its next update: a gap, not a repeat.
		for q, g := range ho.procs {
			ho.raiseBack[q] = g != nil
		}
	}
	ho.damaged = false
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
	case "lease", "floor":
		p = ho.counter + ".seq." + w.h.Sequences[0].Name
		if which == "floor" {
			p += ".floor"
		}
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return // not made yet
	}
	how := which
	switch {
	case which == "counter" && w.step%2 == 0:
		b = append(b, 0, 0, 0, 0, 0, 0, 0, 1) // oversized: a counter file with more than the counter
		how = "an oversized counter"
	case which == "counter":
		b = b[:len(b)/2] // torn: a counter that cannot be read
		how = "a torn counter"
	case which == "mark":
		b = append(b, 0) // a size no mark file has
	case which == "owner" && len(b) > 0:
		// Not a hex digit, whatever the (random) token: XORed, one
		// token in eight would stay a valid one, and a seed would not
		// replay the same.
		b[len(b)/2] = 'x'
	case len(b) > 0:
		b[len(b)/2] ^= 0x5a
	default:
		b = []byte("garbage")
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		w.check.violation("corrupt %s: %v", p, err)
	}
	_ = ho.disk.settle()
	w.faulted()
	switch which {
	case "counter":
		ho.damaged, ho.damage = true, how // until repaired
	case "lease", "floor":
		ho.seqDamaged[0] = append(ho.seqDamaged[0], strings.TrimPrefix(p, ho.counter)) // until the operator removes it
	default:
		ho.exempt = "its " + which + " file was corrupted"
	}
}

// cloneRecords makes the records copied to the clone nh name its own
// counter, as on a cloned machine's disk, whose files keep their device
// and inode numbers (the hosts of a history share one file system, where
// the copy is another file at another path).
func cloneRecords(nh *host, orig string) error {
	p, err := hoststate.OpenPlace(nh.bindings, hoststate.PlaceOptions{})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer p.Close()
	var st unix.Stat_t
	if err := unix.Stat(nh.counter, &st); err != nil {
		return nil // no counter copied: nothing to name
	}
	recs, _ := p.All(func(n string) bool { return engine.ValidateName(n) == nil })
	for _, r := range recs {
		if r.Path != orig {
			continue
		}
		r.Dev, r.Ino, r.Path, r.Gen = st.Dev, st.Ino, nh.counter, 0
		if err := p.Replace(r, 0o644); err != nil {
			return err
		}
	}
	return nil
}
