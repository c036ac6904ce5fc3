package registry

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Errors a registry returns, and that the library returns from it. Match
// them with errors.Is: the values returned are usually wrapped with more
// detail (the name, the value that was refused).
var (
	// ErrInvalidName is returned for a node name that breaks the rule
	// ^[a-z_][a-z0-9_]{0,62}$.
	ErrInvalidName = errors.New("invalid node name")

	// ErrInvalidOption is returned by Open for an option value that cannot
	// be used (for example a Block of size 0).
	ErrInvalidOption = errors.New("invalid option")

	// ErrExhausted is returned when the counter cannot advance without
	// passing 2^64-1, and by a sequence lease that cannot be had: the
	// host's data centre has fewer consecutive numbers left than asked for,
	// in its ranges and in what GLOBAL has not handed out yet. For a
	// sequence the error is a *SequenceExhaustedError saying how many are
	// left where: other hosts' leases and other data centres' ranges may
	// still hold numbers. Neither ever wraps.
	ErrExhausted = errors.New("counter exhausted")

	// ErrSequenceShort is returned by Sequence.NextN and
	// SequenceRegistry.LeaseSequence when numbers of the sequence are left
	// for the host's data centre, but fewer consecutive ones than asked
	// for: a *SequenceExhaustedError saying how many (ask for fewer). It
	// does not match ErrExhausted, which means none are left.
	ErrSequenceShort = errors.New("fewer sequence numbers left than asked for")

	// ErrCorruptSequence is returned when a registry holds a sequence row
	// it cannot have written (a negative number, a next number outside the
	// row's bounds). Nothing is handed out from it.
	ErrCorruptSequence = errors.New("corrupt sequence row in the registry")

	// ErrNoSequence is returned for a sequence that was never created
	// (see CreateSequence).
	ErrNoSequence = errors.New("no such sequence")

	// ErrInvalidSequence is returned by CreateSequence for a start of 0,
	// a max below the start or above MaxSequence, or a max below numbers
	// the sequence already handed out. Nothing is changed.
	ErrInvalidSequence = errors.New("invalid sequence bounds")

	// ErrSequenceExists is returned by CreateSequence when, while it
	// created the sequence, another call created it first with other
	// bounds: it changes nothing (the call that created it reported its
	// bounds; calling CreateSequence again changes them as usual). Had
	// the other call made the same bounds, CreateSequence succeeds.
	ErrSequenceExists = errors.New("sequence created meanwhile with other bounds")

	// ErrSequencesUnsupported is returned when the registry does not
	// implement SequenceRegistry, or a Generator has no registry.
	ErrSequencesUnsupported = errors.New("registry does not keep sequences")

	// ErrLeaseMoved is returned by SequenceRegistry.LeaseSequence when the
	// host's lease in the registry is not the one the caller presented
	// (the host's lease file is older than the registry's record: restored
	// from a backup, or a lease whose reply was lost).
	ErrLeaseMoved = errors.New("host's sequence lease moved")

	// ErrNameTaken is returned when the node name is held in the registry
	// by another owner.
	ErrNameTaken = errors.New("node name taken")

	// ErrProbableClone is returned by a claim that carries the right owner
	// token from another machine while the row is active and was seen
	// recently: most likely a copy of a counter directory in use elsewhere.
	ErrProbableClone = errors.New("owner token in use on another machine (probable clone of the counter directory)")

	// ErrNotRegistered is returned by Registry.Get for a name without a row.
	ErrNotRegistered = errors.New("node name not registered")

	// ErrMarkMoved is returned by Registry.Extend when the row's mark is not
	// the expected old value (another process of the same owner moved it).
	ErrMarkMoved = errors.New("reserved-up-to mark moved")

	// ErrRegistry wraps failures to reach or use the registry.
	ErrRegistry = errors.New("registry error")

	// ErrStrideMismatch is returned when the stride given for
	// FormatStriped is not the one the cluster's registry records (or the
	// host's record of the name, or the host's claim): striped ids of two
	// strides could meet. Nothing is changed.
	ErrStrideMismatch = errors.New("stride does not match the cluster's")
)

// SequenceExhaustedError is a sequence lease that cannot be had: the data
// centre DC has fewer than Wanted consecutive numbers left. DCLeft is what
// its ranges still hold unleased, GlobalLeft what GLOBAL has not handed to
// any data centre yet, Largest the most consecutive numbers one lease can
// have now. Both 0: GLOBAL handed out every number up to Max and DC's
// ranges are used up, and the error matches ErrExhausted (other hosts'
// leases and other data centres' ranges may still hold numbers they have
// not issued). Otherwise numbers are left and it matches ErrSequenceShort,
// not ErrExhausted. OtherDCs, when the registry read them, is what each
// other data centre's ranges held not yet leased to its hosts: a data
// centre's range is its own, only its hosts lease from it, so those
// numbers are left for them, not for DC.
type SequenceExhaustedError struct {
	Sequence, DC       string
	Max                uint64
	Wanted             uint64
	DCLeft, GlobalLeft uint64
	Largest            uint64
	OtherDCs           map[string]uint64 // data centre → numbers its ranges hold unleased; nil: not read
}

// none is whether the data centre has no number left at all.
func (e *SequenceExhaustedError) none() bool { return e.DCLeft == 0 && e.GlobalLeft == 0 }

func (e *SequenceExhaustedError) Error() string {
	if e.none() {
		return fmt.Sprintf("snapid: %v: sequence %q: GLOBAL handed every number up to max %d to data centres, and data centre %q "+
			"leased every number of its ranges to hosts (their leases may still hold numbers not issued yet)%s", ErrExhausted, e.Sequence, e.Max, e.DC,
			e.elsewhere())
	}
	return fmt.Sprintf("snapid: %v: sequence %q: %d consecutive numbers asked for, at most %d are left together for data centre %q "+
		"(%d unleased in its ranges, %d not yet handed out by GLOBAL, max %d); ask for at most %d%s", ErrSequenceShort, e.Sequence, e.Wanted,
		e.Largest, e.DC, e.DCLeft, e.GlobalLeft, e.Max, e.Largest, e.elsewhere())
}

// OtherDCsLeft is what other data centres' ranges hold unleased, in all.
func (e *SequenceExhaustedError) OtherDCsLeft() uint64 {
	var n uint64
	for _, left := range e.OtherDCs {
		n += left
	}
	return n
}

// elsewhere says what other data centres' ranges hold ("" if unknown).
func (e *SequenceExhaustedError) elsewhere() string {
	if len(e.OtherDCs) == 0 {
		return ""
	}
	dcs := make([]string, 0, len(e.OtherDCs))
	for dc := range e.OtherDCs {
		dcs = append(dcs, dc)
	}
	sort.Strings(dcs)
	if e.OtherDCsLeft() == 0 {
		return fmt.Sprintf("; the ranges of the other data centres (%s) are all leased to their hosts too", strings.Join(dcs, ", "))
	}
	var parts []string
	for _, dc := range dcs {
		if left := e.OtherDCs[dc]; left > 0 {
			parts = append(parts, fmt.Sprintf("%q %d", dc, left))
		}
	}
	return fmt.Sprintf("; other data centres' ranges hold %d numbers not leased yet (%s), which only their own hosts can lease",
		e.OtherDCsLeft(), strings.Join(parts, ", "))
}

// Is makes a SequenceExhaustedError match ErrExhausted when no number is
// left, ErrSequenceShort otherwise.
func (e *SequenceExhaustedError) Is(target error) bool {
	if e.none() {
		return target == ErrExhausted
	}
	return target == ErrSequenceShort
}
