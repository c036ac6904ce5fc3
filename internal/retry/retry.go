// Package retry sends a registry call again. The registry calls a
// start-up needs are retried: the claim, the first
// extension of the mark, the node number, a sequence's lease. When a whole
// data centre starts at once (after a power loss), these calls meet on the
// registry: Paxos rounds on one partition contend, time out and come back
// as unknown outcomes (which the registry resolves, or reports as
// errs.ErrRegistry when it cannot), and a node may be overloaded for a while.
// None of that is the caller's fault, and every one of these calls is safe
// to send again: a claim by the same owner refreshes its own row, a number
// is given once per name, a lease whose answer was lost is found moved and
// left as a gap. So a call that fails with errs.ErrRegistry, and with nothing
// that says the answer was definite, is sent again after a wait that
// doubles from Base up to Cap, with full jitter (a random wait
// between zero and the bound, so that hosts that failed together do not
// come back together), at most Attempts times, and never past the
// caller's deadline: a caller with time left does not see an error
// because others started at the same moment.
package retry

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/snapid/snapid/internal/clock"
	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/registry"
)

// The waits between attempts, and how many.
const (
	Base     = 10 * time.Millisecond
	Cap      = time.Second
	Attempts = 10
)

// definite are the answers a registry gives on purpose: they are not
// retried, even when they wrap errs.ErrRegistry.
var definite = []error{errs.ErrNameTaken, errs.ErrProbableClone, registry.ErrMarkMoved, registry.ErrNotRegistered, registry.ErrLeaseMoved,
	errs.ErrNoSequence, registry.ErrCorruptSequence, errs.ErrInvalidSequence, errs.ErrExhausted, errs.ErrSequenceShort, errs.ErrInvalidOption,
	errs.ErrNumberMismatch, errs.ErrStrideMismatch}

// Definite marks an error that wraps errs.ErrRegistry but is an answer,
// not a failure: sending the call again would get it again.
type Definite struct{ Err error }

func (e Definite) Error() string { return e.Err.Error() }

func (e Definite) Unwrap() error { return e.Err }

// Transient reports whether err is a registry failure that may go away if
// the call is sent again.
func Transient(err error) bool {
	var d Definite
	if err == nil || !errors.Is(err, errs.ErrRegistry) || errors.As(err, &d) {
		return false
	}
	for _, d := range definite {
		if errors.Is(err, d) {
			return false
		}
	}
	return !errors.Is(err, context.Canceled)
}

// Backoff is the wait before the attempt after attempt (0-based)
// failed, unless a Generator's registry options give another
// (withRetryWait).
func Backoff(attempt int) time.Duration {
	bound := min(Cap, Base<<min(attempt, 20))
	return rand.N(bound + 1)
}

// Do runs call until it succeeds, fails in a way that is not
// Transient, has run Attempts times, or ctx leaves no time for the
// wait before another attempt; it returns call's last error. Each call gets
// ctx as it is (the caller bounds each attempt if it must).
func Do(ctx context.Context, clk clock.Clock, log *slog.Logger, waitFor func(int) time.Duration, op string, call func(context.Context) error) error {
	var err error
	for attempt := range Attempts {
		if err = call(ctx); !Transient(err) || attempt == Attempts-1 {
			return err
		}
		if !Pause(ctx, clk, waitFor, attempt, log, "op", op, "err", err) {
			return err
		}
	}
	return err
}

// Pause waits on clk before the attempt after attempt (0-based)
// failed, waitFor's time (Backoff's if nil), and reports whether it
// did: false when ctx ends first or its deadline leaves no room for the
// wait (the deadline read on clk: the contexts the library creates take
// theirs from it). args describe the failure for the debug log.
func Pause(ctx context.Context, clk clock.Clock, waitFor func(int) time.Duration, attempt int, log *slog.Logger, args ...any) bool {
	if waitFor == nil {
		waitFor = Backoff
	}
	wait := waitFor(attempt)
	if d, ok := ctx.Deadline(); ok && clk.Until(d) <= wait {
		return false
	}
	log.Debug("snapid: registry call failed; retrying", append(args, "attempt", attempt+1, "wait", wait)...)
	t := clk.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}
