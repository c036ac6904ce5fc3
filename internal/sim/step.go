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
	switch s.Kind {
	case KNext, KOpen, KClose, KSeqNext, KSeqOpen, KSeqCreate, KBackup, KBadInput, KClock, KMove, KFreeze:
	default:
		// What else a step does may rightly leave a gap in a strict
		// host's numbers (a death, a raise, a roll-back, a failure).
		for _, h := range w.hosts {
			h.dense = false
		}
	}
	switch s.Kind {
	case KOpen:
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
	case KNext:
		w.next(ho, s)
	case KClose:
		if ho.procs[s.Proc] != nil {
			w.did(1)
		}
		w.closeProc(ho, s.Proc)
	case KCrash:
		if ho.procs[s.Proc] != nil {
			w.faulted()
		}
		w.crash(ho, s.Proc)
	case KPowerCut:
		w.faulted()
		w.crashAll(ho)
		if err := ho.disk.powerCut(w.rng, s.Keep); err != nil {
			w.check.violation("power cut on h%d: %v", ho.i, err)
		}
		if ho.releaseUnsynced {
			// A failed Release's record may be lost with the cache:
			// the name is then the host's again, as the failure said.
			rec, ok := hostRecord(ho)
			ho.released = ok && rec.Released
			ho.releaseUnsynced = ho.released
		}
	case KRelease:
		if !ho.cfg.Registry {
			return
		}
		w.closeAll(ho)
		before := w.check.snapshot(ho)
		final, err := admin.Release(w.opCtx(), ho.counter, ho.cfg.Name, w.options(ho)...)
		if err == nil {
			w.did(1)
		}
		w.check.released(ho, final, err, before)
	case KForce:
		w.forceRelease(ho, s.N)
	case KTakeover:
		w.takeover(ho, s.N, s.DC)
	case KReclaim:
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
	case KBackup:
		w.backup(ho)
	case KRestore:
		w.restore(ho)
	case KRestoreLive:
		w.restoreLive(ho, s.Arg == "leases")
	case KClone:
		w.clone(ho, s.Keep, s.DC)
	case KCorrupt:
		if w.running(ho) {
			return
		}
		w.corrupt(ho, s.Arg)
	case KMove:
		w.move(ho)
	case KInit:
		w.initCounter(ho, s.N)
	case KRepair:
		w.repair(ho, s.Arg == "next-0")
	case KClock:
		w.moveClock(s)
	case KRegFault:
		w.reg.fault.arm(s.Arg, int(s.N), s.Applied)
	case KRegDown:
		if s.Arg == "holder" {
			w.holderDown(ho, s.Keep)
			return
		}
		if s.Keep && !w.down {
			w.faulted()
		}
		w.down = s.Keep
		w.reg0.setDown(s.Keep)
	case KCut:
		if s.Keep && !w.cut[s.DC] {
			w.faulted()
		}
		w.reg0.setCut(s.DC, s.Keep, s.Arg == "one-way")
		w.cut[s.DC] = s.Keep
	case KFreeze:
		w.freezeArm(ho, s)
	case KDiskFault:
		ho.disk.fault.arm(s.Arg, int(s.N), error(s.Errno))
	case KBadInput:
		w.badInput(ho, s)
	case KSeqNext:
		w.seqNext(ho, s)
	case KSeqCreate:
		w.seqCreate(s)
	case KSecond:
		w.secondCounter(ho)
	case KRename:
		w.renameCounter(ho)
	case KForm:
		w.changeForm(ho, s)
	case KCloseOpen:
		w.contract.setOff(true)
		w.parallel = true
		w.closeRacingOpen(ho, s)
		w.settle()
		w.parallel = false
		w.contract.setOff(false)
	case KJoin:
		w.joinRegistry(ho)
	case KCLI:
		w.snapctl(ho, s)
	case KSeqOpen:
		if ho.cfg.Registry && ho.procs[s.Proc] != nil && s.Seq < len(w.h.Sequences) && ho.seqs[s.Proc][s.Seq] == nil {
			if _, err := w.sequence(ho, s.Proc, s.Seq); err == nil {
				w.did(1)
			}
		}
	case KConcurrent:
		w.contract.setOff(true)
		w.parallel = true
		w.concurrent(ho, s)
		w.settle()
		w.parallel = false
		w.contract.setOff(false)
	case KStorm:
		w.contract.setOff(true)
		w.parallel = true
		w.storm(ho, s.Keep, s.DC)
		w.settle()
		w.parallel = false
		w.contract.setOff(false)
	}
}
