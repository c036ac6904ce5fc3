package snapid

import "github.com/snapid/snapid/registry"

// The registry interface and its rows, defined in package registry (which
// registries implement without importing this package).
type (
	Registry          = registry.Registry
	NumberRegistry    = registry.NumberRegistry
	SequenceRegistry  = registry.SequenceRegistry
	SequenceMaxKeeper = registry.SequenceMaxKeeper
	Holder            = registry.Holder
	Claim             = registry.Claim
	SequenceInfo      = registry.SequenceInfo
	SequenceRange     = registry.SequenceRange
	SequenceLease     = registry.SequenceLease
	LeaseAdoption     = registry.LeaseAdoption
	SequenceStatus    = registry.SequenceStatus
	LeaseRequest      = registry.LeaseRequest
)

// Row states (see registry.Holder).
const (
	StateActive   = registry.StateActive
	StateReleased = registry.StateReleased
)

// MaxSequence is registry.MaxSequence.
const MaxSequence = registry.MaxSequence

// CheckSequenceBounds is registry.CheckSequenceBounds.
func CheckSequenceBounds(name string, start, max uint64) error {
	return registry.CheckSequenceBounds(name, start, max)
}

// CheckSequenceUpdate is registry.CheckSequenceUpdate.
func CheckSequenceUpdate(cur SequenceInfo, start, max uint64) error {
	return registry.CheckSequenceUpdate(cur, start, max)
}
