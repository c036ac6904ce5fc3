package cassandra

import (
	"context"
	"fmt"
	"time"

	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
)

// Extend implements registry.Registry.Extend:
//
//	UPDATE … SET reserved = new, last_seen = now WHERE name = ?
//	IF owner = ? AND state = 'active' AND reserved = old
//
// On success the returned registry.Holder has Name, Owner, State, Reserved (new) and
// LastSeen set; the other fields are zero (an applied LWT returns no row).
// When the condition fails, the row is read at SERIAL: a missing row, or a
// row released or held by another owner, is registry.ErrNameTaken (wrapped with the
// holder's details; a missing row also matches registry.ErrNotRegistered), and the
// row is not changed or recreated; a row of this owner whose mark is not
// old is returned with registry.ErrMarkMoved.
func (r *Registry) Extend(ctx context.Context, name, owner, session string, old, new uint64) (registry.Holder, error) {
	if err := checkHoldArgs(name, owner, session); err != nil {
		return registry.Holder{}, err
	}
	for attempt := 0; attempt < claimAttempts; attempt++ {
		now := r.timestamp()
		res, err := r.runCAS(ctx, "extend", name, extendJudge(owner, session, old, new, now), r.stmts.extend,
			int64(new), now, name, owner, session, registry.StateActive, int64(old))
		if err != nil {
			return registry.Holder{}, err
		}
		if res.applied {
			return registry.Holder{Name: name, Owner: owner, Session: session, State: registry.StateActive, Reserved: new, LastSeen: now}, nil
		}
		cur, found, err := r.fullRow(ctx, "extend", name, res)
		if err != nil {
			return registry.Holder{}, err
		}
		if h, err := r.extendRefused(name, owner, session, old, cur, found); err != nil {
			return h, err
		}
		// The condition holds again (the row changed back): try again.
	}
	return registry.Holder{}, fmt.Errorf("snapid: %w: extend %q: the row kept changing", registry.ErrRegistry, name)
}

// checkHoldArgs refuses a name, owner or session that cannot be used,
// before anything is sent.
func checkHoldArgs(name, owner, session string) error {
	if err := registry.ValidateName(name); err != nil {
		return err
	}
	if err := checkOwner(owner); err != nil {
		return err
	}
	return checkField("session", session)
}

// heldUnder reports whether row cur is active under the claim of owner
// and session.
func heldUnder(cur *cql.Record, owner, session string) bool {
	return str(cur.Owner) == owner && str(cur.Token) == session && str(cur.State) == registry.StateActive
}

// extendJudge resolves an extension (old → new at now, under the claim of
// owner and session) whose outcome is unknown: applied when the row shows
// new and now, sent again when it still shows old, lost otherwise.
func extendJudge(owner, session string, old, new uint64, now time.Time) func(cur *cql.Record, found bool) outcome {
	return func(cur *cql.Record, found bool) outcome {
		switch {
		case found && heldUnder(cur, owner, session) && cur.Reserved != nil && uint64(*cur.Reserved) == new && cur.LastSeen != nil && cur.LastSeen.Equal(now):
			return outcomeApplied
		case found && heldUnder(cur, owner, session) && cur.Reserved != nil && uint64(*cur.Reserved) == old:
			return outcomeResend
		}
		return outcomeLost
	}
}

// extendRefused is the refusal of an extension whose condition failed,
// from the whole row (cur, found false: no row): ErrNameTaken when the
// claim of owner and session does not hold it, ErrMarkMoved when its mark
// is not old; nil when the condition holds again.
func (r *Registry) extendRefused(name, owner, session string, old uint64, cur cql.Record, found bool) (registry.Holder, error) {
	h := cur.Holder()
	switch {
	case !found || !heldUnder(&cur, owner, session):
		return h, r.notHeld("extend", name, owner, h, found)
	case cur.Reserved == nil || uint64(*cur.Reserved) != old:
		return h, fmt.Errorf("snapid: %w: %q: the registry's mark is %d, not %d", registry.ErrMarkMoved, name, h.Reserved, old)
	}
	return h, nil
}

// notHeld is the error of a change refused because owner does not hold
// name.
func (r *Registry) notHeld(op, name, owner string, h registry.Holder, found bool) error {
	switch {
	case !found:
		return fmt.Errorf("snapid: %w: %s %q: the name has no row (%w); nothing was written", registry.ErrNameTaken, op, name, registry.ErrNotRegistered)
	case h.Owner == owner && h.State == registry.StateActive:
		return fmt.Errorf("snapid: %w: %s %q: a later claim with this owner token replaced this host's (%s): "+
			"a copy of the counter directory in use elsewhere?; nothing was written", registry.ErrNameTaken, op, name, h)
	case h.Owner == owner:
		return fmt.Errorf("snapid: %w: %s %q: this owner released the name (%s); nothing was written", registry.ErrNameTaken, op, name, h)
	}
	return fmt.Errorf("snapid: %w: %s %q: another owner has it: %s; nothing was written", registry.ErrNameTaken, op, name, h)
}

// Touch implements registry.Registry.Touch:
//
//	UPDATE … SET last_seen = now WHERE name = ? IF owner = ? AND claim_token = ? AND state = 'active'
//
// A missing, released or taken-over row is not changed: registry.ErrNameTaken.
func (r *Registry) Touch(ctx context.Context, name, owner, session string) error {
	if err := checkHoldArgs(name, owner, session); err != nil {
		return err
	}
	now := r.timestamp()
	res, err := r.runCAS(ctx, "touch", name, touchJudge(owner, session, now), r.stmts.touch, now, name, owner, session, registry.StateActive)
	if err != nil || res.applied {
		return err
	}
	cur, found, err := r.fullRow(ctx, "touch", name, res)
	if err != nil {
		return err
	}
	if found && heldUnder(&cur, owner, session) {
		// Released and claimed back by this owner in between: the name is
		// ours again, and the claim refreshed last_seen.
		return nil
	}
	return r.notHeld("touch", name, owner, cur.Holder(), found)
}

// touchJudge resolves a touch (at now, under the claim of owner and
// session) whose outcome is unknown: applied when the row shows now, sent
// again when the claim still holds the row, lost otherwise.
func touchJudge(owner, session string, now time.Time) func(cur *cql.Record, found bool) outcome {
	return func(cur *cql.Record, found bool) outcome {
		switch {
		case found && heldUnder(cur, owner, session) && cur.LastSeen != nil && cur.LastSeen.Equal(now):
			return outcomeApplied
		case found && heldUnder(cur, owner, session):
			return outcomeResend
		}
		return outcomeLost
	}
}

// Release implements registry.Registry.Release. It reads the row at SERIAL,
// compares the recorded mark with final in Go (as unsigned numbers: CQL
// compares bigint as signed, which would misorder marks at and above
// 2^63), then writes
//
//	UPDATE … SET state = 'released', reserved = final, last_seen = now
//	WHERE name = ? IF owner = ? AND reserved = <the mark read>
//
// so the condition holds only on the row the decision was made from. If
// the row changed in between, it reads and decides again (a few times).
// A missing row or a row of another owner is not changed: registry.ErrNameTaken. A
// mark above final is not changed either: registry.ErrMarkMoved. Releasing a
// released row of the same owner records final again.
func (r *Registry) Release(ctx context.Context, name, owner string, final uint64) error {
	if err := registry.ValidateName(name); err != nil {
		return err
	}
	if err := checkOwner(owner); err != nil {
		return err
	}
	for attempt := 0; attempt < claimAttempts; attempt++ {
		if attempt > 0 {
			if err := r.backoff(ctx, attempt); err != nil {
				return fmt.Errorf("snapid: %w: release %q: %w", registry.ErrRegistry, name, err)
			}
		}
		cur, err := r.releasable(ctx, name, owner, final)
		if err != nil {
			return err
		}
		read := cur.Reserved
		now := r.timestamp()
		res, err := r.runCAS(ctx, "release", name, releaseJudge(owner, final, now, read), r.stmts.release,
			registry.StateReleased, int64(final), now, name, owner, read)
		if err != nil || res.applied {
			return err
		}
		// The row changed since it was read: decide again.
	}
	return fmt.Errorf("snapid: %w: release %q: the row kept changing during %d attempts", registry.ErrRegistry, name, claimAttempts)
}

// releasable reads the name's row at SERIAL and returns it when owner may
// release it with final: a missing row or one of another owner is
// ErrNameTaken, a mark above final ErrMarkMoved.
func (r *Registry) releasable(ctx context.Context, name, owner string, final uint64) (cql.Record, error) {
	var cur cql.Record
	found, err := r.serialRead(ctx, "release", &cur, name)
	if err != nil {
		return cur, fmt.Errorf("snapid: %w: release %q: reading the row: %w", registry.ErrRegistry, name, err)
	}
	h := cur.Holder()
	switch {
	case !found || h.Owner != owner:
		return cur, r.notHeld("release", name, owner, h, found)
	case h.Reserved > final:
		return cur, fmt.Errorf("snapid: %w: release %q: the registry's mark %d is above the final value %d; nothing was written",
			registry.ErrMarkMoved, name, h.Reserved, final)
	}
	return cur, nil
}

// releaseJudge resolves a release (of owner's row, with final at now,
// conditional on the mark read) whose outcome is unknown: applied when the
// row is released with final at now, sent again when it still shows the
// mark read, lost otherwise (or when the row is gone or another owner's).
func releaseJudge(owner string, final uint64, now time.Time, read *int64) func(row *cql.Record, found bool) outcome {
	return func(row *cql.Record, found bool) outcome {
		switch {
		case !found || str(row.Owner) != owner:
			return outcomeLost
		case str(row.State) == registry.StateReleased && row.Reserved != nil && uint64(*row.Reserved) == final &&
			row.LastSeen != nil && row.LastSeen.Equal(now):
			return outcomeApplied
		case same(row.Reserved, read):
			return outcomeResend
		}
		return outcomeLost
	}
}
