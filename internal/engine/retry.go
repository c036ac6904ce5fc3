package engine

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/snapid/snapid/internal/clock"
	"github.com/snapid/snapid/registry"
)

// Retries of the registry calls a start-up needs: the claim, the first
// extension of the mark, the node number, a sequence's lease. When a whole
// data centre starts at once (after a power loss), these calls meet on the
// registry: Paxos rounds on one partition contend, time out and come back
// as unknown outcomes (which the registry resolves, or reports as
// ErrRegistry when it cannot), and a node may be overloaded for a while.
// None of that is the caller's fault, and every one of these calls is safe
// to send again: a claim by the same owner refreshes its own row, a number
// is given once per name, a lease whose answer was lost is found moved and
// left as a gap. So a call that fails with ErrRegistry, and with nothing
// that says the answer was definite, is sent again after a wait that
// doubles from retryBase up to retryCap, with full jitter (a random wait
// between zero and the bound, so that hosts that failed together do not
// come back together), at most retryAttempts times, and never past the
// caller's deadline: a caller with time left does not see an error
// because others started at the same moment.
const (
	retryBase     = 10 * time.Millisecond
	retryCap      = time.Second
	retryAttempts = 10
)

// definite are the answers a registry gives on purpose: they are not
// retried, even when they wrap ErrRegistry.
var definite = []error{ErrNameTaken, ErrProbableClone, registry.ErrMarkMoved, registry.ErrNotRegistered, registry.ErrLeaseMoved,
	ErrNoSequence, registry.ErrCorruptSequence, ErrInvalidSequence, ErrExhausted, ErrSequenceShort, ErrInvalidOption,
	ErrNumberMismatch, ErrStrideMismatch}

// definiteError marks an error that wraps ErrRegistry but is an answer,
// not a failure: sending the call again would get it again.
type definiteError struct{ error }

func (e definiteError) Unwrap() error { return e.error }

// transient reports whether err is a registry failure that may go away if
// the call is sent again.
func transient(err error) bool {
	var d definiteError
	if err == nil || !errors.Is(err, ErrRegistry) || errors.As(err, &d) {
		return false
	}
	for _, d := range definite {
		if errors.Is(err, d) {
			return false
		}
	}
	return !errors.Is(err, context.Canceled)
}

// retryBackoff is the wait before the attempt after attempt (0-based)
// failed, unless a Generator's registry options give another
// (withRetryWait).
func retryBackoff(attempt int) time.Duration {
	bound := min(retryCap, retryBase<<min(attempt, 20))
	return rand.N(bound + 1)
}

// retryRegistry runs call until it succeeds, fails in a way that is not
// transient, has run retryAttempts times, or ctx leaves no time for the
// wait before another attempt; it returns call's last error. Each call gets
// ctx as it is (the caller bounds each attempt if it must).
func retryRegistry(ctx context.Context, clk clock.Clock, log *slog.Logger, waitFor func(int) time.Duration, op string, call func(context.Context) error) error {
	var err error
	for attempt := range retryAttempts {
		if err = call(ctx); !transient(err) || attempt == retryAttempts-1 {
			return err
		}
		if !pauseBeforeRetry(ctx, clk, waitFor, attempt, log, "op", op, "err", err) {
			return err
		}
	}
	return err
}

// pauseBeforeRetry waits on clk before the attempt after attempt (0-based)
// failed, waitFor's time (retryBackoff's if nil), and reports whether it
// did: false when ctx ends first or its deadline leaves no room for the
// wait (the deadline read on clk: the contexts the library creates take
// theirs from it). args describe the failure for the debug log.
func pauseBeforeRetry(ctx context.Context, clk clock.Clock, waitFor func(int) time.Duration, attempt int, log *slog.Logger, args ...any) bool {
	if waitFor == nil {
		waitFor = retryBackoff
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

// withRetryWait replaces the waits between a Generator's retried registry
// calls (the simulator, whose time is not the wall clock's, makes them 0).
func withRetryWait(wait func(attempt int) time.Duration) Option {
	return func(o *options) error {
		o.reg.retryWait = wait
		return nil
	}
}

// retry is retryRegistry with the reservation's logger and waits.
func (r *reservation) retry(ctx context.Context, op string, call func(context.Context) error) error {
	return retryRegistry(ctx, r.o.clock, r.log, r.o.retryWait, op, call)
}
