// Package clock is the library's one seam for time: every reading of the
// time, every timer, ticker and sleep that decides behaviour, and every
// context deadline the library creates goes through a Clock, set per
// Generator (an unexported option of package snapid). Production uses
// Real; tests and the simulator use Fake (or their own Clock) so that no
// outcome depends on how busy the machine is.
//
// What is not routed through a Clock: the pauses of a loop polling a
// kernel lock held for microseconds by another process (a counter's flock,
// a heartbeat record's byte lock, statefile.Lock's back-off). Those pauses
// decide nothing by themselves; how long such a wait may last is decided
// by a deadline taken from the Clock (a context from WithTimeout, or a
// time compared with Now). Deadlines of contexts the caller passes in are
// the caller's: a Fake clock does not move them.
package clock

import (
	"context"
	"time"
)

// A Clock tells the time and waits. Implementations must be safe for
// concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Since returns Now().Sub(t).
	Since(t time.Time) time.Duration
	// Until returns t.Sub(Now()).
	Until(t time.Time) time.Duration
	// NewTimer returns a Timer firing once, d from Now.
	NewTimer(d time.Duration) Timer
	// NewTicker returns a Ticker firing every d (d > 0).
	NewTicker(d time.Duration) Ticker
	// Sleep returns once d has passed on the clock.
	Sleep(d time.Duration)
	// WithTimeout is context.WithTimeout on this clock: the context's
	// deadline is Now()+d and it ends with context.DeadlineExceeded when
	// the clock reaches it (or earlier, with its parent).
	WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc)
	// WithDeadline is context.WithDeadline on this clock.
	WithDeadline(parent context.Context, t time.Time) (context.Context, context.CancelFunc)
}

// A Timer is a time.Timer of a Clock.
type Timer interface {
	// C returns the channel the timer's time is sent on.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
	// Reset makes the timer fire d from now; it reports whether the
	// timer was active.
	Reset(d time.Duration) bool
}

// A Ticker is a time.Ticker of a Clock.
type Ticker interface {
	// C returns the channel the ticks are sent on (buffered by one:
	// ticks a slow reader misses are dropped, as time.Ticker's are).
	C() <-chan time.Time
	// Stop turns the ticker off.
	Stop()
	// Reset stops the ticker and makes it tick every d from now.
	Reset(d time.Duration)
}

// Real is the wall clock: package time.
type Real struct{}

var _ Clock = Real{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Since returns time.Since(t).
func (Real) Since(t time.Time) time.Duration { return time.Since(t) }

// Until returns time.Until(t).
func (Real) Until(t time.Time) time.Duration { return time.Until(t) }

// NewTimer returns time.NewTimer(d).
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// NewTicker returns time.NewTicker(d).
func (Real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

// Sleep is time.Sleep.
func (Real) Sleep(d time.Duration) { time.Sleep(d) }

// WithTimeout is context.WithTimeout.
func (Real) WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, d)
}

// WithDeadline is context.WithDeadline.
func (Real) WithDeadline(parent context.Context, t time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(parent, t)
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time   { return r.t.C }
func (r realTicker) Stop()                 { r.t.Stop() }
func (r realTicker) Reset(d time.Duration) { r.t.Reset(d) }

// OrReal returns c, or Real if c is nil.
func OrReal(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}
