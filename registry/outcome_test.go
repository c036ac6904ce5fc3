package registry_test

import (
	"context"
	"testing"

	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/assert"
)

// A registry's note that it resolved a call's outcome reaches the watcher
// of that call's context only; without a watcher it does nothing.
func TestWatchOutcome(t *testing.T) {
	t.Parallel()
	registry.NoteOutcomeResolved(context.Background()) // no watcher: nothing happens

	ctx, resolved := registry.WatchOutcome(context.Background())
	other, otherResolved := registry.WatchOutcome(context.Background())
	assert.False(t, resolved(), "nothing noted yet")

	type key struct{}
	registry.NoteOutcomeResolved(context.WithValue(ctx, key{}, 1)) // a context derived from the call's
	assert.True(t, resolved(), "the note made with the call's context")
	assert.False(t, otherResolved(), "another call's watcher sees nothing")
	registry.NoteOutcomeResolved(other)
	assert.True(t, otherResolved())
}
