package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/hoststate"

	"github.com/snapid/snapid/internal/engine"
)

// An operator's copies of a host's files put back: restored while its
// processes are stopped, or in place under them, and the file-tree
// helpers the copies, clones and moves use.

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
	old, err := admin.DecodeCounter(b)
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
	g, err := engine.OpenContext(w.opCtx(), ho.counter, ho.cfg.Name, w.options(ho)...)
	w.did(1)
	switch {
	case err == nil:
		// Only if another defence raised it first (a form history
		// raising past ids of another stride): never issued from below.
		if v, rerr := admin.ReadCounter(ho.counter); rerr != nil || v < r.Floor {
			w.check.violation("h%d opened its counter restored to %d, below the %d its record saw it reach (now %d, %v)", ho.i, old, r.Floor, v, rerr)
		}
		_ = g.Close()
	case errors.Is(err, engine.ErrRolledBack):
		w.reached["rolled-back-refused"]++
		w.check.unchanged(ho, before, fmt.Sprintf("a rolled-back counter refused (%v)", err))
	}
	ho.disk.fault.disarm() // the operator's raise lands: a fault here would only leave the refusal
	if _, err := admin.Init(ho.counter, r.Mark+1, w.options(ho)...); err != nil && !errors.Is(err, admin.ErrLowered) {
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
	put, ok := ho.backup[ho.counter] // what is put back: the copy's counter
	if !ok {
		return
	}
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
		if old, err := admin.DecodeCounter(ho.backup[ho.counter]); err == nil {
			r, ok := hostRecord(ho)
			below = ok && old < r.Floor
			if below && w.rng.IntN(2) == 0 {
				// Put back exactly one below the floor: the edge of the
				// per-update check (the floor itself was handed out).
				b := admin.EncodeCounter(r.Floor - 1)
				put = b[:]
				w.reached["restored-one-below-floor"]++
			}
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
	if w.putBack(ho, put, witness) {
		ho.exempt = "its files were restored from a copy"
	}
}

// putBack writes put over ho's counter under its running processes; the
// witness, if any (≥ 0), then takes the next number. It reports whether
// the counter changed.
func (w *world) putBack(ho *host, put []byte, witness int) bool {
	now, err := os.ReadFile(ho.counter)
	if err == nil && bytes.Equal(now, put) {
		return false
	}
	if err := os.WriteFile(ho.counter, put, 0o600); err != nil {
		w.check.violation("restore in place on h%d: %v", ho.i, err)
	}
	w.faulted()
	if witness < 0 {
		return true
	}
	w.reached["counters restored in place under a standalone process"]++
	// The raise lands with the witness's next update, so no disk fault
	// is left armed for it; an update that fails all the same (the
	// counter used up) leaves the case the guarantees leave out (a
	// process started before the raise repeats), and the counter is put
	// back as it was.
	ho.disk.fault.disarm()
	if id, err := ho.procs[witness].UniqueIDContext(w.opCtx()); err == nil {
		w.did(1)
		w.check.issuedID(ho, witness, id)
	} else if now != nil {
		if err := os.WriteFile(ho.counter, now, 0o600); err != nil {
			w.check.violation("restore in place on h%d: %v", ho.i, err)
		}
	}
	return true
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
