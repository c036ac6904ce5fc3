package registry

import (
	"context"
	"fmt"
	"time"
)

// Row states.
const (
	StateActive   = "active"
	StateReleased = "released"
)

// Holder is a registry row: who holds a node name and how far it may issue.
type Holder struct {
	Name         string
	Owner        string // owner token of the counter file that holds the name
	Hostname     string
	Address      string
	MachineID    string
	State        string // StateActive or StateReleased
	RegisteredAt time.Time
	LastSeen     time.Time
	// Reserved is the reserved-up-to mark: the holder issues no number
	// above it. For a released row it is the final counter value.
	Reserved uint64
	// Session is a random token written by every successful claim. The
	// processes of the host that made the claim present it to Extend and
	// Touch, so that a copy of the counter directory (same owner token)
	// that claims later, on any machine, supersedes them instead of sharing
	// their reservations.
	Session string
	// Number is the name's node number (see NumberRegistry), 0 if it has
	// none (yet, or the registry gives none).
	Number uint64
	// NumberTaken, for a name without a Number, is a node number the
	// registry took for it whose assignment did not complete (its answer
	// was lost or timed out: its outcome was unknown), and NumberTakenAt
	// when (zero if the registry cannot tell); 0 if none. The name's next
	// assignment settles it (registries that list it: Cassandra's).
	NumberTaken   uint64
	NumberTakenAt time.Time
}

// String describes the holder for error messages.
func (h Holder) String() string {
	return fmt.Sprintf("held by %s (address %s, machine %s) since %s, last seen %s, state %s",
		orUnknown(h.Hostname), orUnknown(h.Address), orUnknown(h.MachineID),
		fmtTime(h.RegisteredAt), fmtTime(h.LastSeen), h.State)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "unknown"
	}
	return t.UTC().Format(time.RFC3339)
}

// Claim is a request to hold a node name.
type Claim struct {
	Name      string
	Owner     string // the counter file's owner token
	Hostname  string
	Address   string
	MachineID string
	// Force takes the name over even from an active holder of another
	// owner. The new holder's counter starts at least at the old holder's
	// mark.
	Force bool
	// Floor: a claim that stands leaves the registry's mark at least at
	// Floor, in the same atomic change (new row or not, forced or not).
	// The library sends the highest of its counter and a take-over's
	// floor, so that numbers a host handed out before its first claim (a
	// standalone host joining a registry) are covered by the mark even if
	// the Open fails right after the claim.
	Floor uint64
	// CloneWindow: a claim with this Owner from another machine (machine id
	// or hostname differ) is refused with ErrProbableClone while the row is
	// active and was last seen less than CloneWindow ago. Zero disables the
	// check.
	CloneWindow time.Duration
}

// Registry proves that a node name is held by one counter file only, and
// bounds what that counter file may issue. Implementations must be safe for
// concurrent use. The production implementation is cassandra.Registry
// (package github.com/snapid/snapid/cassandra).
//
// Every method is conditional on the owner: none of them may create,
// resurrect or change a row held by another owner, except Claim with Force.
type Registry interface {
	// Claim claims c.Name for c.Owner and returns the row as it stands
	// after the claim. Another active owner: ErrNameTaken (wrapped with the
	// holder's details) unless c.Force. The same owner from another machine,
	// recently seen: ErrProbableClone. A released row is taken over: its
	// Reserved is the final counter value of the old holder.
	Claim(ctx context.Context, c Claim) (Holder, error)

	// Extend moves the reserved-up-to mark of name from old to new
	// (new may be lower than old: that returns an unused reservation) and
	// refreshes last-seen, if owner holds the name active under session
	// (the Session of the claim the caller's host made) and the mark is
	// old. On success the returned Holder has Name, Owner, Session, State,
	// Reserved and LastSeen set. If the mark is not old it returns the
	// whole row and ErrMarkMoved; if owner no longer holds the name, or a
	// later claim replaced session, ErrNameTaken.
	Extend(ctx context.Context, name, owner, session string, old, new uint64) (Holder, error)

	// Touch refreshes last-seen if owner holds the name active under
	// session; otherwise ErrNameTaken.
	Touch(ctx context.Context, name, owner, session string) error

	// Release marks the name released, recording final as its mark, if
	// owner holds it and final is not below the row's mark (a release can
	// never lower what the next holder starts above).
	Release(ctx context.Context, name, owner string, final uint64) error

	// Get returns the row for name (at serial consistency), or
	// ErrNotRegistered.
	Get(ctx context.Context, name string) (Holder, error)

	// List returns every row, for audits.
	List(ctx context.Context) ([]Holder, error)
}
