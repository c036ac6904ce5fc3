package registry

import (
	"context"
)

// MaxNodeNumber is the largest node number: numbers fit a signed 32-bit
// integer.
const MaxNodeNumber = 1<<31 - 1

// NumberRegistry is a Registry that gives every claimed name a node
// number, for the numeric id forms (see Format): a small positive integer
// (1 to MaxNodeNumber), unique across the cluster, stable across
// restarts, take-overs and releases (the number belongs to the name, and
// is never given to another name while ids carrying it may exist), and
// that records the cluster's stride for FormatStriped.
//
// The Cassandra registry and registrytest's in-memory one implement it;
// registrytest.TestNumberRegistry is its conformance suite. Open, with a
// registry that implements it, has the name's number assigned at the
// first claim and records it in the host's record of the name, so that
// later starts and the host's other processes need no extra round trip; a
// claim whose row shows another number than the record is refused
// (ErrNumberMismatch).
type NumberRegistry interface {
	Registry

	// AssignNumber returns name's node number, giving it the next free
	// one first if it has none, if owner holds the name active under
	// session (otherwise ErrNameTaken). Calling it again returns the same
	// number. An answer lost after the number was given is resolved by
	// reading, never guessed: the name never ends up with two numbers.
	AssignNumber(ctx context.Context, name, owner, session string) (uint64, error)

	// SetStride records stride (2 to MaxNodeNumber+1) as the cluster's
	// stride for FormatStriped if none is recorded yet, and returns the
	// stride recorded. A different stride recorded already is
	// ErrStrideMismatch, and nothing changes.
	SetStride(ctx context.Context, stride uint64) (uint64, error)

	// Stride returns the cluster's recorded stride, 0 if none is.
	Stride(ctx context.Context) (uint64, error)
}
