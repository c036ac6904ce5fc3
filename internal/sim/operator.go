package sim

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/snapid/snapid/internal/hoststate"
	"golang.org/x/sys/unix"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/seam"
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
			seam.Settle(g)
		})
		break
	}
	was, hadRow := w.reg0.Row(ho.cfg.Name)
	final, err := snapid.ForceRelease(w.opCtx(), w.reg, ho.cfg.Name, next)
	w.reg.onNextRelease(nil)
	if err == nil {
		w.did(1)
	}
	w.check.forceReleased(ho, next, final, err, was, hadRow)
	if err == nil || errors.Is(err, snapid.ErrRegistry) {
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
	ho.issuers = map[*snapid.Generator]bool{}
}

// restore kills ho's processes and puts its files back from the copy.
func (w *world) restore(ho *host) {
	if ho.backup != nil && !ho.cfg.Registry {
		w.restoreCounter(ho)
		return
	}
	if ho.backup == nil {
		return
	}
	w.crashAll(ho)
	w.faulted()
	if err := writeTree(ho.dir, ho.backup); err != nil {
		w.check.violation("restore of h%d: %v", ho.i, err)
		return
	}
	if err := ho.disk.settle(); err != nil {
		w.check.violation("restore of h%d: %v", ho.i, err)
	}
	ho.exempt = "its files were restored from a copy"
	ho.released = false
	ho.releaseUnsynced = false
	ho.damaged, ho.damage = ho.backupDamage != "", ho.backupDamage
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

// restoreCounter puts a standalone host's counter alone back from the
// copy, in place, while nothing runs (its whole directory, records
// included, restored together would go back unseen: docs/guarantees.md).
// A counter below what the host's record saw it reach must be refused
// (ErrRolledBack), changing nothing; the operator then does what the
// refusal says and raises it past the record's mark. One above the floor
// is raised to the mark by the first start after a crash, or was left by
// a clean close, which records where it stood.
func (w *world) restoreCounter(ho *host) {
	b, ok := ho.backup[ho.counter]
	if !ok {
		return
	}
	// The operator's restore, its check and its raise run with the
	// host's power steady: a freeze armed for the processes is left out
	// (one firing at the raise would leave the refusal for good).
	ho.disk.freeze.disarm()
	if w.pick(0x7e57, 2) == 0 {
		w.crashAll(ho)
	} else {
		w.closeAll(ho)
	}
	old, err := snapid.DecodeCounter(b)
	r, recorded := hostRecord(ho)
	if err != nil || !recorded || old >= r.Floor {
		return
	}
	if err := writeInPlace(ho.counter, b); err != nil {
		w.check.violation("restore of the counter of h%d: %v", ho.i, err)
		return
	}
	w.faulted()
	if err := ho.disk.settle(); err != nil {
		w.check.violation("restore of the counter of h%d: %v", ho.i, err)
		return
	}
	before := w.check.snapshot(ho)
	g, err := snapid.OpenContext(w.opCtx(), ho.counter, ho.cfg.Name, w.options(ho)...)
	w.did(1)
	switch {
	case err == nil:
		// Only if another defence raised it first (a form history
		// raising past ids of another stride): never issued from below.
		if v, rerr := snapid.ReadCounter(ho.counter); rerr != nil || v < r.Floor {
			w.check.violation("h%d opened its counter restored to %d, below the %d its record saw it reach (now %d, %v)", ho.i, old, r.Floor, v, rerr)
		}
		_ = g.Close()
	case errors.Is(err, snapid.ErrRolledBack):
		w.reached["rolled-back-refused"]++
		w.check.unchanged(ho, before, fmt.Sprintf("a rolled-back counter refused (%v)", err))
	}
	ho.disk.fault.disarm() // the operator's raise lands: a fault here would only leave the refusal
	if _, err := snapid.Init(ho.counter, r.Mark+1, w.options(ho)...); err != nil && !errors.Is(err, snapid.ErrLowered) {
		w.check.violation("raising the restored counter of h%d past the record's mark: %v", ho.i, err)
	}
}

// hostRecord is ho's record of its name (ok false if there is none or it
// cannot be read).
func hostRecord(ho *host) (hoststate.Record, bool) {
	p, err := hoststate.OpenPlace(ho.bindings, hoststate.PlaceOptions{})
	if err != nil {
		return hoststate.Record{}, false
	}
	defer p.Close()
	r, ok, err := p.Read(ho.cfg.Name)
	return r, ok && err == nil
}

// restoreLive puts ho's counter back in place from the copy (same file,
// so running processes keep it open): what a backup tool restoring over a
// live host does. The running processes must notice and never repeat; a
// process that starts later is covered by the registry's mark. Without a
// registry only the running process can tell (a documented limit), so
// standalone hosts are left out.
//
// With leases, the host's sequence lease files are put back instead, in
// place (an earlier position, or an earlier lease the registry has moved
// on from): processes that saw a later position raise it back, one that
// opens the sequence later finds the file is not the host's lease the
// registry records and drops it (a gap).
func (w *world) restoreLive(ho *host, leases bool) {
	if ho.backup == nil || !w.running(ho) || leases && !ho.cfg.Registry {
		return
	}
	if leases {
		for p, b := range ho.backup {
			// The lease files alone (with their floors, only what each
			// process saw raises them: the sequence tests'); their floors
			// raise them for every process.
			if strings.HasPrefix(p, ho.counter+".seq.") && !strings.HasSuffix(p, ".floor") && !strings.HasSuffix(p, ".refill") {
				if now, err := os.ReadFile(p); err != nil || bytes.Equal(now, b) {
					continue // gone, or the same: nothing restored
				}
				if err := writeInPlace(p, b); err != nil {
					w.check.violation("restore of a lease file in place on h%d: %v", ho.i, err)
				}
				w.faulted()
				w.reached["sequence lease files restored in place while in use"]++
			}
		}
		return
	}
	witness := -1
	if !ho.cfg.Registry {
		// Without a registry a counter restored below the host's
		// record's floor is raised to its mark by the next update of any
		// running process, and refused to every Open meanwhile. One
		// restored less than a step back is raised only by a process that
		// saw the later value, and one that starts before that raise may
		// repeat (docs/guarantees.md): the history then restores a strict
		// host's counter under one process, which every number since the
		// copy went through, and that process takes the next number.
		below := false
		if old, err := snapid.DecodeCounter(ho.backup[ho.counter]); err == nil {
			r, ok := hostRecord(ho)
			below = ok && old < r.Floor
		}
		if witness = w.onlyWitness(ho); !below && (witness < 0 || ho.cfg.Block > 0) {
			return
		}
		if below {
			witness = -1
			w.reached["restored-below-floor"]++
		}
	}
	// The counter only: a whole directory (counter and mark together)
	// restored under running processes is not covered
	// (docs/guarantees.md): the mark's floor goes back with it.
	if b, ok := ho.backup[ho.counter]; ok {
		now, err := os.ReadFile(ho.counter)
		if err == nil && bytes.Equal(now, b) {
			return
		}
		if err := os.WriteFile(ho.counter, b, 0o600); err != nil {
			w.check.violation("restore in place on h%d: %v", ho.i, err)
		}
		w.faulted()
		if witness >= 0 {
			w.reached["counters restored in place under a standalone process"]++
			// The raise lands with the witness's next update, so no
			// disk fault is left armed for it; an update that fails all
			// the same (the counter used up) leaves the case the
			// guarantees leave out (a process started before the raise
			// repeats), and the counter is put back as it was.
			ho.disk.fault.disarm()
			if id, err := ho.procs[witness].UniqueIDContext(w.opCtx()); err == nil {
				w.did(1)
				w.check.issuedID(ho, witness, id)
			} else if now != nil {
				if err := os.WriteFile(ho.counter, now, 0o600); err != nil {
					w.check.violation("restore in place on h%d: %v", ho.i, err)
				}
			}
		}
	}
	ho.exempt = "its files were restored from a copy"
}

// onlyWitness returns the one process of ho that runs if no other handed
// out a number since the host's files were copied, else -1.
func (w *world) onlyWitness(ho *host) int {
	only := -1
	for p, g := range ho.procs {
		if g != nil {
			if only >= 0 {
				return -1
			}
			only = p
		}
	}
	if only < 0 {
		return -1
	}
	for g := range ho.issuers {
		if g != ho.procs[only] {
			return -1
		}
	}
	return only
}

// writeInPlace rewrites the file at p with b, keeping the file (its
// inode), if it exists.
func writeInPlace(p string, b []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return errors.Join(err, f.Close())
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
	before, err := snapid.Init(ho.counter, next, w.options(ho)...)
	if err != nil {
		return
	}
	w.did(1)
	if v, rerr := snapid.ReadCounter(ho.counter); rerr != nil || v < max(before, next-1) {
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
		_, err := snapid.Repair(ho.counter, next, w.options(ho)...)
		switch {
		case err == nil:
			w.check.violation("Repair of h%d with next %d (in use: %v) was accepted", ho.i, next, running)
		case !zero && !errors.Is(err, snapid.ErrInUse):
			w.check.violation("Repair of h%d in use failed with %v, want ErrInUse", ho.i, err)
		}
		w.did(1)
		w.check.unchanged(ho, before, fmt.Sprintf("refused Repair with next %d", next))
		return
	}
	if running {
		return // standalone processes may hold blocks above any floor the operator knows
	}
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
	if high == snapid.MaxNumber {
		return
	}
	if _, err := snapid.Repair(ho.counter, high+1, w.options(ho)...); err != nil {
		return
	}
	w.did(1)
	w.reached["counters repaired"]++
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
	recs, _ := p.All(func(n string) bool { return snapid.ValidateName(n) == nil })
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
