package registry

import (
	"context"
	"sync/atomic"
)

type resolvedKey struct{}

// NoteOutcomeResolved is for Registry implementations: a call whose
// outcome was unknown (a timeout, a lost reply) and was then resolved by a
// read calls it with the context it was given, so that the caller can
// count the call as resolved (a Generator's Stats do). Without a caller
// watching (WatchOutcome), it does nothing.
func NoteOutcomeResolved(ctx context.Context) {
	if p, ok := ctx.Value(resolvedKey{}).(*atomic.Bool); ok {
		p.Store(true)
	}
}

// WatchOutcome returns a context to make one registry call with, and a
// function that reports whether the registry resolved that call's outcome
// by a read (NoteOutcomeResolved).
func WatchOutcome(ctx context.Context) (context.Context, func() bool) {
	var resolved atomic.Bool
	return context.WithValue(ctx, resolvedKey{}, &resolved), resolved.Load
}
