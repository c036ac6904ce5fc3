package sim

import (
	"os"
	"sync"
	"syscall"
)

// A hold: one process of a host stopped at a chosen registry call (its
// close's read of the name's row) while another process of the host
// opens, then let go: the scheduler decides, not the machine's, which of
// the two goes first at the host's gate. A freeze (freeze.go) stops a
// process at a call for good; a hold only delays it.
type hold struct {
	p       int    // the process held
	op      string // at its first call of this kind ("reg:get")
	hit     bool
	reached chan struct{} // closed when the process is held
	release chan struct{} // closed to let it go on
	once    sync.Once
}

// holdAt arms a hold of process p at its next call op on ho's disk and
// returns it; release it with let.
func (f *freezer) holdAt(p int, op string) *hold {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold = &hold{p: p, op: op, reached: make(chan struct{}), release: make(chan struct{})}
	return f.hold
}

// held stops the calling process (p, at call op) if a hold waits for it,
// until the hold is let go.
func (f *freezer) held(p int, op string) {
	f.mu.Lock()
	h := f.hold
	if h == nil || h.hit || h.p != p || h.op != op {
		f.mu.Unlock()
		return
	}
	h.hit = true
	f.mu.Unlock()
	close(h.reached)
	<-h.release
}

// let lets the held process go on (if it was held), and disarms the hold.
func (f *freezer) let(h *hold) {
	f.mu.Lock()
	if f.hold == h {
		f.hold = nil
	}
	f.mu.Unlock()
	h.once.Do(func() { close(h.release) })
}

// gateFree reports whether the host's gate (the counter's owner file,
// flocked by a process starting or closing) could be taken now: a
// process of the host opening would pass it. It takes and drops the
// lock, on a descriptor of its own.
func gateFree(counter string) bool {
	f, err := os.Open(counter + ".owner")
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return false
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return true
}
