package sim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/snapid/snapid"
)

// secondCounter opens a second counter file on ho (in a directory of its
// own on the host, with the host's bindings) under ho's name while the
// host's counter exists and is the one its name is bound to: one name,
// one counter per host, so the Open must be refused (ErrNameBound
// without a registry, changing nothing; with one, the registry's owner
// check).
func (w *world) secondCounter(ho *host) {
	if !w.running(ho) || ho.moved || ho.exempt != "" {
		return // the host's counter does not hold the name for sure
	}
	other := filepath.Join(ho.dir, "second", "counter")
	if err := os.MkdirAll(filepath.Dir(other), 0o700); err != nil {
		w.check.violation("second counter on h%d: %v", ho.i, err)
		return
	}
	if err := ho.disk.settle(); err != nil {
		w.check.violation("second counter on h%d: %v", ho.i, err)
		return
	}
	before := w.check.snapshot(ho)
	g, err := snapid.OpenContext(w.opCtx(), other, ho.cfg.Name, w.options(ho)...)
	w.did(1)
	if err == nil {
		w.check.violation("a second counter on h%d (%s) opened under %s while its counter %s exists", ho.i, other, ho.cfg.Name, ho.counter)
		_ = g.Close()
		return
	}
	w.reached["second-counter"]++
	if errors.Is(err, snapid.ErrNameBound) {
		// Refused before anything is created (a registry's refusal comes
		// after the new counter's files are made, as for any new host).
		w.check.unchanged(ho, before, fmt.Sprintf("a second counter refused (%v)", err))
	}
}

// renameCounter replaces ho's counter, while its processes run, by a copy
// of it renamed over it (what an editor or a restore tool writing a new
// file does): every process still holding the old file must notice
// (ErrReplaced) instead of going on with it, or a process that opens the
// new one would hand out its numbers again (without a registry; with
// one, the new process's claim raises its counter to the mark).
func (w *world) renameCounter(ho *host) {
	if !w.running(ho) {
		return
	}
	b, err := os.ReadFile(ho.counter)
	if err != nil {
		return
	}
	tmp := ho.counter + ".new"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		w.check.violation("rename over the counter of h%d: %v", ho.i, err)
		return
	}
	if err := os.Rename(tmp, ho.counter); err != nil {
		w.check.violation("rename over the counter of h%d: %v", ho.i, err)
		return
	}
	if err := ho.disk.settle(); err != nil {
		w.check.violation("rename over the counter of h%d: %v", ho.i, err)
	}
	w.faulted()
	w.reached["counter-renamed"]++
}

// changeForm closes every process of ho and opens p0 with another stride
// (striped ids) or node number (decimal ids, standalone): either Open
// refuses it (ErrStrideMismatch, ErrNumberMismatch) and changes nothing,
// or what the host hands out afterwards never equals, as a number, an id
// handed out before (checked by issuedID).
func (w *world) changeForm(ho *host) {
	switch {
	case ho.cfg.Form == snapid.FormatStriped:
		ho.altStride = !ho.altStride
	case ho.cfg.Form == snapid.FormatDecimal && !ho.cfg.Registry:
		ho.nodeShift = 50 - ho.nodeShift
	default:
		return
	}
	if _, err := os.Stat(ho.counter); err != nil || ho.released {
		// A host's first Open makes its files before the registry
		// tells the cluster's stride: a change is one of a form the
		// host had.
		if ho.cfg.Form == snapid.FormatStriped {
			ho.altStride = !ho.altStride
		} else {
			ho.nodeShift = 50 - ho.nodeShift
		}
		return
	}
	w.closeAll(ho)
	before := w.check.snapshot(ho)
	err := w.open(ho, 0)
	w.reached["stride-change"]++
	// The name's node number may change with it (now or at a later
	// Open, if this one failed on a fault).
	delete(w.check.numberOf, ho.cfg.Name)
	if err == nil {
		w.did(1)
		return
	}
	if errors.Is(err, snapid.ErrStrideMismatch) || errors.Is(err, snapid.ErrNumberMismatch) {
		w.check.unchanged(ho, before, fmt.Sprintf("an Open with another form refused (%v)", err))
	}
	// Refused, or failed on a fault before it could tell: the operator
	// goes back to the form the host had.
	if ho.cfg.Form == snapid.FormatStriped {
		ho.altStride = !ho.altStride
	} else {
		ho.nodeShift = 50 - ho.nodeShift
	}
}
