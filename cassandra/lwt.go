package cassandra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
)

// resendAttempts bounds the sends of one LWT whose outcome was unknown and
// resolved as not applied.
const resendAttempts = 3

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// same reports whether two nullable columns hold the same value.
func same[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

type gocqlQuerier struct {
	s         *gocql.Session
	cons      gocql.Consistency
	serial    gocql.Consistency
	selectOne string
}

func (g *gocqlQuerier) CAS(ctx context.Context, rec *cql.Record, stmt string, args ...any) (bool, error) {
	q := g.s.Query(stmt, args...).Consistency(g.cons).SerialConsistency(g.serial)
	return q.MapScanCASContext(ctx, rec.DestMap())
}

func (g *gocqlQuerier) SerialRead(ctx context.Context, rec *cql.Record, name string) (bool, error) {
	q := g.s.Query(g.selectOne, name).Consistency(g.serial)
	err := q.ScanContext(ctx, rec.Dests()...)
	if errors.Is(err, gocql.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// outcome is what a serial read says about an LWT whose reply was lost.
type outcome int

const (
	outcomeLost    outcome = iota // another writer changed the row: the condition failed
	outcomeApplied                // our change is there
	outcomeResend                 // the condition still holds: our change was not made
)

// casResult is the result of runCAS.
type casResult struct {
	applied bool
	// cur is the row's current state when not applied: what Cassandra
	// returned with the failed condition, or (full) the whole row as read
	// at SERIAL when the outcome had to be resolved.
	cur    cql.Record
	full   bool // cur is the whole row (or no row: found false)
	found  bool
	reread bool // the outcome was resolved by a serial read
}

// runCAS runs one LWT and resolves an unknown outcome: judge says, from
// the row as read at SERIAL (found false: no row), whether our change is
// there, whether the condition still holds, or neither.
func (r *Registry) runCAS(ctx context.Context, op, name string, judge func(cur *cql.Record, found bool) outcome,
	stmt string, args ...any) (casResult, error) {
	var res casResult
	applied, err := runLWT(ctx, r.log, op, name,
		func() (bool, error) {
			res = casResult{}
			return r.q.CAS(ctx, &res.cur, stmt, args...)
		},
		func() (outcome, error) {
			res = casResult{reread: true, full: true}
			found, err := r.serialRead(ctx, op+" (resolving an unknown outcome)", &res.cur, name)
			if err != nil {
				return outcomeLost, err
			}
			res.found = found
			return judge(&res.cur, found), nil
		})
	if err != nil {
		return casResult{}, err
	}
	res.applied = applied
	return res, nil
}

// runLWT sends one LWT (send) and resolves an unknown outcome (see
// outcomeUnknown) with resolve, a read at the serial consistency of the
// LWT (SERIAL or LOCAL_SERIAL, whichever the LWT used) that says whether
// the change is there, the condition still holds (send again), or neither.
// It reports whether the change was applied. It never guesses: an outcome
// it cannot resolve is an error wrapping registry.ErrRegistry.
func runLWT(ctx context.Context, log *slog.Logger, op, name string, send func() (bool, error), resolve func() (outcome, error)) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("snapid: %w: %s %q: nothing sent: %w", registry.ErrRegistry, op, name, err)
	}
	var lastErr error
	for n := 0; n < resendAttempts; n++ {
		applied, err := send()
		if err == nil {
			return applied, nil
		}
		if !outcomeUnknown(err) {
			return false, fmt.Errorf("snapid: %w: %s %q: %w", registry.ErrRegistry, op, name, err)
		}
		lastErr = err
		if ctx.Err() != nil {
			return false, fmt.Errorf("snapid: %w: %s %q: the outcome is unknown (%w), and the call's context ended before it could be resolved; %s",
				registry.ErrRegistry, op, name, err, unknownAdvice(op))
		}
		log.Warn("snapid: registry write outcome unknown; resolving it with a serial read",
			"op", op, "name", name, "err", err)
		out, rerr := resolve()
		if rerr != nil {
			return false, fmt.Errorf("snapid: %w: %s %q: the outcome is unknown (%w), and the serial read that resolves it failed: %w; %s",
				registry.ErrRegistry, op, name, err, rerr, unknownAdvice(op))
		}
		switch out {
		case outcomeApplied:
			registry.NoteOutcomeResolved(ctx)
			log.Info("snapid: registry write outcome resolved: applied", "op", op, "name", name)
			return true, nil
		case outcomeLost:
			registry.NoteOutcomeResolved(ctx)
			log.Info("snapid: registry write outcome resolved: not applied, the row changed", "op", op, "name", name)
			return false, nil
		}
		log.Info("snapid: registry write outcome resolved: not applied; sending it again", "op", op, "name", name)
	}
	return false, fmt.Errorf("snapid: %w: %s %q: %d attempts ended with an unknown outcome, each resolved as not applied; last error: %w",
		registry.ErrRegistry, op, name, resendAttempts, lastErr)
}

// fullRow returns the whole row after a failed condition, reading it at
// SERIAL unless the resolution of an unknown outcome already did.
func (r *Registry) fullRow(ctx context.Context, op, name string, res casResult) (cql.Record, bool, error) {
	if res.full {
		return res.cur, res.found, nil
	}
	var rec cql.Record
	found, err := r.serialRead(ctx, op, &rec, name)
	if err != nil {
		return rec, false, fmt.Errorf("snapid: %w: %s %q: reading the row after a failed condition: %w", registry.ErrRegistry, op, name, err)
	}
	return rec, found, nil
}

func unknownAdvice(op string) string {
	if op == "claim" {
		return "the name may now be held by this owner; claiming again resolves it"
	}
	return "the row may or may not have changed; the next call sees it"
}

// outcomeUnknown reports whether an LWT that failed with err may still have
// been applied. Only errors that provably come before any work are
// definite: statements Cassandra refuses while parsing, preparing or
// authorising them (syntax, invalid, unauthorized, unprepared, protocol,
// config, credentials, already exists), and failures to send (no
// connection made, session closed). Everything else is unknown, Overloaded
// included: Cassandra 5.0's StorageProxy.commitPaxos checks hint overload
// after a quorum accepted the proposal, so an LWT answered Overloaded may
// have been applied. Bootstrapping is treated as unknown too, as is any
// code this list does not name.
func outcomeUnknown(err error) bool {
	if errors.Is(err, gocql.ErrNoConnections) || errors.Is(err, gocql.ErrSessionClosed) {
		return false
	}
	var re gocql.RequestError
	if errors.As(err, &re) {
		switch re.Code() {
		case gocql.ErrCodeSyntax, gocql.ErrCodeUnauthorized, gocql.ErrCodeInvalid, gocql.ErrCodeConfig,
			gocql.ErrCodeCredentials, gocql.ErrCodeProtocol, gocql.ErrCodeUnprepared, gocql.ErrCodeAlreadyExists:
			return false
		}
		// Write and read timeouts and failures, unavailable, CAS write
		// unknown, overloaded, bootstrapping, server errors.
		return true
	}
	// Client timeouts, lost connections, context ends, anything else.
	return true
}
