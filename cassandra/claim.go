package cassandra

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math/big"
	"time"

	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
)

func newClaimToken() string {
	var b [16]byte
	if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
		panic("snapid: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// Claim implements registry.Registry.Claim (see there).
//
// It sends "INSERT … IF NOT EXISTS" with Reserved = c.Floor; a new name is
// then held. Otherwise the
// failed insert returns the row, and Claim decides from it:
//
//   - same owner: refused with registry.ErrProbableClone if c.CloneWindow > 0, the
//     row is active, was last seen less than c.CloneWindow ago, and its
//     machine id or host name differ from c's; otherwise refreshed (host
//     name, address, machine id, last seen, state active). Force does not
//     bypass the clone check: set CloneWindow to zero for that.
//   - another owner, released: taken over; Reserved is the old holder's
//     recorded final value, which the new holder's counter must start at.
//   - another owner, active (or a partial row without owner or state):
//     refused with an error wrapping registry.ErrNameTaken that describes the
//     holder, unless c.Force; then taken over.
//
// A claim that stands leaves Reserved at max(the row's mark, c.Floor): the
// mark never goes down, and a claimer's counter (c.Floor) is covered from
// the claim on.
//
// The update is conditional on the row as read, so two claimers never both
// win; a claimer whose update fails looks at the row again. Each claim
// writes a fresh random claim token, which resolves a claim whose reply was
// lost (see "Unknown outcomes" in the package documentation).
func (r *Registry) Claim(ctx context.Context, c registry.Claim) (registry.Holder, error) {
	if err := registry.ValidateName(c.Name); err != nil {
		return registry.Holder{}, err
	}
	if err := checkOwner(c.Owner); err != nil {
		return registry.Holder{}, err
	}
	for _, f := range [...]struct{ what, v string }{{"host name", c.Hostname}, {"address", c.Address}, {"machine id", c.MachineID}} {
		if err := checkField(f.what, f.v); err != nil {
			return registry.Holder{}, err
		}
	}
	if c.CloneWindow < 0 {
		return registry.Holder{}, invalidArg("negative clone window %v", c.CloneWindow)
	}
	var lastRow registry.Holder
	for attempt := 0; attempt < claimAttempts; attempt++ {
		if attempt > 0 {
			if err := r.backoff(ctx, attempt); err != nil {
				return registry.Holder{}, fmt.Errorf("snapid: %w: claim %q: %w", registry.ErrRegistry, c.Name, err)
			}
		}
		h, done, err := r.claimOnce(ctx, c, &lastRow)
		if err == nil && done {
			// The name's node number, if it has one (a read at the
			// configured consistency: a number never changes once given;
			// a failure leaves it 0, and AssignNumber reads it again).
			h.Number, _ = r.nameNumber(ctx, c.Name)
		}
		if done || err != nil {
			return h, err
		}
	}
	return lastRow, fmt.Errorf("snapid: %w: claim %q: the row kept changing during %d attempts (last seen: %s)",
		registry.ErrRegistry, c.Name, claimAttempts, lastRow)
}

// orUnknown is s, or "unknown" if it is empty.
func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// backoff waits a short random time that grows with attempt, so that
// claimers racing on one row do not retry in lock step.
func (r *Registry) backoff(ctx context.Context, attempt int) error {
	n, err := rand.Int(rand.Reader, big.NewInt(int64(attempt)*20+1))
	if err != nil {
		return err
	}
	return orReal(r.wait)(ctx, time.Duration(n.Int64()+1)*time.Millisecond)
}

// claimOnce makes one attempt: insert, or decide from the row and update
// it. done false means the row changed under us: try again.
func (r *Registry) claimOnce(ctx context.Context, c registry.Claim, lastRow *registry.Holder) (h registry.Holder, done bool, err error) {
	now := r.timestamp()
	token := newClaimToken()
	res, err := r.runCAS(ctx, "claim", c.Name, insertJudge(token), r.stmts.insert,
		c.Name, c.Owner, c.Hostname, c.Address, c.MachineID, now, now, int64(c.Floor), registry.StateActive, token)
	if err != nil {
		return registry.Holder{}, true, err
	}
	if res.applied {
		return r.inserted(c, res, now, token), true, nil
	}
	// The whole row: INSERT IF NOT EXISTS returns it, as does the serial
	// read that resolved a lost reply.
	decided := res.cur
	old := decided.Holder()
	*lastRow = old
	if str(decided.Token) == token {
		// A reply lost earlier in this attempt was in fact applied, and the
		// resent insert found our own row.
		return old, true, nil
	}

	next := registry.Holder{Name: c.Name, Owner: c.Owner, Hostname: c.Hostname, Address: c.Address, MachineID: c.MachineID,
		State: registry.StateActive, RegisteredAt: old.RegisteredAt, LastSeen: now, Reserved: max(old.Reserved, c.Floor), Session: token}
	if err := r.decideClaim(c, old, now, &next); err != nil {
		return old, true, err
	}

	// Conditional on the row we decided from.
	res2, err := r.runCAS(ctx, "claim", c.Name, updateJudge(token, decided), r.stmts.claimUpdate,
		next.Owner, next.Hostname, next.Address, next.MachineID, next.RegisteredAt, next.LastSeen,
		int64(next.Reserved), next.State, token, c.Name,
		decided.Owner, decided.State, decided.Reserved, decided.Token)
	if err != nil {
		return registry.Holder{}, true, err
	}
	return r.claimUpdated(ctx, c.Name, token, next, res2)
}

// insertJudge resolves a claim's insert whose outcome is unknown: applied
// when the row carries token, sent again when there is no row, lost
// otherwise.
func insertJudge(token string) func(cur *cql.Record, found bool) outcome {
	return func(cur *cql.Record, found bool) outcome {
		switch {
		case found && str(cur.Token) == token:
			return outcomeApplied
		case !found:
			return outcomeResend
		}
		return outcomeLost
	}
}

// inserted is the holder of an applied insert (res) of claim c at now
// with token: the row as read when the outcome had to be resolved, or
// else the row as written.
func (r *Registry) inserted(c registry.Claim, res casResult, now time.Time, token string) registry.Holder {
	if res.reread {
		return res.cur.Holder()
	}
	r.log.Debug("snapid: name claimed", "name", c.Name)
	return registry.Holder{Name: c.Name, Owner: c.Owner, Hostname: c.Hostname, Address: c.Address, MachineID: c.MachineID,
		State: registry.StateActive, RegisteredAt: now, LastSeen: now, Reserved: c.Floor, Session: token}
}

// decideClaim decides, from old (the name's row), whether claim c may take
// the name at now: the same owner refreshes it unless it looks like a
// clone (ErrProbableClone); a released name, or a forced claim, takes it
// over (next is then registered at now); anything else is ErrNameTaken.
func (r *Registry) decideClaim(c registry.Claim, old registry.Holder, now time.Time, next *registry.Holder) error {
	switch {
	case old.Owner == c.Owner:
		return probableClone(c, old, now)
	case old.State == registry.StateReleased && old.Owner != "":
		next.RegisteredAt = now
		r.log.Info("snapid: taking over a released name", "name", c.Name, "previous", old.String(), "final", old.Reserved)
	case c.Force:
		next.RegisteredAt = now
		r.log.Warn("snapid: forced take-over of a name held by another owner", "name", c.Name, "previous", old.String(),
			"reserved", next.Reserved)
	default:
		return fmt.Errorf("snapid: %w: %q is %s; take it over only if that holder is gone for good (force, with a start floor)",
			registry.ErrNameTaken, c.Name, old)
	}
	return nil
}

// probableClone refuses, with ErrProbableClone, a claim c by the owner of
// old (the name's row) from another machine while old is active and was
// seen less than c.CloneWindow before now.
func probableClone(c registry.Claim, old registry.Holder, now time.Time) error {
	otherMachine := old.MachineID != c.MachineID || old.Hostname != c.Hostname
	seen := now.Sub(old.LastSeen)
	if otherMachine && old.State == registry.StateActive && c.CloneWindow > 0 && seen < c.CloneWindow {
		return fmt.Errorf("snapid: %w: %q is active with this owner token on %s (machine %s, last seen %s ago), but this claim comes from %s (machine %s); "+
			"if the other machine is gone, wait %s after its last sighting",
			registry.ErrProbableClone, c.Name, orUnknown(old.Hostname), orUnknown(old.MachineID), seen.Round(time.Second),
			orUnknown(c.Hostname), orUnknown(c.MachineID), c.CloneWindow)
	}
	return nil
}

// updateJudge resolves a claim's update whose outcome is unknown: applied
// when the row carries token, sent again when the row is still the one
// decided from (owner, state, mark and token), lost otherwise.
func updateJudge(token string, decided cql.Record) func(cur *cql.Record, found bool) outcome {
	return func(cur *cql.Record, found bool) outcome {
		switch {
		case found && str(cur.Token) == token:
			return outcomeApplied
		case found && same(cur.Owner, decided.Owner) && same(cur.State, decided.State) &&
			same(cur.Reserved, decided.Reserved) && same(cur.Token, decided.Token):
			return outcomeResend
		}
		return outcomeLost
	}
}

// claimUpdated is the result of a claim's update (res, with token): the
// holder when it was applied, by this send or by an earlier one whose
// reply was lost (the row is then read at SERIAL); done false when the
// row changed under it.
func (r *Registry) claimUpdated(ctx context.Context, name, token string, next registry.Holder, res casResult) (registry.Holder, bool, error) {
	switch {
	case res.applied && res.reread:
		return res.cur.Holder(), true, nil
	case res.applied:
		return next, true, nil
	case str(res.cur.Token) == token:
		// Applied by an earlier send whose reply was lost; read the row.
		var rec cql.Record
		found, err := r.serialRead(ctx, "claim", &rec, name)
		if err != nil {
			return registry.Holder{}, true, fmt.Errorf("snapid: %w: claim %q: reading the claimed row: %w", registry.ErrRegistry, name, err)
		}
		if found && str(rec.Token) == token {
			return rec.Holder(), true, nil
		}
	}
	return registry.Holder{}, false, nil
}
