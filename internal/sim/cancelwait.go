package sim

import (
	"context"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/snapid/snapid/internal/engine"
)

// waitBackstop bounds how long the simulator waits for a call whose
// context ended: far above any scheduling delay, it only turns a call that
// ignores its context (a hang) into a violation instead of a stuck run.
const waitBackstop = 2 * time.Minute

// nextCancelledWaiting is a KNext whose context ends while the call may
// wait for the counter's lock, which an outsider (a descriptor of the
// simulator's own) holds meanwhile: the call must return, and either hand
// out numbers (served before it needed the lock) or fail having taken
// nothing; once the lock goes, the process issues as before.
func (w *world) nextCancelledWaiting(ho *host, s Step, g *engine.Generator) {
	f, err := os.Open(ho.counter)
	if err != nil {
		return
	}
	defer f.Close()
	if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return // a process of the host holds it now: nothing to wait for
	}
	before, _ := os.ReadFile(ho.counter)
	ctx, cancel := context.WithCancel(w.opCtx())
	type result struct {
		first uint64
		err   error
	}
	done := make(chan result, 1)
	one := s.N == 1 || ho.cfg.Form == engine.FormatDecimal // the decimal form has no NextN
	var id string
	go func() {
		if one {
			var err error
			id, err = g.UniqueIDContext(ctx)
			done <- result{0, err}
			return
		}
		first, err := g.NextNContext(ctx, s.N)
		done <- result{first, err}
	}()
	runtime.Gosched() // most often the call is waiting by now; either way is a valid history
	cancel()
	var r result
	select {
	case r = <-done:
	case <-time.After(waitBackstop):
		w.check.violation("h%d/p%d: a NextNContext whose context ended while it waited for the counter's lock did not return", ho.i, s.Proc)
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		r = <-done
	}
	if r.err != nil {
		// Read while the lock is still held: once it goes, the host's
		// other processes may rightly move the counter.
		w.check.tookNothing(ho, before)
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	w.reached["cancel-while-waiting"]++
	switch {
	case r.err == nil && one:
		w.did(1)
		w.check.issuedID(ho, s.Proc, id)
		return
	case r.err == nil:
		w.did(int(s.N))
		w.check.issued(ho, s.Proc, ho.cfg.Name, r.first, s.N)
		return
	}
	ho.dense = false
}
