package sim

import (
	"errors"
	"fmt"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/engine"
)

// One step of a history run against the world: the dispatch from a
// step's kind to what it does to the hosts, their processes and the
// registries.

func (w *world) do(s Step) {
	ho, ok := w.hostOf(s)
	if !ok {
		return
	}
	if !keepsDense[s.Kind] {
		// What else a step does may rightly leave a gap in a strict
		// host's numbers (a death, a raise, a roll-back, a failure).
		for _, h := range w.hosts {
			h.dense = false
		}
	}
	if act := actions[s.Kind]; act != nil {
		act(w, ho, s)
	}
}

// keepsDense are the kinds of step after which a strict host's numbers
// must still be dense.
var keepsDense = map[Kind]bool{
	KNext: true, KOpen: true, KClose: true, KSeqNext: true, KSeqOpen: true, KSeqCreate: true,
	KBackup: true, KBadInput: true, KClock: true, KMove: true, KFreeze: true,
}

// actions is what each kind of step does.
var actions = map[Kind]func(w *world, ho *host, s Step){
	KOpen:        (*world).openStep,
	KNext:        (*world).next,
	KClose:       (*world).closeStep,
	KCrash:       (*world).crashStep,
	KPowerCut:    (*world).powerCutStep,
	KRelease:     (*world).releaseStep,
	KForce:       func(w *world, ho *host, s Step) { w.forceRelease(ho, s.N) },
	KTakeover:    func(w *world, ho *host, s Step) { w.takeover(ho, s.N, s.DC) },
	KReclaim:     (*world).reclaimStep,
	KBackup:      func(w *world, ho *host, _ Step) { w.backup(ho) },
	KRestore:     func(w *world, ho *host, _ Step) { w.restore(ho) },
	KRestoreLive: func(w *world, ho *host, s Step) { w.restoreLive(ho, s.Arg == "leases") },
	KClone:       func(w *world, ho *host, s Step) { w.clone(ho, s.Keep, s.DC) },
	KCorrupt: func(w *world, ho *host, s Step) {
		if !w.running(ho) {
			w.corrupt(ho, s.Arg)
		}
	},
	KMove:       func(w *world, ho *host, _ Step) { w.move(ho) },
	KInit:       func(w *world, ho *host, s Step) { w.initCounter(ho, s.N) },
	KRepair:     func(w *world, ho *host, s Step) { w.repair(ho, s.Arg == "next-0") },
	KClock:      func(w *world, _ *host, s Step) { w.moveClock(s) },
	KRegFault:   func(w *world, _ *host, s Step) { w.reg.fault.arm(s.Arg, int(s.N), s.Applied) },
	KRegDown:    (*world).regDownStep,
	KCut:        (*world).cutStep,
	KFreeze:     (*world).freezeArm,
	KDiskFault:  func(_ *world, ho *host, s Step) { ho.disk.fault.arm(s.Arg, int(s.N), error(s.Errno)) },
	KBadInput:   (*world).badInput,
	KSeqNext:    (*world).seqNext,
	KSeqCreate:  func(w *world, _ *host, s Step) { w.seqCreate(s) },
	KSecond:     func(w *world, ho *host, _ Step) { w.secondCounter(ho) },
	KRename:     func(w *world, ho *host, _ Step) { w.renameCounter(ho) },
	KForm:       (*world).changeForm,
	KCloseOpen:  func(w *world, ho *host, s Step) { w.inParallel(func() { w.closeRacingOpen(ho, s) }) },
	KJoin:       func(w *world, ho *host, _ Step) { w.joinRegistry(ho) },
	KCLI:        (*world).snapctl,
	KSeqOpen:    (*world).seqOpenStep,
	KConcurrent: func(w *world, ho *host, s Step) { w.inParallel(func() { w.concurrent(ho, s) }) },
	KStorm:      func(w *world, ho *host, s Step) { w.inParallel(func() { w.storm(ho, s.Keep, s.DC) }) },
}

// inParallel runs a step whose operations run side by side: the
// contract's order checks are off, and the step ends when every
// Generator has settled.
func (w *world) inParallel(run func()) {
	w.contract.setOff(true)
	w.parallel = true
	run()
	w.settle()
	w.parallel = false
	w.contract.setOff(false)
}

// openStep opens a process's Generator and checks what an Open refused
// left behind.
func (w *world) openStep(ho *host, s Step) {
	if ho.procs[s.Proc] != nil {
		return
	}
	before := w.check.snapshot(ho)
	err := w.open(ho, s.Proc)
	switch {
	case ho.released && err == nil:
		w.check.violation("h%d opened %s, which it released, without WithReclaim: a release is final", ho.i, ho.cfg.Name)
	case ho.released && !errors.Is(err, engine.ErrReleased):
		// An outage or a fault may come first.
	case ho.released:
		w.reached["released-reopened"]++
		w.check.unchanged(ho, before, "an Open refused on a released name")
	case ho.damaged && err == nil && len(before.files[ho.counter]) != 8:
		// (A Repair that failed late may have put a good counter
		// in place: only a file of another size than a counter's
		// is damaged for sure.)
		w.check.violation("h%d opened on a damaged counter (%s)", ho.i, ho.damage)
	case refusedAsInput(err):
		// A file found damaged, or a name the counter does not serve,
		// is refused before anything is changed, on disk or in the
		// registry.
		w.check.unchanged(ho, before, fmt.Sprintf("an Open refused (%v)", err))
	}
	if err != nil {
		ho.dense = false
	} else {
		w.did(1)
	}
}

func (w *world) closeStep(ho *host, s Step) {
	if ho.procs[s.Proc] != nil {
		w.did(1)
	}
	w.closeProc(ho, s.Proc)
}

func (w *world) crashStep(ho *host, s Step) {
	if ho.procs[s.Proc] != nil {
		w.faulted()
	}
	w.crash(ho, s.Proc)
}

func (w *world) powerCutStep(ho *host, s Step) {
	w.faulted()
	w.crashAll(ho)
	if err := ho.disk.powerCut(w.rng, s.Keep); err != nil {
		w.check.violation("power cut on h%d: %v", ho.i, err)
	}
	w.afterCut(ho)
}

// afterCut follows a power cut of ho (a step of its own, or one inside an
// operation): a failed Release's record may be lost with the cache, and
// the name is then the host's again, as the failure said.
func (w *world) afterCut(ho *host) {
	if ho.releaseUnsynced {
		rec, ok := hostRecord(ho)
		ho.released = ok && rec.Released
		ho.releaseUnsynced = ho.released
	}
}

func (w *world) releaseStep(ho *host, _ Step) {
	if !ho.cfg.Registry {
		return
	}
	w.closeAll(ho)
	before := w.check.snapshot(ho)
	final, err := admin.Release(w.opCtx(), w.regs[ho.cfg.DC], ho.counter, ho.cfg.Name, w.options(ho)...)
	if err == nil {
		w.did(1)
	}
	w.check.released(ho, final, err, before)
}

func (w *world) reclaimStep(ho *host, s Step) {
	if !ho.cfg.Registry || w.running(ho) {
		return
	}
	if err := w.open(ho, s.Proc, engine.WithReclaim()); err == nil {
		ho.released = false
		ho.releaseUnsynced = false
		w.did(1)
	} else {
		w.reclaimFailed(ho)
	}
}

func (w *world) regDownStep(ho *host, s Step) {
	if s.Arg == "holder" {
		w.holderDown(ho, s.Keep)
		return
	}
	if s.Keep && !w.down {
		w.faulted()
	}
	w.down = s.Keep
	w.reg0.setDown(s.Keep)
}

func (w *world) cutStep(_ *host, s Step) {
	if s.Arg == argLoseSeqs {
		w.loseSeqs(s)
		return
	}
	if s.Keep && !w.cut[s.DC] {
		w.faulted()
	}
	w.reg0.setCut(s.DC, s.Keep, s.Arg == "one-way")
	w.cut[s.DC] = s.Keep
}

func (w *world) seqOpenStep(ho *host, s Step) {
	if ho.cfg.Registry && ho.procs[s.Proc] != nil && s.Seq < len(w.h.Sequences) && ho.seqs[s.Proc][s.Seq] == nil {
		if _, err := w.sequence(ho, s.Proc, s.Seq); err == nil {
			w.did(1)
		}
	}
}
