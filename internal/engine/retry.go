package engine

import (
	"context"
	"time"

	"github.com/snapid/snapid/internal/retry"
)

// withRetryWait replaces the waits between a Generator's retried registry
// calls (the simulator, whose time is not the wall clock's, makes them 0).
func withRetryWait(wait func(attempt int) time.Duration) Option {
	return func(o *options) error {
		o.reg.retryWait = wait
		return nil
	}
}

// retry is retry.Do with the reservation's logger and waits.
func (r *reservation) retry(ctx context.Context, op string, call func(context.Context) error) error {
	return retry.Do(ctx, r.o.clock, r.log, r.o.retryWait, op, call)
}
