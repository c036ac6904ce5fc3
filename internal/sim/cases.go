package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/engine"
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
	g, err := engine.OpenContext(w.opCtx(), other, ho.cfg.Name, w.options(ho)...)
	w.did(1)
	if err == nil {
		w.check.violation("a second counter on h%d (%s) opened under %s while its counter %s exists", ho.i, other, ho.cfg.Name, ho.counter)
		_ = g.Close()
		return
	}
	w.reached["second-counter"]++
	if errors.Is(err, engine.ErrNameBound) {
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
	// A copy at the old value is another file under the name: a new
	// process must be refused (a counter made again, re-pointed or
	// swapped, never issued from). Then the operator does as the refusal
	// says and raises the copy past the host's record of how far the
	// counter may have gone, after which it takes the name over.
	v, derr := admin.DecodeCounter(b)
	rec, recorded := hostRecord(ho)
	m := rec.Mark
	if derr == nil && recorded && m > v {
		if err := writeReplacement(ho.counter, b); err != nil {
			w.check.violation("rename over the counter of h%d: %v", ho.i, err)
			return
		}
		before := w.check.snapshot(ho)
		g, err := engine.OpenContext(w.opCtx(), ho.counter, ho.cfg.Name, w.options(ho)...)
		w.did(1)
		switch {
		case err == nil:
			w.check.violation("h%d opened a replacement of its counter at the old value %d below the record's mark %d", ho.i, v, m)
			_ = g.Close()
		case errors.Is(err, engine.ErrNameBound):
			w.reached["replaced-counter-refused"]++
			w.check.unchanged(ho, before, fmt.Sprintf("a replaced counter refused (%v)", err))
		}
		w.faulted()
		w.reached["counter-renamed"]++
		if ho.disk.freeze.hasFired() {
			// The power went inside the Open: the operator raises the
			// replacement once the cut is applied (raiseReplacement).
			ho.raisePending = true
			return
		}
		w.raiseReplacement(ho)
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
// (striped ids; for a registered host, once the registry records the
// cluster's, and on the host's very first Open too) or node number
// (decimal ids, standalone): either Open
// refuses it (ErrStrideMismatch, ErrNumberMismatch) and changes nothing,
// or what the host hands out afterwards never equals, as a number, an id
// handed out before (checked by issuedID). A registered host's Open with
// another stride than the cluster's must be refused.
func (w *world) changeForm(ho *host, s Step) {
	if s.Arg == "live" {
		w.changeFormLive(ho)
		return
	}
	first := false // a registered host's very first Open, with another stride than the cluster's
	switch {
	case ho.cfg.Registry && ho.cfg.Form == engine.FormatStriped:
		// The cluster's stride is the registry's once a registered host
		// opened with it: another one is refused, before anything is
		// made, even on the host's first Open.
		if !w.strideRecorded() || ho.released || ho.joinPending {
			return
		}
		_, err := os.Stat(ho.counter)
		first = err != nil && !ho.opened
		ho.altStride = !ho.altStride
	case ho.cfg.Registry:
		return // the registry gives the node number
	case ho.cfg.Form == engine.FormatStriped:
		ho.altStride = !ho.altStride
	case ho.cfg.Form == engine.FormatDecimal:
		ho.nodeShift = 50 - ho.nodeShift
	default:
		return
	}
	if _, err := os.Stat(ho.counter); !first && (err != nil || !ho.opened || ho.released) {
		// Standalone, a change is one of a form the host had (an Open
		// of it succeeded).
		if ho.cfg.Form == engine.FormatStriped {
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
	switch {
	case err == nil && ho.cfg.Registry:
		w.check.violation("h%d opened with stride %d while the cluster's is %d", ho.i, simStride2, simStride)
	case err == nil:
		w.did(1)
		if ho.cfg.Form == engine.FormatStriped {
			ho.procFloor[0] = ho.maxStriped
		}
		return
	case errors.Is(err, engine.ErrStrideMismatch) || errors.Is(err, engine.ErrNumberMismatch):
		w.check.unchanged(ho, before, fmt.Sprintf("an Open with another form refused (%v)", err))
	}
	// Refused, or failed on a fault before it could tell: the operator
	// goes back to the form the host had.
	if ho.cfg.Form == engine.FormatStriped {
		ho.altStride = !ho.altStride
	} else {
		ho.nodeShift = 50 - ho.nodeShift
	}
}

// changeFormLive closes p0 of a standalone host with striped ids and
// opens it again with the other stride, the host's claim of its stride
// removed first (as an operator changing the host's stride does), while
// the host's other processes run on with theirs: the new Generator raises
// the counter above every id of the form it leaves, and from then on a
// process of the form left hands out no number above the counter's value
// when it was left (it may still hand out the numbers it had reserved
// below it); checked by issued (formLeftAt).
func (w *world) changeFormLive(ho *host) {
	if ho.cfg.Registry || ho.cfg.Form != engine.FormatStriped || ho.procs[0] == nil {
		return
	}
	others := false
	for p := 1; p < len(ho.procs); p++ {
		others = others || ho.procs[p] != nil
	}
	if !others {
		return
	}
	w.closeProc(ho, 0)
	cur, ok := readCounter(ho.counter)
	if !ok {
		return
	}
	old := ho.stride()
	ho.altStride = !ho.altStride
	// The host's claim refuses another stride; the operator removes it.
	// The form history in the host's record of the name is what keeps
	// the two strides' ids apart then.
	if err := os.Remove(filepath.Join(ho.bindings, "#stride")); err != nil && !errors.Is(err, os.ErrNotExist) {
		w.check.violation("removing the stride claim of h%d: %v", ho.i, err)
		return
	}
	if err := w.open(ho, 0); err != nil {
		// The operator goes back to the host's stride: the claim the
		// failed Open may have made is removed too.
		ho.altStride = !ho.altStride
		if err := os.Remove(filepath.Join(ho.bindings, "#stride")); err != nil && !errors.Is(err, os.ErrNotExist) {
			w.check.violation("removing the stride claim of h%d: %v", ho.i, err)
		}
		return
	}
	if ho.formLeftAt == nil {
		ho.formLeftAt = map[uint64]uint64{}
	}
	ho.formLeftAt[old] = cur
	ho.procFloor[0] = ho.maxStriped
	w.did(1)
	w.reached["stride-change-while-running"]++
}

// closeRacingOpen closes process s.Proc of ho while the host's next
// process opens, at the same moment (the host's gate and its presence
// lock decide which goes first), then the new process takes s.N numbers.
// With s.Arg "held", the closing process is held at its close's read of
// the name's row (holdClose).
func (w *world) closeRacingOpen(ho *host, s Step) {
	p, q := s.Proc, (s.Proc+1)%3
	g := ho.procs[p]
	if g == nil || ho.procs[q] != nil || ho.released {
		return
	}
	sqs := ho.seqs[p]
	ho.procs[p], ho.seqs[p] = nil, nil
	opts := w.options(ho)
	var opened *engine.Generator
	var wg sync.WaitGroup
	var h *hold
	if s.Arg == "held" && ho.cfg.Registry {
		h = ho.disk.freeze.holdAt(p, "reg:get")
	}
	closed := make(chan struct{})
	wg.Go(func() {
		defer close(closed)
		failed := false
		for _, sq := range sqs {
			if sq.Close() != nil {
				failed = true
			}
		}
		if g.Close() != nil || failed {
			_ = engine.Crash(g)
		}
	})
	open := func() {
		if ng, err := engine.OpenContext(context.Background(), ho.counter, ho.cfg.Name, opts...); err == nil {
			opened = ng
		}
	}
	if h == nil {
		wg.Go(open)
	} else {
		w.holdClose(ho, h, closed, open)
	}
	wg.Wait()
	w.did(1)
	w.reached["close-racing-open"]++
	if opened == nil {
		return
	}
	ho.procs[q] = opened
	ho.procStride[q] = ho.stride()
	ho.exts[q] = nil
	w.did(1)
	w.settle()
	if first, err := opened.NextNContext(w.opCtx(), s.N); err == nil {
		w.did(int(s.N))
		w.check.issued(ho, q, ho.cfg.Name, first, s.N)
	}
}

// holdClose runs open while the closing process is held at its close's
// read of the name's row (it decided it is the host's last process, and
// is about to set the name's mark back), if the host's gate lets an
// opening process in at that instant; the hold is let go once open
// returns or, if open waits for the closing process, after holdWait of
// wall time. With the gate held (as it must be), open runs once the close
// is done: it would wait for the gate until then.
func (w *world) holdClose(ho *host, h *hold, closed <-chan struct{}, open func()) {
	select {
	case <-h.reached:
	case <-closed:
		ho.disk.freeze.let(h) // not the host's last process, or a fault: never held
		open()
		return
	}
	w.reached["close-held"]++
	if !gateFree(ho.counter) {
		ho.disk.freeze.let(h)
		<-closed
		open()
		return
	}
	w.reached["close-held-gate-free"]++
	done := make(chan struct{})
	go func() {
		defer close(done)
		open()
	}()
	select {
	case <-done:
	case <-time.After(holdWait):
	}
	ho.disk.freeze.let(h)
	<-done
}

// holdWait is how long, on the wall clock, a process opening while
// another is held closing is given before the hold is let go (it makes
// no call the simulator sees while it waits for a lock).
const holdWait = 100 * time.Millisecond

// joinRegistry stops a standalone host (ids in the name form) and has its
// processes claim its name in the registry from then on, p0 at once:
// every number the host handed out standalone stays below what it, or a
// host that takes the name over later, hands out afterwards (the
// registry's mark starts above the counter).
func (w *world) joinRegistry(ho *host) {
	if ho.cfg.Registry || ho.cfg.Form != engine.FormatName {
		return
	}
	w.closeAll(ho)
	ho.cfg.Registry = true
	// Until one of its processes has claimed the name, no other host
	// is given it: a name whose standalone numbers the registry never
	// learnt is not covered.
	ho.joinPending = true
	if err := w.open(ho, 0); err != nil {
		return
	}
	w.did(1)
	w.reached["standalone hosts joining the registry"]++
}

// strideRecorded reports whether a registered host opened with the
// cluster's stride (simStride), which the registry then records.
func (w *world) strideRecorded() bool {
	for _, o := range w.hosts {
		if o.cfg.Registry && o.cfg.Form == engine.FormatStriped && o.opened && !o.altStride {
			return true
		}
	}
	return false
}

// writeReplacement puts a new file holding b at p by renaming it over p.
// raiseReplacement is the operator doing as a replaced counter's refusal
// says: the replacement raised to the host's record's mark, after which
// it takes the name over.
func (w *world) raiseReplacement(ho *host) {
	ho.raisePending = false
	rec, ok := hostRecord(ho)
	if !ok {
		return
	}
	b, err := os.ReadFile(ho.counter)
	if err != nil {
		return
	}
	if v, err := admin.DecodeCounter(b); err != nil || v >= rec.Mark {
		return
	}
	e := admin.EncodeCounter(rec.Mark)
	if err := writeInPlace(ho.counter, e[:]); err != nil {
		w.check.violation("raise of the replaced counter of h%d: %v", ho.i, err)
	}
	if err := ho.disk.settle(); err != nil {
		w.check.violation("rename over the counter of h%d: %v", ho.i, err)
	}
}

func writeReplacement(p string, b []byte) error {
	tmp := p + ".new"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}
