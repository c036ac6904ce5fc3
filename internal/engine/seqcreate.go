package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/snapid/snapid/registry"
)

// CreateSequence creates the sequence name in reg with the numbers
// [start, max], or updates an existing one (see
// SequenceRegistry.CreateSequence): re-creating a sequence never lowers
// what it handed out. Everything is validated before anything is sent.
// A registry that does not keep sequences is ErrSequencesUnsupported.
func CreateSequence(ctx context.Context, reg registry.Registry, name string, start, max uint64) (registry.SequenceInfo, error) {
	if err := registry.CheckSequenceBounds(name, start, max); err != nil {
		return registry.SequenceInfo{}, err
	}
	sr, err := sequenceRegistry(reg)
	if err != nil {
		return registry.SequenceInfo{}, err
	}
	return sr.CreateSequence(ctx, name, start, max)
}

// CreateSequenceKeepMax is CreateSequence keeping an existing sequence's
// max (MaxSequence for a new one). With a registry that is not a
// SequenceMaxKeeper it reads the max first, and a max set between the read
// and the update is undone.
func CreateSequenceKeepMax(ctx context.Context, reg registry.Registry, name string, start uint64) (registry.SequenceInfo, error) {
	if err := registry.CheckSequenceBounds(name, start, registry.MaxSequence); err != nil {
		return registry.SequenceInfo{}, err
	}
	sr, err := sequenceRegistry(reg)
	if err != nil {
		return registry.SequenceInfo{}, err
	}
	if k, ok := sr.(registry.SequenceMaxKeeper); ok {
		return k.CreateSequenceKeepMax(ctx, name, start)
	}
	max := registry.MaxSequence
	switch st, err := sr.SequenceStatus(ctx, name); {
	case err == nil:
		max = st.Max
	case !errors.Is(err, ErrNoSequence):
		return registry.SequenceInfo{}, err
	}
	return sr.CreateSequence(ctx, name, start, max)
}

// sequenceRegistry returns reg as a SequenceRegistry.
func sequenceRegistry(reg registry.Registry) (registry.SequenceRegistry, error) {
	if reg == nil {
		return nil, fmt.Errorf("snapid: %w: no registry (open the Generator WithRegistry)", ErrSequencesUnsupported)
	}
	sr, ok := reg.(registry.SequenceRegistry)
	if !ok {
		return nil, fmt.Errorf("snapid: %w: %T does not implement registry.SequenceRegistry", ErrSequencesUnsupported, reg)
	}
	return sr, nil
}
