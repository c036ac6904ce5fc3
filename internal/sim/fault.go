package sim

import "sync"

// armed is one fault a history armed on a disk or the registry: the
// after-th next operation of kind op ("" any kind) fires it, with v.
// A fault fires once; arming another replaces one that has not fired.
type armed[T any] struct {
	mu    sync.Mutex
	op    string
	after int
	v     T
	set   bool
	fired int // faults that fired
}

func (a *armed[T]) arm(op string, after int, v T) {
	a.mu.Lock()
	a.op, a.after, a.v, a.set = op, after, v, true
	a.mu.Unlock()
}

// disarm clears a fault that has not fired.
func (a *armed[T]) disarm() {
	a.mu.Lock()
	a.set = false
	a.mu.Unlock()
}

// hit reports whether the fault fires on this operation of kind op, and
// its value.
func (a *armed[T]) hit(op string) (T, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var zero T
	if !a.set || (a.op != "" && a.op != op) {
		return zero, false
	}
	if a.after > 0 {
		a.after--
		return zero, false
	}
	a.set = false
	a.fired++
	return a.v, true
}

func (a *armed[T]) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fired
}
