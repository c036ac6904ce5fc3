package cassandra

import (
	"context"
	"errors"
	"fmt"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
)

// CloseLease implements registry.SequenceRegistry.CloseLease: at
// LOCAL_SERIAL,
//
//	UPDATE … SET closed_pos = pos WHERE <the host's row>
//	IF session = ? AND lease_first = ? AND lease_last = ?
func (r *Registry) CloseLease(ctx context.Context, l registry.SequenceLease, pos uint64) error {
	if err := checkCloseArgs(l, pos); err != nil {
		return err
	}
	if pos > registry.MaxSequence {
		// A lease used up to 2^63-1: 2^63 cannot be stored, and a used-up
		// lease has nothing left to adopt (the next start leases anew).
		return nil
	}
	q, dc, err := r.seqQuerier(ctx)
	if err != nil {
		return err
	}
	token := newClaimToken()
	stmt := cql.SeqStmt{Stmt: r.seqs.stmts.closeHost, Args: append(append([]any{i64(pos), token}, hostRow(l.Sequence, dc, l.Name)...),
		l.Session, i64(l.First), i64(l.Last))}
	applied, err := runLWT(ctx, r.log, "close lease", l.Sequence,
		func() (bool, error) { return q.CASBatch(ctx, gocql.LocalSerial, gocql.LocalQuorum, stmt) },
		func() (outcome, error) { return r.resolveClose(ctx, q, dc, l, token) })
	if err != nil {
		return err
	}
	if !applied {
		return fmt.Errorf("snapid: %w: close lease %q of %q: the host's lease record is not [%d, %d] of this claim",
			registry.ErrLeaseMoved, l.Sequence, l.Name, l.First, l.Last)
	}
	return nil
}

// checkCloseArgs refuses a lease to close (its names, session and bounds)
// or a position that cannot be used, before anything is sent.
func checkCloseArgs(l registry.SequenceLease, pos uint64) error {
	if err := registry.ValidateName(l.Sequence); err != nil {
		return fmt.Errorf("sequence name: %w", err)
	}
	if err := registry.ValidateName(l.Name); err != nil {
		return err
	}
	if err := checkField("session", l.Session); err != nil {
		return err
	}
	if pos > registry.MaxSequence+1 || l.Last > registry.MaxSequence {
		return invalidArg("position %d or lease [%d, %d] above 2^63-1", pos, l.First, l.Last)
	}
	return nil
}

// resolveClose resolves a close of lease l whose outcome is unknown from
// the data centre's partition read at LOCAL_SERIAL: applied when the
// host's row carries token, sent again when it still records l under l's
// session, lost otherwise.
func (r *Registry) resolveClose(ctx context.Context, q cql.SeqQuerier, dc string, l registry.SequenceLease, token string) (outcome, error) {
	rows, err := r.readDC(ctx, q, l.Sequence, dc)
	if err != nil {
		return outcomeLost, err
	}
	switch h := find(rows, cql.KindHost, l.Name, 0); {
	case h != nil && str(h.Token) == token:
		return outcomeApplied, nil
	case h != nil && str(h.Session) == l.Session && u64(h.LeaseFirst) == l.First && u64(h.LeaseLast) == l.Last:
		return outcomeResend, nil
	}
	return outcomeLost, nil
}

// AdoptLease implements registry.SequenceRegistry.AdoptLease: the name's
// row read at SERIAL must show the claim (a.Owner, a.Session), then, at
// LOCAL_SERIAL,
//
//	UPDATE … SET owner = ?, session = ?, closed_pos = null WHERE <the host's row>
//	IF session = <old> AND lease_first = ? AND lease_last = ? AND closed_pos = <pos>
func (r *Registry) AdoptLease(ctx context.Context, a registry.LeaseAdoption) (registry.SequenceLease, error) {
	if err := checkAdoption(a); err != nil {
		return registry.SequenceLease{}, err
	}
	q, dc, err := r.seqQuerier(ctx)
	if err != nil {
		return registry.SequenceLease{}, err
	}
	if err := r.checkAdoptClaim(ctx, a); err != nil {
		return registry.SequenceLease{}, err
	}
	token := newClaimToken()
	stmt := cql.SeqStmt{Stmt: r.seqs.stmts.adoptHost, Args: append(append([]any{a.Owner, a.Session, token}, hostRow(a.Sequence, dc, a.Name)...),
		a.OldSession, i64(a.First), i64(a.Last), i64(a.Pos))}
	applied, err := runLWT(ctx, r.log, "adopt lease", a.Sequence,
		func() (bool, error) { return q.CASBatch(ctx, gocql.LocalSerial, gocql.LocalQuorum, stmt) },
		func() (outcome, error) { return r.resolveAdopt(ctx, q, dc, a, token) })
	if err != nil {
		return registry.SequenceLease{}, err
	}
	if !applied {
		return registry.SequenceLease{}, fmt.Errorf("snapid: %w: adopt lease %q of %q: the host's lease record is not [%d, %d] closed at %d by the previous claim",
			registry.ErrLeaseMoved, a.Sequence, a.Name, a.First, a.Last, a.Pos)
	}
	return registry.SequenceLease{Sequence: a.Sequence, DC: dc, Name: a.Name, Owner: a.Owner, Session: a.Session, First: a.First, Last: a.Last}, nil
}

// checkAdoption refuses an adoption whose names, owner, sessions,
// position or lease cannot be used, before anything is read.
func checkAdoption(a registry.LeaseAdoption) error {
	if err := registry.ValidateName(a.Sequence); err != nil {
		return fmt.Errorf("sequence name: %w", err)
	}
	if err := registry.ValidateName(a.Name); err != nil {
		return err
	}
	if err := checkOwner(a.Owner); err != nil {
		return err
	}
	for _, f := range []string{a.Session, a.OldSession} {
		if err := checkField("session", f); err != nil {
			return err
		}
	}
	if a.Pos == 0 || a.Pos > registry.MaxSequence+1 || a.Last > registry.MaxSequence {
		return invalidArg("position %d or lease [%d, %d] out of range", a.Pos, a.First, a.Last)
	}
	return nil
}

// checkAdoptClaim reads the name's row (at SERIAL) and refuses, with
// ErrNameTaken, an adoption that does not carry the name's current active
// claim.
func (r *Registry) checkAdoptClaim(ctx context.Context, a registry.LeaseAdoption) error {
	h, err := r.Get(ctx, a.Name)
	if errors.Is(err, registry.ErrNotRegistered) || err == nil && (h.Owner != a.Owner || h.Session != a.Session || h.State != registry.StateActive) {
		return fmt.Errorf("snapid: %w: adopt lease of %q for %q: the name is not held under this claim (%s)",
			registry.ErrNameTaken, a.Sequence, a.Name, h)
	}
	return err
}

// resolveAdopt resolves an adoption whose outcome is unknown from the data
// centre's partition read at LOCAL_SERIAL: applied when the host's row
// carries token, sent again when it still records the lease closed at
// a.Pos under the old session, lost otherwise.
func (r *Registry) resolveAdopt(ctx context.Context, q cql.SeqQuerier, dc string, a registry.LeaseAdoption, token string) (outcome, error) {
	rows, err := r.readDC(ctx, q, a.Sequence, dc)
	if err != nil {
		return outcomeLost, err
	}
	switch w := find(rows, cql.KindHost, a.Name, 0); {
	case w != nil && str(w.Token) == token:
		return outcomeApplied, nil
	case w != nil && str(w.Session) == a.OldSession && u64(w.LeaseFirst) == a.First && u64(w.LeaseLast) == a.Last && u64(w.ClosedPos) == a.Pos:
		return outcomeResend, nil
	}
	return outcomeLost, nil
}
