package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/seam"
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
// (striped ids; for a registered host, once the registry records the
// cluster's, and on the host's very first Open too) or node number
// (decimal ids, standalone): either Open
// refuses it (ErrStrideMismatch, ErrNumberMismatch) and changes nothing,
// or what the host hands out afterwards never equals, as a number, an id
// handed out before (checked by issuedID). A registered host's Open with
// another stride than the cluster's must be refused.
func (w *world) changeForm(ho *host) {
	first := false // a registered host's very first Open, with another stride than the cluster's
	switch {
	case ho.cfg.Registry && ho.cfg.Form == snapid.FormatStriped:
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
	case ho.cfg.Form == snapid.FormatStriped:
		ho.altStride = !ho.altStride
	case ho.cfg.Form == snapid.FormatDecimal:
		ho.nodeShift = 50 - ho.nodeShift
	default:
		return
	}
	if _, err := os.Stat(ho.counter); !first && (err != nil || !ho.opened || ho.released) {
		// Standalone, a change is one of a form the host had (an Open
		// of it succeeded).
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
	switch {
	case err == nil && ho.cfg.Registry:
		w.check.violation("h%d opened with stride %d while the cluster's is %d", ho.i, simStride2, simStride)
	case err == nil:
		w.did(1)
		return
	case errors.Is(err, snapid.ErrStrideMismatch) || errors.Is(err, snapid.ErrNumberMismatch):
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

// closeRacingOpen closes process s.Proc of ho while the host's next
// process opens, at the same moment (the host's gate and its presence
// lock decide which goes first), then the new process takes s.N numbers.
func (w *world) closeRacingOpen(ho *host, s Step) {
	p, q := s.Proc, (s.Proc+1)%3
	g := ho.procs[p]
	if g == nil || ho.procs[q] != nil || ho.released {
		return
	}
	sqs := ho.seqs[p]
	ho.procs[p], ho.seqs[p] = nil, nil
	opts := w.options(ho)
	var opened *snapid.Generator
	var wg sync.WaitGroup
	wg.Go(func() {
		failed := false
		for _, sq := range sqs {
			if sq.Close() != nil {
				failed = true
			}
		}
		if g.Close() != nil || failed {
			_ = seam.Crash(g)
		}
	})
	wg.Go(func() {
		if ng, err := snapid.OpenContext(context.Background(), ho.counter, ho.cfg.Name, opts...); err == nil {
			opened = ng
		}
	})
	wg.Wait()
	w.did(1)
	w.reached["close-racing-open"]++
	if opened == nil {
		return
	}
	ho.procs[q] = opened
	w.did(1)
	w.settle()
	if first, err := opened.NextNContext(context.Background(), s.N); err == nil {
		w.did(int(s.N))
		w.check.issued(ho, q, ho.cfg.Name, first, s.N)
	}
}

// joinRegistry stops a standalone host (ids in the name form) and has its
// processes claim its name in the registry from then on, p0 at once:
// every number the host handed out standalone stays below what it, or a
// host that takes the name over later, hands out afterwards (the
// registry's mark starts above the counter).
func (w *world) joinRegistry(ho *host) {
	if ho.cfg.Registry || ho.cfg.Form != snapid.FormatName {
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
		if o.cfg.Registry && o.cfg.Form == snapid.FormatStriped && o.opened && !o.altStride {
			return true
		}
	}
	return false
}
