package clock

import "time"

// Next returns when the earliest timer, ticker, sleep or context deadline
// armed on the clock falls due; ok is false if none is armed.
func (f *Fake) Next() (at time.Time, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for w := range f.waiters {
		if !ok || w.at.Before(at) {
			at, ok = w.at, true
		}
	}
	return at, ok
}

// AdvanceOne moves the clock forward to the earliest time, no later than
// target, at which something armed falls due and fires that one waiter
// alone (of several due at the same time, the one armed first); it
// reports whether one fired. With none due by target it moves the clock
// to target (never back) and reports false. A caller that waits after
// each firing until the woken code is idle again sees every firing in
// the same order on every run, whatever the scheduler does.
func (f *Fake) AdvanceOne(target time.Time) bool {
	f.mu.Lock()
	w := f.nextDue(target)
	if w == nil {
		if target.After(f.now) {
			f.now = target
		}
		f.mu.Unlock()
		return false
	}
	if w.at.After(f.now) {
		f.now = w.at
	}
	if w.period > 0 {
		w.at = w.at.Add(w.period)
		f.seq++
		w.seq = f.seq
	} else {
		f.remove(w)
	}
	if w.fn != nil {
		f.mu.Unlock()
		w.fn()
		return true
	}
	select {
	case w.ch <- f.now:
	default:
	}
	f.mu.Unlock()
	return true
}

// Jump moves the clock's reading by d (forward or back) and every armed
// timer, ticker, sleep and deadline with it, firing nothing: the wall
// clock stepped (by an operator, NTP, a suspended machine resuming) while
// timers, which run on the monotonic clock, keep their distance.
func (f *Fake) Jump(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	for w := range f.waiters {
		w.at = w.at.Add(d)
	}
	f.signal()
}
