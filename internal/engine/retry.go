package engine

import (
	"time"
)

// withRetryWait replaces the waits between a Generator's retried registry
// calls (the simulator, whose time is not the wall clock's, makes them 0).
func withRetryWait(wait func(attempt int) time.Duration) Option {
	return func(o *options) error {
		o.reg.retryWait = wait
		return nil
	}
}
