package clock

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Fake is a Clock that moves only when told (Advance, Set): its timers,
// tickers, sleeps and context deadlines fire as it passes their times, in
// time order. Waiters and BlockUntil let a test wait until the code under
// test is blocked on the clock before moving it, so that what happens
// does not depend on the scheduler. Safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	seq     uint64               // orders waiters due at the same time
	waiters map[*waiter]struct{} // armed timers, tickers, sleeps, deadlines
	blocked int                  // of them, timers, tickers and sleeps
	changed chan struct{}        // closed and replaced when waiters change
}

type waiter struct {
	at     time.Time
	seq    uint64
	period time.Duration // a ticker's; 0 for the others
	ch     chan time.Time
	fn     func() // a deadline's, instead of ch
}

var _ Clock = (*Fake)(nil)

// NewFake returns a Fake clock reading start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, waiters: map[*waiter]struct{}{}, changed: make(chan struct{})}
}

// Now returns the clock's time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Since returns Now().Sub(t).
func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

// Until returns t.Sub(Now()).
func (f *Fake) Until(t time.Time) time.Duration { return t.Sub(f.Now()) }

// Waiters returns how many timers, tickers and sleeps are armed on the
// clock (what goroutines wait on; context deadlines are Deadlines).
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.blocked
}

// Deadlines returns how many contexts made by WithTimeout and
// WithDeadline wait for the clock to reach their deadline.
func (f *Fake) Deadlines() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters) - f.blocked
}

// BlockUntil returns once at least n timers, tickers and sleeps are
// armed on the clock, or with an error once ctx ends (give it a bound of
// seconds: the code under test may be starved that long on a busy
// machine). Code that re-arms a timer only once it is back waiting makes
// BlockUntil a test's way to know it is idle.
func (f *Fake) BlockUntil(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		have, changed := f.blocked, f.changed
		f.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("clock: %d waiters armed, waited for %d: %w", have, n, context.Cause(ctx))
		}
	}
}

// Advance moves the clock d forward, firing what falls due on the way in
// time order (a ticker as often as its period fits; a tick its reader has
// not taken yet is dropped, as time.Ticker's are). A negative d sets the
// clock back, as a stepped system clock would: nothing fires.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.advanceLocked(d)
}

// AdvanceIdle is Advance unless a context waits on the clock for its
// deadline (a call in flight that the move could time out); it reports
// whether the clock moved. The check and the move are one step.
func (f *Fake) AdvanceIdle(d time.Duration) bool {
	f.mu.Lock()
	if len(f.waiters) > f.blocked {
		f.mu.Unlock()
		return false
	}
	f.advanceLocked(d)
	return true
}

// advanceLocked is Advance with f.mu held; it returns with f.mu released.
func (f *Fake) advanceLocked(d time.Duration) {
	target := f.now.Add(d)
	if d < 0 {
		f.now = target
		f.mu.Unlock()
		return
	}
	for {
		w := f.nextDue(target)
		if w == nil {
			break
		}
		f.now = w.at
		if w.period > 0 {
			w.at = w.at.Add(w.period)
			f.seq++
			w.seq = f.seq
		} else {
			f.remove(w)
		}
		if w.fn != nil {
			// A deadline: cancels a context, which may call back into
			// the clock (its CancelFunc): not under f.mu.
			f.mu.Unlock()
			w.fn()
			f.mu.Lock()
			continue
		}
		select {
		case w.ch <- f.now:
		default:
		}
	}
	f.now = target
	f.mu.Unlock()
}

// Set moves the clock to t (Advance(t.Sub(Now()))).
func (f *Fake) Set(t time.Time) {
	f.Advance(t.Sub(f.Now()))
}

// nextDue returns the earliest waiter due by target, or nil. f.mu held.
func (f *Fake) nextDue(target time.Time) *waiter {
	var due []*waiter
	for w := range f.waiters {
		if !w.at.After(target) {
			due = append(due, w)
		}
	}
	if len(due) == 0 {
		return nil
	}
	sort.Slice(due, func(i, j int) bool {
		if !due[i].at.Equal(due[j].at) {
			return due[i].at.Before(due[j].at)
		}
		return due[i].seq < due[j].seq
	})
	return due[0]
}

// add arms w, due d from now. f.mu held.
func (f *Fake) add(w *waiter, d time.Duration) {
	w.at = f.now.Add(d)
	f.seq++
	w.seq = f.seq
	f.waiters[w] = struct{}{}
	if w.fn == nil {
		f.blocked++
	}
	f.signal()
}

// remove disarms w, reporting whether it was armed. f.mu held.
func (f *Fake) remove(w *waiter) bool {
	if _, ok := f.waiters[w]; !ok {
		return false
	}
	delete(f.waiters, w)
	if w.fn == nil {
		f.blocked--
	}
	f.signal()
	return true
}

func (f *Fake) signal() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// NewTimer returns a Timer firing once the clock has moved d forward (at
// once if d <= 0).
func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, w: &waiter{ch: make(chan time.Time, 1)}}
	t.Reset(d)
	return t
}

type fakeTimer struct {
	f *Fake
	w *waiter
}

func (t *fakeTimer) C() <-chan time.Time { return t.w.ch }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.f.remove(t.w)
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	was := t.f.remove(t.w)
	select { // as time.Timer since Go 1.23: no stale value after Reset
	case <-t.w.ch:
	default:
	}
	if d <= 0 {
		t.w.ch <- t.f.now
		return was
	}
	t.f.add(t.w, d)
	return was
}

// NewTicker returns a Ticker ticking every d of the clock's time. It
// panics if d <= 0, as time.NewTicker does.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	t := &fakeTicker{f: f, w: &waiter{ch: make(chan time.Time, 1), period: d}}
	f.mu.Lock()
	f.add(t.w, d)
	f.mu.Unlock()
	return t
}

type fakeTicker struct {
	f *Fake
	w *waiter
}

func (t *fakeTicker) C() <-chan time.Time { return t.w.ch }

func (t *fakeTicker) Stop() {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.f.remove(t.w)
}

func (t *fakeTicker) Reset(d time.Duration) {
	if d <= 0 {
		panic("clock: non-positive interval for Ticker.Reset")
	}
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.f.remove(t.w)
	t.w.period = d
	t.f.add(t.w, d)
}

// Sleep returns once the clock has moved d forward (at once if d <= 0).
func (f *Fake) Sleep(d time.Duration) {
	if d <= 0 {
		return
	}
	<-f.NewTimer(d).C()
}

// WithTimeout returns WithDeadline(parent, Now()+d).
func (f *Fake) WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return f.WithDeadline(parent, f.Now().Add(d))
}

// WithDeadline returns a context whose Deadline is t (or parent's, if
// earlier) and that ends with context.DeadlineExceeded once the clock
// reaches t, or with its parent, or when the CancelFunc is called.
func (f *Fake) WithDeadline(parent context.Context, t time.Time) (context.Context, context.CancelFunc) {
	if d, ok := parent.Deadline(); ok && !d.After(t) {
		return context.WithCancel(parent) // the parent's deadline comes first
	}
	inner, cancel := context.WithCancelCause(parent)
	c := &deadlineCtx{Context: inner, deadline: t, done: make(chan struct{})}
	w := &waiter{fn: func() {
		if inner.Err() == nil {
			c.expired.Store(true)
			cancel(context.DeadlineExceeded)
			c.once.Do(func() { close(c.done) })
		}
	}}
	context.AfterFunc(inner, func() {
		f.mu.Lock()
		f.remove(w)
		f.mu.Unlock()
		c.once.Do(func() { close(c.done) })
	})
	f.mu.Lock()
	if !t.After(f.now) {
		f.mu.Unlock()
		w.fn()
	} else {
		f.add(w, t.Sub(f.now))
		f.mu.Unlock()
	}
	return c, func() {
		f.mu.Lock()
		f.remove(w)
		f.mu.Unlock()
		cancel(context.Canceled)
	}
}

// deadlineCtx is a context ending at a Fake clock's deadline. Its Done
// channel is its own, so that contexts derived from it take their error
// from its Err (DeadlineExceeded when the deadline passed).
type deadlineCtx struct {
	context.Context // a cancelCtx: its cause is DeadlineExceeded once expired
	deadline        time.Time
	expired         atomic.Bool
	done            chan struct{} // closed once the inner context is done
	once            sync.Once
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *deadlineCtx) Done() <-chan struct{}       { return c.done }

func (c *deadlineCtx) Err() error {
	select {
	case <-c.done:
	default:
		return nil
	}
	if c.expired.Load() {
		return context.DeadlineExceeded
	}
	return c.Context.Err()
}
