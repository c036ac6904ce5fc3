package registry

import (
	"context"
	"fmt"
	"math"
	"time"
)

// MaxSequence is the largest max a sequence may have, and its default:
// 2^63-1. Registries store numbers in signed 64-bit columns (Cassandra's
// bigint); keeping every number below 2^63 keeps their order the unsigned
// order, so conditions and audits may compare them. Common smaller maxima:
// 2^31-1 for a signed 32-bit column, 2^53-1 for JavaScript numbers.
const MaxSequence uint64 = math.MaxInt64

// SequenceInfo is a sequence's GLOBAL row: its bounds and how far it has
// handed numbers to data centres.
type SequenceInfo struct {
	Name  string
	Start uint64 // the first number (numbers that already exist stay below it)
	Max   uint64 // the last number; at Max the sequence is exhausted
	// Next is the first number GLOBAL has not handed to any data centre
	// yet; Max+1 once everything is handed out.
	Next      uint64
	CreatedAt time.Time
}

// SequenceRange is a range [First, Last] of a sequence held by a data
// centre. In SequenceStatus.Grants it is GLOBAL's record of the grant (Next
// is 0); in SequenceStatus.Ranges it is the data centre's own row, and Next
// is the first number of it not yet leased to a host (Last+1 when used up).
type SequenceRange struct {
	DC          string
	First, Last uint64
	Next        uint64
	GrantedAt   time.Time
}

// SequenceLease is a host's lease: the numbers [First, Last] of a sequence,
// leased from its data centre's ranges to the host that holds node name
// Name under the claim (Owner, Session). A zero First means no lease.
type SequenceLease struct {
	Sequence    string
	DC          string
	Name        string // the host's node name
	Owner       string
	Session     string
	First, Last uint64
	LeasedAt    time.Time
	// ClosedAt is the position of the host's lease file (the next number
	// it would hand out) that the host's last process recorded when it
	// closed cleanly; 0 if none (a lease clears it).
	ClosedAt uint64
}

// LeaseAdoption asks a SequenceRegistry to carry a host's lease over from
// its previous claim of its node name (OldSession) to its current one
// (Session), after a clean restart.
type LeaseAdoption struct {
	Sequence             string
	Name, Owner, Session string // the host's current claim
	OldSession           string // the claim the lease was recorded under
	First, Last          uint64 // the lease, as the host's lease file records it
	Pos                  uint64 // the lease file's position
}

// SequenceStatus is everything a registry holds about one sequence.
type SequenceStatus struct {
	SequenceInfo
	Grants []SequenceRange // GLOBAL's record of the ranges it gave each data centre
	Ranges []SequenceRange // each data centre's ranges, as the data centre keeps them
	Leases []SequenceLease // each host's current lease
}

// LeaseRequest asks a SequenceRegistry for a host's next lease.
type LeaseRequest struct {
	Sequence string
	// Name, Owner and Session are the host's claim of its node name (see
	// Holder): only the current holder of the name may lease.
	Name, Owner, Session string
	// PrevFirst and PrevLast are the host's latest lease as its lease file
	// records it (0, 0 for none). When the registry records another lease
	// for this host under the same session, it refuses with ErrLeaseMoved
	// (returning its record): the file is older than the registry.
	PrevFirst, PrevLast uint64
	// Size is the most numbers wanted, Min the fewest (consecutive) that
	// will do; 1 <= Min <= Size.
	Size, Min uint64
}

// SequenceRegistry is what a Registry implements to keep integer
// sequences (see Generator.Sequence). It is optional: Generator.Sequence and
// CreateSequence check for it with a type assertion and return
// ErrSequencesUnsupported when the registry lacks it. Implementations must
// be safe for concurrent use, and keep every number ever leased to a host
// from being leased again, whatever the failures.
//
// Numbers flow GLOBAL → data centre → host: a data centre takes ranges
// from GLOBAL, and hosts lease from their data centre's ranges. Which data
// centre a host is in is the registry's business (its configuration).
type SequenceRegistry interface {
	// CreateSequence creates the sequence name with the numbers
	// [start, max]. If it exists, it sets its max to max and moves its
	// next number up to start if it is below; it never lowers what was
	// handed out: a max below a number already handed to a data centre
	// is refused with ErrInvalidSequence, and nothing changes. Invalid
	// bounds (start 0, max < start, max > MaxSequence) are refused with
	// ErrInvalidSequence before anything is sent. A call that found no
	// sequence and was beaten to creating it by another call changes
	// nothing: it returns the sequence if its bounds are the ones asked
	// for, else ErrSequenceExists.
	CreateSequence(ctx context.Context, name string, start, max uint64) (SequenceInfo, error)

	// LeaseSequence leases the next numbers of req.Sequence to the host
	// (see LeaseRequest), and records the lease as the host's current one.
	// The lease holds between req.Min and req.Size consecutive numbers,
	// all in [start, max], none ever leased before. A sequence that has
	// fewer than req.Min numbers left is ErrExhausted; one that does not
	// exist, ErrNoSequence; a host that no longer holds its name under
	// req.Session, ErrNameTaken; a host whose recorded lease is not
	// (PrevFirst, PrevLast), ErrLeaseMoved with the recorded lease.
	// The name's row is consulted (at SERIAL) when the host's lease record
	// is missing or of another claim; while it is of req.Session, leases
	// need only the host's data centre, so that a data centre cut off from
	// the others keeps leasing. A later claim of the name supersedes the
	// record on its first lease, and the earlier claim leases no more.
	LeaseSequence(ctx context.Context, req LeaseRequest) (SequenceLease, error)

	// CloseLease records pos as the position of the host's lease file
	// (ClosedAt), if the host's lease record is l (session, first, last);
	// otherwise it changes nothing and returns ErrLeaseMoved. The host's
	// last process calls it when it closes cleanly.
	CloseLease(ctx context.Context, l SequenceLease, pos uint64) error

	// AdoptLease moves the host's lease record to a.Session if it is
	// a.OldSession's lease [a.First, a.Last] with ClosedAt a.Pos (not 0),
	// and the name's row shows the claim (a.Owner, a.Session); it returns
	// the record. A record that does not match is ErrLeaseMoved; a claim
	// that is not the name's current one, ErrNameTaken. Nothing changes
	// when it fails.
	AdoptLease(ctx context.Context, a LeaseAdoption) (SequenceLease, error)

	// HostLease returns the current lease of the host holding node name
	// in its data centre (First 0 if it has none), read so that it sees
	// every lease that completed. A sequence that does not exist is
	// ErrNoSequence.
	HostLease(ctx context.Context, sequence, name string) (SequenceLease, error)

	// SequenceStatus returns the sequence's GLOBAL row, grants, data
	// centre ranges and host leases (for snapctl seq show and audits),
	// or ErrNoSequence.
	SequenceStatus(ctx context.Context, name string) (SequenceStatus, error)

	// ListSequences returns the status of every sequence, for audits.
	ListSequences(ctx context.Context) ([]SequenceStatus, error)
}

// CheckSequenceBounds validates a sequence's name and bounds: the name
// follows the node-name rule (ErrInvalidName), start is at least 1, and
// start <= max <= MaxSequence (ErrInvalidSequence).
func CheckSequenceBounds(name string, start, max uint64) error {
	if err := ValidateName(name); err != nil {
		return fmt.Errorf("sequence name: %w", err)
	}
	switch {
	case start == 0:
		return fmt.Errorf("snapid: %w: sequence %q: start 0; the first number is at least 1", ErrInvalidSequence, name)
	case max < start:
		return fmt.Errorf("snapid: %w: sequence %q: max %d is below start %d", ErrInvalidSequence, name, max, start)
	case max > MaxSequence:
		return fmt.Errorf("snapid: %w: sequence %q: max %d is above 2^63-1 (%d), the largest a registry stores", ErrInvalidSequence, name, max, MaxSequence)
	}
	return nil
}

// CheckSequenceUpdate checks re-creating the existing sequence cur with
// [start, max] (ErrInvalidSequence, nothing changed): max may not go below
// a number GLOBAL already handed to a data centre (its ranges and the
// hosts' leases cover up to cur.Next-1), and start may be raised only while
// GLOBAL has handed nothing out: ranges and leases below a raised start
// would stay in use, by new hosts too, so the raise is refused once any
// exists (create a new sequence instead). A start at or below the current
// one changes nothing, so max may not go below the current start either.
func CheckSequenceUpdate(cur SequenceInfo, start, max uint64) error {
	kept := cur.Start
	if start > kept {
		kept = start
	}
	if max < kept {
		return fmt.Errorf("snapid: %w: sequence %q: max %d is below its start %d (a lower --start does not lower the start); nothing was changed",
			ErrInvalidSequence, cur.Name, max, kept)
	}
	if max < cur.Next-1 {
		return fmt.Errorf("snapid: %w: sequence %q: max %d is below %d, which data centres' ranges already cover; nothing was changed",
			ErrInvalidSequence, cur.Name, max, cur.Next-1)
	}
	if start > cur.Start && cur.Next > cur.Start {
		return fmt.Errorf("snapid: %w: sequence %q: start %d is above numbers already handed to data centres (%d-%d), whose ranges and "+
			"hosts' leases would stay in use; start is raised only before the first number is handed out (create a new sequence instead); "+
			"nothing was changed", ErrInvalidSequence, cur.Name, start, cur.Start, cur.Next-1)
	}
	return nil
}

// SequenceMaxKeeper is implemented by a SequenceRegistry that can
// re-create a sequence keeping its max as it finds it in the same
// conditional update (MaxSequence for a new sequence), so that a max set
// meanwhile by another re-create is not undone.
type SequenceMaxKeeper interface {
	CreateSequenceKeepMax(ctx context.Context, name string, start uint64) (SequenceInfo, error)
}

// SequenceSpace is how much of a sequence is left to lease, cluster-wide.
type SequenceSpace struct {
	Sequence string `json:"sequence"`
	Start    uint64 `json:"start"`
	Max      uint64 `json:"max"`
	// LeftNumbers counts the numbers no host has leased yet: those GLOBAL
	// has not handed to any data centre, and the rest of the data
	// centres' ranges. Numbers in hosts' leases are not in it, used or
	// not: the sequence is exhausted for new leases at 0.
	LeftNumbers uint64 `json:"left_numbers"`
	// LeftRatio is LeftNumbers over the sequence's size, Max-Start+1 (at
	// most 1).
	LeftRatio float64 `json:"left_ratio"`
}

// Space returns how much of the sequence st describes is left to lease.
// It is a pure function of st.
func (st SequenceStatus) Space() SequenceSpace {
	sp := SequenceSpace{Sequence: st.Name, Start: st.Start, Max: st.Max}
	if st.Next <= st.Max {
		sp.LeftNumbers = st.Max - st.Next + 1
	}
	for _, r := range st.Ranges {
		if r.Next <= r.Last && r.First != 0 {
			sp.LeftNumbers += r.Last - max(r.Next, r.First) + 1
		}
	}
	if st.Max >= st.Start && st.Start != 0 {
		size := float64(st.Max-st.Start) + 1
		sp.LeftRatio = math.Min(1, float64(sp.LeftNumbers)/size)
	}
	return sp
}
