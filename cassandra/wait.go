package cassandra

import (
	"context"
	"time"
)

// waitFunc waits d, or until ctx ends (then it returns ctx's error). The
// Registry's waits between retries and attempts go through one (the
// Registry's wait field): the real one waits on a timer; a Registry over
// a cql.Backend (backend.go) waits with the Backend's Wait.
type waitFunc func(ctx context.Context, d time.Duration) error

// realWait waits d on a timer, or until ctx ends.
func realWait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// orReal is w, or realWait if w is nil.
func orReal(w waitFunc) waitFunc {
	if w == nil {
		return realWait
	}
	return w
}
