package cassandra

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
)

var _ registry.SequenceRegistry = (*Registry)(nil)

// globalKey and hostKey are the clustering keys of the GLOBAL row and of a
// host row.
func (r *Registry) globalRow(seq string) []any {
	return []any{seq, cql.PartGlobal, cql.KindGlobal, "", int64(0)}
}

func hostRow(seq, dc, name string) []any {
	return []any{seq, cql.DCPart(dc), cql.KindHost, name, int64(0)}
}

func find(rows []cql.SeqRow, kind, key string, first int64) *cql.SeqRow {
	for i := range rows {
		if rows[i].Kind == kind && rows[i].Key == key && rows[i].First == first {
			return &rows[i]
		}
	}
	return nil
}

func (r *Registry) sizing() (time.Duration, uint64) {
	r.seqs.mu.Lock()
	defer r.seqs.mu.Unlock()
	h, f := r.seqs.horizon, r.seqs.floor
	if h == 0 {
		h = DefaultSequenceHorizon
	}
	if f == 0 {
		f = DefaultSequenceFloor
	}
	return h, f
}

// readGlobal reads the GLOBAL partition at SERIAL: the GLOBAL row (nil if
// the sequence does not exist) and every row of the partition.
func (r *Registry) readGlobal(ctx context.Context, q cql.SeqQuerier, seq string) (*cql.SeqRow, []cql.SeqRow, error) {
	return r.readGlobalAt(ctx, q, seq, gocql.Serial)
}

// readGlobalAt reads the GLOBAL partition at cons.
func (r *Registry) readGlobalAt(ctx context.Context, q cql.SeqQuerier, seq string, cons gocql.Consistency) (*cql.SeqRow, []cql.SeqRow, error) {
	level := cons.String()
	if cons == gocql.Serial {
		level = "SERIAL" // gocql names only the non-serial levels
	}
	rows, err := q.ReadPartition(ctx, cons, seq, cql.PartGlobal)
	if err != nil {
		if noTable(err) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("snapid: %w: reading sequence %q at %s: %w", registry.ErrRegistry, seq, level, err)
	}
	return find(rows, cql.KindGlobal, "", 0), rows, nil
}

func (r *Registry) readDC(ctx context.Context, q cql.SeqQuerier, seq, dc string) ([]cql.SeqRow, error) {
	if err := r.checkPaxos(ctx); err != nil {
		return nil, err
	}
	p := r.dcPaxos()
	rows, err := q.ReadPartition(ctx, p.read(), seq, cql.DCPart(dc))
	if err != nil && !noTable(err) {
		return nil, fmt.Errorf("snapid: %w: reading sequence %q of data centre %q at %s: %w", registry.ErrRegistry, seq, dc, p, err)
	}
	return rows, nil
}

// info decodes the GLOBAL row (see storeNext); a row it cannot have
// written is ErrCorruptSequence.
func info(seq string, g *cql.SeqRow) (registry.SequenceInfo, error) {
	i := registry.SequenceInfo{Name: seq}
	var err error
	if i.Start, err = loadNum(seq, "GLOBAL's start", g.Start); err != nil {
		return i, err
	}
	if i.Max, err = loadNum(seq, "GLOBAL's max", g.Max); err != nil {
		return i, err
	}
	if i.Start == 0 || i.Max < i.Start {
		return i, fmt.Errorf("snapid: %w: sequence %q: GLOBAL's bounds [%d, %d]; nothing was handed out", registry.ErrCorruptSequence, seq, i.Start, i.Max)
	}
	if i.Next, err = loadNext(seq, "GLOBAL", g.Next, i.Max); err != nil {
		return i, err
	}
	if i.Next < i.Start {
		return i, fmt.Errorf("snapid: %w: sequence %q: GLOBAL's next number %d is below its start %d; nothing was handed out",
			registry.ErrCorruptSequence, seq, i.Next, i.Start)
	}
	if g.At != nil {
		i.CreatedAt = *g.At
	}
	return i, nil
}

// rangeNext decodes a data centre range row's first, last and next.
func rangeNext(seq string, w *cql.SeqRow) (first, last, next uint64, err error) {
	if w.First < 1 {
		return 0, 0, 0, fmt.Errorf("snapid: %w: sequence %q: a range starts at %d", registry.ErrCorruptSequence, seq, w.First)
	}
	if last, err = loadNum(seq, "a range's last", w.Last); err != nil {
		return 0, 0, 0, err
	}
	first = uint64(w.First)
	if next, err = loadNext(seq, fmt.Sprintf("range [%d, %d]", first, last), w.Next, last); err != nil {
		return 0, 0, 0, err
	}
	if last < first || next < first {
		return 0, 0, 0, fmt.Errorf("snapid: %w: sequence %q: range [%d, %d] with next %d", registry.ErrCorruptSequence, seq, first, last, next)
	}
	return first, last, next, nil
}

// CreateSequence implements registry.SequenceRegistry.CreateSequence. It
// creates the sequences table if it is missing, then, at SERIAL, inserts
// the GLOBAL row (IF NOT EXISTS) or updates an existing one conditional on
// the next number and the max it read.
func (r *Registry) CreateSequence(ctx context.Context, seq string, start, max uint64) (registry.SequenceInfo, error) {
	if err := registry.CheckSequenceBounds(seq, start, max); err != nil {
		return registry.SequenceInfo{}, err
	}
	return r.createSequence(ctx, seq, start, max, false)
}

// CreateSequenceKeepMax implements registry.SequenceMaxKeeper: CreateSequence
// with the max of the GLOBAL row as read in the same conditional update
// (MaxSequence for a new sequence).
func (r *Registry) CreateSequenceKeepMax(ctx context.Context, seq string, start uint64) (registry.SequenceInfo, error) {
	if err := registry.CheckSequenceBounds(seq, start, registry.MaxSequence); err != nil {
		return registry.SequenceInfo{}, err
	}
	return r.createSequence(ctx, seq, start, registry.MaxSequence, true)
}

func (r *Registry) createSequence(ctx context.Context, seq string, start, max uint64, keepMax bool) (registry.SequenceInfo, error) {
	q, dc, err := r.seqQuerier(ctx)
	if err != nil {
		return registry.SequenceInfo{}, err
	}
	if _, err := r.ensureTable(ctx, true); err != nil {
		return registry.SequenceInfo{}, err
	}
	// absent: an attempt read no GLOBAL row, so this call creates the
	// sequence, and a GLOBAL row found after that is another call's
	// creation, which it does not change (createdMeanwhile).
	absent := false
	for attempt := 0; attempt < claimAttempts; attempt++ {
		si, done, err := r.createOnce(ctx, q, dc, seq, start, max, keepMax, &absent)
		if err != nil || done {
			return si, err
		}
	}
	return registry.SequenceInfo{}, fmt.Errorf("snapid: %w: create sequence %q: the row kept changing", registry.ErrRegistry, seq)
}

// createOnce makes one attempt of createSequence: it reads GLOBAL at
// SERIAL, refuses to create a sequence whose GLOBAL row is missing but
// whose grants, ranges or leases remain, and inserts or updates the GLOBAL
// row conditional on what it read. A GLOBAL row found after an earlier
// attempt found none (*absent) was made by another create meanwhile: it is
// compared, not updated (createdMeanwhile). done false means the row
// changed under it: try again.
func (r *Registry) createOnce(ctx context.Context, q cql.SeqQuerier, dc, seq string, start, max uint64, keepMax bool, absent *bool) (_ registry.SequenceInfo, done bool, err error) {
	g, rows, err := r.readGlobal(ctx, q, seq)
	if err != nil {
		return registry.SequenceInfo{}, false, err
	}
	if g == nil {
		*absent = true
		if err := r.checkNoRemnants(ctx, q, seq, dc, rows); err != nil {
			return registry.SequenceInfo{}, false, err
		}
	} else if *absent {
		si, err := createdMeanwhile(seq, g, start, max, keepMax)
		return si, true, err
	}
	token := newClaimToken()
	now := r.timestamp()
	want, stmt, err := r.createStmt(seq, g, start, max, keepMax, token, now)
	if err != nil {
		return want, false, err
	}
	applied, err := runLWT(ctx, r.log, "create sequence", seq,
		func() (bool, error) { return q.CASBatch(ctx, gocql.Serial, gocql.Quorum, stmt) },
		func() (outcome, error) { return r.resolveCreate(ctx, q, seq, g, token) })
	if err != nil {
		return registry.SequenceInfo{}, false, err
	}
	if applied {
		return want, true, nil
	}
	return registry.SequenceInfo{}, false, nil
}

// createdMeanwhile judges the sequence seq that another create made (g,
// its GLOBAL row) while this one, asked for [start, max] (max kept with
// keepMax), was creating it: the same bounds are the sequence asked for
// (success, nothing written); other bounds are ErrSequenceExists, and
// nothing changes: the create that made it reported its bounds, and a
// create that saw no sequence does not change them behind its back.
func createdMeanwhile(seq string, g *cql.SeqRow, start, max uint64, keepMax bool) (registry.SequenceInfo, error) {
	cur, err := info(seq, g)
	if err != nil {
		return registry.SequenceInfo{}, err
	}
	if cur.Start == start && (keepMax || cur.Max == max) {
		return cur, nil
	}
	asked := fmt.Sprintf("start %d and max %d", start, max)
	if keepMax {
		asked = fmt.Sprintf("start %d", start)
	}
	return cur, fmt.Errorf("snapid: %w: sequence %q was created meanwhile by another create, with start %d and max %d, not the %s asked for; "+
		"nothing was changed", registry.ErrSequenceExists, seq, cur.Start, cur.Max, asked)
}

// createStmt is the write of CreateSequence on GLOBAL as read (g, nil when
// the sequence does not exist), and the sequence it makes: an insert of a
// new GLOBAL row, or an update of the existing one (see
// updateGlobalStmt).
func (r *Registry) createStmt(seq string, g *cql.SeqRow, start, max uint64, keepMax bool, token string, now time.Time) (registry.SequenceInfo, cql.SeqStmt, error) {
	if g == nil {
		want := registry.SequenceInfo{Name: seq, Start: start, Max: max, Next: start, CreatedAt: now}
		return want, cql.SeqStmt{Stmt: r.seqs.stmts.insertGlobal, Args: append(r.globalRow(seq), i64(start), i64(max), i64(start), now, token)}, nil
	}
	return r.updateGlobalStmt(seq, g, start, max, keepMax, token)
}

// updateGlobalStmt is the update of an existing GLOBAL row g for
// CreateSequence, conditional on the next number and the max read, and the
// sequence it makes; with keepMax the max stays the one read. An update
// CheckSequenceUpdate refuses returns the sequence as it is with the
// error.
func (r *Registry) updateGlobalStmt(seq string, g *cql.SeqRow, start, max uint64, keepMax bool, token string) (registry.SequenceInfo, cql.SeqStmt, error) {
	cur, err := info(seq, g)
	if err != nil {
		return registry.SequenceInfo{}, cql.SeqStmt{}, err
	}
	if keepMax {
		max = cur.Max // the update is conditional on it
	}
	if err := registry.CheckSequenceUpdate(cur, start, max); err != nil {
		return cur, cql.SeqStmt{}, err
	}
	want := cur
	// A raised start (allowed only before anything was handed out, see
	// CheckSequenceUpdate) becomes the sequence's start.
	want.Start, want.Max, want.Next = maxU(cur.Start, start), max, maxU(cur.Next, start)
	stmt := cql.SeqStmt{Stmt: r.seqs.stmts.updateGlobal, Args: append(append([]any{i64(want.Start), i64(max), storeNext(want.Next, max), token},
		r.globalRow(seq)...), g.Next, g.Max)}
	return want, stmt, nil
}

// resolveCreate resolves a create whose outcome is unknown from GLOBAL
// read at SERIAL: applied when GLOBAL carries token, sent again when
// GLOBAL is as read (g: still missing, or the same next and max), lost
// otherwise.
func (r *Registry) resolveCreate(ctx context.Context, q cql.SeqQuerier, seq string, g *cql.SeqRow, token string) (outcome, error) {
	g2, _, err := r.readGlobal(ctx, q, seq)
	switch {
	case err != nil:
		return outcomeLost, err
	case g2 != nil && str(g2.Token) == token:
		return outcomeApplied, nil
	case g == nil && g2 == nil, g != nil && g2 != nil && same(g2.Next, g.Next) && same(g2.Max, g.Max):
		return outcomeResend, nil
	}
	return outcomeLost, nil
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// LeaseSequence implements registry.SequenceRegistry.LeaseSequence. It reads
// the data centre's partition at LOCAL_SERIAL, takes the lease from the
// lowest range with room with one conditional batch at LOCAL_SERIAL (the
// range's next number, old → new, and the host's row, conditional on what
// was read), and takes a range from GLOBAL (at SERIAL) first when the data
// centre has none with room, or in the background when half of its latest
// range is used. A host row of another claim is taken over only after the
// name's row, read at SERIAL, shows that the request carries the name's
// current claim.
func (r *Registry) LeaseSequence(ctx context.Context, req registry.LeaseRequest) (registry.SequenceLease, error) {
	if err := checkLeaseRequest(req); err != nil {
		return registry.SequenceLease{}, err
	}
	q, dc, err := r.seqQuerier(ctx)
	if err != nil {
		return registry.SequenceLease{}, err
	}
	nameChecked := false
	for attempt := 0; attempt < leaseAttempts; attempt++ {
		if attempt > 0 {
			if err := leaseBackoffWait(ctx, attempt, r.wait); err != nil {
				return registry.SequenceLease{}, fmt.Errorf("snapid: %w: lease %q: %w", registry.ErrRegistry, req.Sequence, err)
			}
		}
		l, done, err := r.leaseOnce(ctx, q, dc, req, &nameChecked)
		if err != nil || done {
			return l, err
		}
	}
	return registry.SequenceLease{}, fmt.Errorf("snapid: %w: lease %q: the data centre's ranges kept changing", registry.ErrRegistry, req.Sequence)
}

// checkLeaseRequest refuses a lease request whose names, owner, session or
// sizes cannot be used, before anything is read.
func checkLeaseRequest(req registry.LeaseRequest) error {
	if err := registry.ValidateName(req.Sequence); err != nil {
		return fmt.Errorf("sequence name: %w", err)
	}
	if err := registry.ValidateName(req.Name); err != nil {
		return err
	}
	if err := checkOwner(req.Owner); err != nil {
		return err
	}
	if err := checkField("session", req.Session); err != nil {
		return err
	}
	if req.Min == 0 || req.Size < req.Min || req.Size > registry.MaxSequence {
		return invalidArg("lease of %d to %d numbers", req.Min, req.Size)
	}
	return nil
}

// leaseOnce makes one attempt of LeaseSequence: it reads the data centre's
// partition, checks that the request may lease for the host (its own row
// or, once per call, the name's claim), then either takes a range from
// GLOBAL when no range has room or leases from the lowest range with room.
// done false means the caller tries again: a range was granted, or
// another lease moved the range first.
func (r *Registry) leaseOnce(ctx context.Context, q cql.SeqQuerier, dc string, req registry.LeaseRequest, nameChecked *bool) (l registry.SequenceLease, done bool, err error) {
	rows, err := r.readDC(ctx, q, req.Sequence, dc)
	if err != nil {
		return registry.SequenceLease{}, false, err
	}
	host := find(rows, cql.KindHost, req.Name, 0)
	if ownsHostRow(req, host) {
		if err := checkPrevLease(req, host); err != nil {
			return host.Lease(req.Sequence, dc), false, err
		}
	} else if !*nameChecked {
		if err := r.checkLeaseClaim(ctx, req); err != nil {
			return registry.SequenceLease{}, false, err
		}
		*nameChecked = true
	}
	rgs, err := dcRanges(req.Sequence, rows)
	if err != nil {
		return registry.SequenceLease{}, false, err
	}
	pick := pickRange(rgs, req.Min)
	if pick == nil {
		err := r.grant(ctx, q, req.Sequence, dc, rows, rgs, req.Min)
		var e *registry.SequenceExhaustedError
		if errors.As(err, &e) {
			// Numbers may be left elsewhere: say where.
			e.OtherDCs = r.otherDCsLeft(ctx, q, req.Sequence, dc)
		}
		return registry.SequenceLease{}, false, err
	}
	if err := r.verifyRange(ctx, q, req.Sequence, dc, pick); err != nil {
		return registry.SequenceLease{}, false, err
	}
	return r.leaseFrom(ctx, q, dc, req, host, rgs, pick)
}

// ownsHostRow reports whether host, the host's row in the data centre's
// partition, was written under the request's claim (owner and session).
func ownsHostRow(req registry.LeaseRequest, host *cql.SeqRow) bool {
	return host != nil && str(host.Session) == req.Session && str(host.Owner) == req.Owner
}

// checkPrevLease refuses, with ErrLeaseMoved, a request whose previous
// lease is not the one host (the host's row, of this claim) records.
func checkPrevLease(req registry.LeaseRequest, host *cql.SeqRow) error {
	if u64(host.LeaseFirst) != req.PrevFirst || u64(host.LeaseLast) != req.PrevLast {
		return fmt.Errorf("snapid: %w: sequence %q: the registry records this host's lease as [%d, %d], not [%d, %d]",
			registry.ErrLeaseMoved, req.Sequence, u64(host.LeaseFirst), u64(host.LeaseLast), req.PrevFirst, req.PrevLast)
	}
	return nil
}

// checkLeaseClaim reads the name's row (at SERIAL) and refuses, with
// ErrNameTaken, a request that does not carry the name's current active
// claim.
func (r *Registry) checkLeaseClaim(ctx context.Context, req registry.LeaseRequest) error {
	h, err := r.Get(ctx, req.Name)
	if errors.Is(err, registry.ErrNotRegistered) || err == nil && (h.Owner != req.Owner || h.Session != req.Session || h.State != registry.StateActive) {
		return fmt.Errorf("snapid: %w: lease of sequence %q for %q: the name is not held under this claim (%s)",
			registry.ErrNameTaken, req.Sequence, req.Name, h)
	}
	return err
}

// leaseFrom leases from pick, one of the data centre's ranges rgs, with
// one conditional batch at LOCAL_SERIAL: the range's next number, and the
// host's row (inserted, or updated conditional on host as read). done
// false means the batch was not applied (another lease moved the range
// first); when it was, a background grant may start.
func (r *Registry) leaseFrom(ctx context.Context, q cql.SeqQuerier, dc string, req registry.LeaseRequest, host *cql.SeqRow,
	rgs []dcRange, pick *dcRange) (l registry.SequenceLease, done bool, err error) {
	rg, first := pick.row, pick.next
	n := leaseLen(pick, req.Size, req.Min)
	l = registry.SequenceLease{Sequence: req.Sequence, DC: dc, Name: req.Name, Owner: req.Owner, Session: req.Session,
		First: first, Last: first + n - 1, LeasedAt: r.timestamp()}
	token := newClaimToken()
	stmts := r.leaseStmts(req, dc, pick, host, l, token)
	applied, err := runLWT(ctx, r.log, "lease", req.Sequence,
		func() (bool, error) { return r.dcCAS(ctx, q, stmts...) },
		func() (outcome, error) { return r.resolveLease(ctx, q, req, dc, rg, host, token) })
	if err != nil {
		return registry.SequenceLease{}, false, err
	}
	if !applied {
		return registry.SequenceLease{}, false, nil
	}
	r.maybeGrant(req.Sequence, dc, rgs, n)
	return l, true, nil
}

// leaseStmts is the batch of a lease l from pick: the range's next number,
// conditional on the next read, then the host's row, inserted (IF NOT
// EXISTS) when host is nil or else updated conditional on host as read.
func (r *Registry) leaseStmts(req registry.LeaseRequest, dc string, pick *dcRange, host *cql.SeqRow, l registry.SequenceLease, token string) []cql.SeqStmt {
	rg := pick.row
	stmts := []cql.SeqStmt{{Stmt: r.seqs.stmts.advanceRange, Args: []any{storeNext(l.Last+1, pick.last), req.Sequence, cql.DCPart(dc), cql.KindRange, "", rg.First, rg.Next}}}
	hostVals := []any{req.Owner, req.Session, i64(l.First), i64(l.Last), l.LeasedAt, token}
	if host == nil {
		return append(stmts, cql.SeqStmt{Stmt: r.seqs.stmts.insertHost, Args: append(hostRow(req.Sequence, dc, req.Name), hostVals...)})
	}
	return append(stmts, cql.SeqStmt{Stmt: r.seqs.stmts.updateHost, Args: append(append(hostVals, hostRow(req.Sequence, dc, req.Name)...),
		host.Owner, host.Session, host.LeaseFirst, host.LeaseLast)})
}

// resolveLease resolves a lease batch whose outcome is unknown from the
// data centre's partition read at LOCAL_SERIAL: applied when the host's
// row carries token, sent again when the range (rg as read) and the host's
// row (host as read) are unchanged, lost otherwise.
func (r *Registry) resolveLease(ctx context.Context, q cql.SeqQuerier, req registry.LeaseRequest, dc string, rg, host *cql.SeqRow, token string) (outcome, error) {
	now, err := r.readDC(ctx, q, req.Sequence, dc)
	if err != nil {
		return outcomeLost, err
	}
	h2, rg2 := find(now, cql.KindHost, req.Name, 0), find(now, cql.KindRange, "", rg.First)
	switch {
	case h2 != nil && str(h2.Token) == token:
		return outcomeApplied, nil
	case rg2 != nil && same(rg2.Next, rg.Next) && sameHost(h2, host):
		return outcomeResend, nil
	}
	return outcomeLost, nil
}

// leaseAttempts bounds the reads and conditional updates of one lease.
const leaseAttempts = 16

// leaseBackoff waits before a lease's next attempt, after another host's
// lease moved the range first. Every host of a data centre leases from one
// partition, and when they all start at once (after a power loss) each
// round has one winner: the losers wait a random time below a bound that
// doubles from 10 ms up to 2 s (full jitter), so that they spread out
// instead of meeting again at once, which turns N contenders' N² rounds
// into about N.
func leaseBackoff(ctx context.Context, attempt int) error {
	return leaseBackoffWait(ctx, attempt, realWait)
}

// leaseBackoffWait is leaseBackoff waiting with wait (nil: realWait).
func leaseBackoffWait(ctx context.Context, attempt int, wait waitFunc) error {
	bound := min(2*time.Second, 10*time.Millisecond<<min(attempt, 10))
	return orReal(wait)(ctx, time.Duration(mrand.Int64N(int64(bound))+1))
}

func sameHost(a, b *cql.SeqRow) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return same(a.Owner, b.Owner) && same(a.Session, b.Session) && same(a.LeaseFirst, b.LeaseFirst) && same(a.LeaseLast, b.LeaseLast)
}

// HostLease implements registry.SequenceRegistry.HostLease: the host's row
// in its data centre's partition, read at LOCAL_SERIAL.
func (r *Registry) HostLease(ctx context.Context, seq, name string) (registry.SequenceLease, error) {
	if err := registry.ValidateName(seq); err != nil {
		return registry.SequenceLease{}, fmt.Errorf("sequence name: %w", err)
	}
	if err := registry.ValidateName(name); err != nil {
		return registry.SequenceLease{}, err
	}
	q, dc, err := r.seqQuerier(ctx)
	if err != nil {
		return registry.SequenceLease{}, err
	}
	rows, err := r.readDC(ctx, q, seq, dc)
	if err != nil {
		return registry.SequenceLease{}, err
	}
	if h := find(rows, cql.KindHost, name, 0); h != nil {
		return h.Lease(seq, dc), nil
	}
	if len(rows) == 0 {
		// No range in this data centre yet: does the sequence exist?
		g, _, err := r.readGlobal(ctx, q, seq)
		if err != nil {
			return registry.SequenceLease{}, err
		}
		if g == nil {
			return registry.SequenceLease{}, fmt.Errorf("snapid: %w: %q", registry.ErrNoSequence, seq)
		}
	}
	return registry.SequenceLease{}, nil
}
