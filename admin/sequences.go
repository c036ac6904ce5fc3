package admin

import (
	"context"

	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
)

// CreateSequence creates the sequence name in reg with the numbers [start,
// max], or updates an existing one (see SequenceRegistry.CreateSequence):
// re-creating a sequence never lowers what it handed out. Everything is
// validated before anything is sent. A registry that does not keep sequences
// is ErrSequencesUnsupported.
func CreateSequence(ctx context.Context, reg registry.Registry, name string, start, max uint64) (registry.SequenceInfo, error) {
	return engine.CreateSequence(ctx, reg, name, start, max)
}

// CreateSequenceKeepMax is CreateSequence keeping an existing sequence's max
// (MaxSequence for a new one). With a registry that is not a
// SequenceMaxKeeper it reads the max first, and a max set between the read
// and the update is undone.
func CreateSequenceKeepMax(ctx context.Context, reg registry.Registry, name string, start uint64) (registry.SequenceInfo, error) {
	return engine.CreateSequenceKeepMax(ctx, reg, name, start)
}
