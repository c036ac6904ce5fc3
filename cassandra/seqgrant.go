package cassandra

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
)

// Data centres' ranges: taken from the sequence's GLOBAL row at SERIAL and
// recorded in the data centre's partition at LOCAL_SERIAL.

// dcRange is a data centre's range row, decoded.
type dcRange struct {
	row               *cql.SeqRow
	first, last, next uint64 // next is last+1 when used up
}

func (g dcRange) left() uint64 { return g.last - g.next + 1 }

// dcRanges decodes the range rows of a data centre's partition, sorted by
// first; a row it cannot have written is ErrCorruptSequence.
func dcRanges(seq string, rows []cql.SeqRow) ([]dcRange, error) {
	var out []dcRange
	for i := range rows {
		if rows[i].Kind != cql.KindRange {
			continue
		}
		first, last, next, err := rangeNext(seq, &rows[i])
		if err != nil {
			return nil, err
		}
		out = append(out, dcRange{row: &rows[i], first: first, last: last, next: next})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].first < out[j].first })
	return out, nil
}

// checkRange refuses a range outside GLOBAL's bounds [gi.Start, gi.Max]
// (a row the registry cannot have written) as ErrCorruptSequence.
func checkRange(seq, dc string, gi registry.SequenceInfo, g *dcRange) error {
	if g.first < gi.Start || g.last > gi.Max {
		return fmt.Errorf("snapid: %w: sequence %q: data centre %q's range [%d, %d] is outside the sequence's [%d, %d]; nothing was leased",
			registry.ErrCorruptSequence, seq, dc, g.first, g.last, gi.Start, gi.Max)
	}
	return nil
}

// verifyRange checks g against GLOBAL (read at SERIAL) before the first
// lease from it; a range once seen within bounds is not read again. When
// GLOBAL cannot be read (the data centre cut off), the lease goes on: the
// range was checked when it was granted.
func (r *Registry) verifyRange(ctx context.Context, q cql.SeqQuerier, seq, dc string, g *dcRange) error {
	key := fmt.Sprintf("%s/%s/%d/%d", seq, dc, g.first, g.last)
	st := &r.seqs
	st.mu.Lock()
	ok := st.checked[key]
	st.mu.Unlock()
	if ok {
		return nil
	}
	// A cut-off data centre waits for GLOBAL a bounded part of the
	// caller's time, leaving the rest for the lease.
	limit := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		limit = min(limit, time.Until(d)/4)
	}
	gctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	gr, _, err := r.readGlobal(gctx, q, seq)
	if err != nil || gr == nil {
		return nil // not verified: checked again at the next lease
	}
	gi, err := info(seq, gr)
	if err != nil {
		return err
	}
	if err := checkRange(seq, dc, gi, g); err != nil {
		return err
	}
	st.mu.Lock()
	if st.checked == nil {
		st.checked = map[string]bool{}
	}
	st.checked[key] = true
	st.mu.Unlock()
	return nil
}

// pickRange returns the lowest range with at least min numbers left.
func pickRange(rgs []dcRange, min uint64) *dcRange {
	for i := range rgs {
		if rgs[i].left() >= min {
			return &rgs[i]
		}
	}
	return nil
}

// leaseLen is how many numbers a lease takes from g: at most an eighth of
// the range (or what the host needs at the least), so that the data
// centre's hosts share it and it lasts through a partition as sized,
// however fast their leases grow; at most size and what g has left.
func leaseLen(g *dcRange, size, least uint64) uint64 {
	return min(size, g.left(), max(least, (g.last-g.first+1)/8))
}

// maybeGrant starts a background grant when, after a lease of n, the data
// centre (whose ranges were rgs) has less than half of its latest range
// left.
func (r *Registry) maybeGrant(seq, dc string, rgs []dcRange, n uint64) {
	var left uint64
	for _, g := range rgs {
		left += g.left()
	}
	left -= n
	if len(rgs) == 0 {
		return
	}
	latest := rgs[len(rgs)-1]
	if left >= (latest.last-latest.first+1)/2 {
		return
	}
	st := &r.seqs
	st.mu.Lock()
	if st.bg == nil {
		st.bg = map[string]bool{}
	}
	if st.bg[seq] || st.closing {
		st.mu.Unlock()
		return
	}
	if st.bgCtx == nil {
		st.bgCtx, st.stop = context.WithCancel(context.Background())
	}
	bgCtx := st.bgCtx
	st.bg[seq] = true
	st.wg.Add(1)
	st.mu.Unlock()
	go func() {
		defer st.wg.Done()
		defer func() {
			st.mu.Lock()
			delete(st.bg, seq)
			st.mu.Unlock()
		}()
		// Cancelled by Close: a grant abandoned half way leaves a grant
		// without its range, which the next grant of the data centre adds.
		ctx, cancel := context.WithTimeout(bgCtx, time.Minute)
		defer cancel()
		q, _, err := r.seqQuerier(ctx)
		if err == nil {
			var now []cql.SeqRow
			if now, err = r.readDC(ctx, q, seq, dc); err == nil {
				var rgs []dcRange
				if rgs, err = dcRanges(seq, now); err == nil {
					err = r.grant(ctx, q, seq, dc, now, rgs, 1)
				}
			}
		}
		if err != nil && !errors.Is(err, registry.ErrExhausted) && !errors.Is(err, registry.ErrSequenceShort) {
			r.log.Warn("snapid: could not take the data centre's next sequence range in advance", "sequence", seq, "dc", dc, "err", err)
		}
	}()
}

// grant gives data centre dc a new range of the sequence from GLOBAL:
// one conditional batch at SERIAL on the GLOBAL partition (GLOBAL's next
// number, old → new, conditional on its max too, and the grant row), then
// the range row in the data centre's partition at LOCAL_SERIAL (IF NOT
// EXISTS). Grants recorded in GLOBAL but missing from the data centre (a
// granter that died in between) are added first. dcRows is the data
// centre's partition as last read.
func (r *Registry) grant(ctx context.Context, q cql.SeqQuerier, seq, dc string, dcRows []cql.SeqRow, rgs []dcRange, min uint64) error {
	g, rows, err := r.readGlobal(ctx, q, seq)
	if err != nil {
		return err
	}
	if g == nil {
		return fmt.Errorf("snapid: %w: %q (create it first: snapctl seq create)", registry.ErrNoSequence, seq)
	}
	repaired, err := r.repairGrants(ctx, q, seq, dc, dcRows, rows)
	if err != nil || repaired {
		return err // repaired: the caller reads the data centre again
	}
	gi, err := info(seq, g)
	if err != nil {
		return err
	}
	if err := checkGrantable(seq, dc, gi, rows, rgs, min); err != nil {
		return err
	}
	next, maxN := gi.Next, gi.Max
	// At most half of what GLOBAL has left above the floor: one data
	// centre's rate never takes the whole of a capped sequence at once.
	_, floor := r.sizing()
	size := r.rangeSize(rgs)
	if half := max((maxN-next+1)/2, floor); size > half {
		size = half
	}
	size = max(size, min)
	last := maxN
	if maxN-next >= size {
		last = next + size - 1
	}
	return r.grantRange(ctx, q, seq, dc, g, next, last, maxN)
}

// repairGrants adds to the data centre's partition (dcRows as read) the
// ranges that GLOBAL's partition (rows) records as granted to dc but that
// the data centre lacks, and reports whether it added any.
//
// Each is added used up (a gap), never whole: a range row may be missing
// because its granter died before writing it, but also because the data
// centre's replicas lost it after hosts leased from it, and nothing left
// in the data centre says how far they got. A grant younger than
// SequenceRepairAfter is left alone: its granter is likely still writing the
// range, and the caller takes another grant instead (which only moves
// GLOBAL on); an old one's granter, if it still writes, finds the range
// there (IF NOT EXISTS) and reads again.
func (r *Registry) repairGrants(ctx context.Context, q cql.SeqQuerier, seq, dc string, dcRows, rows []cql.SeqRow) (bool, error) {
	repaired := false
	for i := range rows {
		w := &rows[i]
		if w.Kind != cql.KindGrant || w.Key != dc || find(dcRows, cql.KindRange, "", w.First) != nil {
			continue
		}
		if w.First < 1 || w.Last == nil || *w.Last < w.First {
			return false, fmt.Errorf("snapid: %w: sequence %q: GLOBAL's grant to %q starts at %d", registry.ErrCorruptSequence, seq, dc, w.First)
		}
		if w.At != nil && r.now().Sub(*w.At) < SequenceRepairAfter {
			continue
		}
		first, last := uint64(w.First), uint64(*w.Last)
		r.log.Warn("snapid: a range granted to the data centre is missing from its partition (its granter died, or its replicas lost it); it is skipped (a gap)",
			"sequence", seq, "dc", dc, "first", first, "last", last)
		if err := r.insertRange(ctx, q, seq, dc, first, last, last+1, w.At); err != nil {
			return false, err
		}
		repaired = true
	}
	return repaired, nil
}

// SequenceRepairAfter is how long after a grant a data centre's next
// grant takes its missing range for lost (added used up) rather than
// still being written by its granter.
const SequenceRepairAfter = time.Minute

// checkGrantable refuses a grant of at least min numbers that GLOBAL (gi,
// its partition rows) cannot give: a null next that no grant explains is
// ErrCorruptSequence, too few numbers left a *SequenceExhaustedError
// counting what GLOBAL and the data centre's ranges rgs have left.
func checkGrantable(seq, dc string, gi registry.SequenceInfo, rows []cql.SeqRow, rgs []dcRange, min uint64) error {
	next, maxN := gi.Next, gi.Max
	if next > maxN && !grantedUpTo(rows, maxN) {
		// A null next (used up) is written only by the grant of the last
		// range, whose grant row reaches max: a lost cell, not exhaustion.
		return fmt.Errorf("snapid: %w: sequence %q: GLOBAL's next number is null (used up) but no grant reaches its max %d; nothing was handed out",
			registry.ErrCorruptSequence, seq, maxN)
	}
	if next > maxN || maxN-next+1 < min {
		return exhaustedError(seq, dc, gi, rgs, min)
	}
	return nil
}

// exhaustedError is the refusal of a grant of at least min numbers: what
// GLOBAL (gi) and the data centre's ranges rgs have left, and the largest
// run among them.
func exhaustedError(seq, dc string, gi registry.SequenceInfo, rgs []dcRange, min uint64) *registry.SequenceExhaustedError {
	next, maxN := gi.Next, gi.Max
	e := &registry.SequenceExhaustedError{Sequence: seq, DC: dc, Max: maxN, Wanted: min}
	if next <= maxN {
		e.GlobalLeft = maxN - next + 1
	}
	e.Largest = e.GlobalLeft
	for _, g := range rgs {
		e.DCLeft += g.left()
		e.Largest = max(e.Largest, g.left())
	}
	return e
}

// grantRange takes [next, last] from GLOBAL (g as read, whose max is maxN)
// for data centre dc with one conditional batch at SERIAL, then records
// the range in the data centre's partition. A batch not applied (another
// grant moved GLOBAL) returns nil: the caller reads again.
func (r *Registry) grantRange(ctx context.Context, q cql.SeqQuerier, seq, dc string, g *cql.SeqRow, next, last, maxN uint64) error {
	token := newClaimToken()
	now := r.timestamp()
	stmts := []cql.SeqStmt{
		{Stmt: r.seqs.stmts.advanceGlobal, Args: append(append([]any{storeNext(last+1, maxN), token}, r.globalRow(seq)...), g.Next, g.Max)},
		{Stmt: r.seqs.stmts.insertGrant, Args: []any{seq, cql.PartGlobal, cql.KindGrant, dc, int64(next), i64(last), now, token}},
	}
	applied, err := runLWT(ctx, r.log, "grant", seq,
		func() (bool, error) { return q.CASBatch(ctx, gocql.Serial, gocql.Quorum, stmts...) },
		func() (outcome, error) { return r.resolveGrant(ctx, q, seq, dc, g, next, token) })
	if err != nil || !applied {
		return err // not applied: another grant moved GLOBAL; the caller reads again
	}
	r.log.Info("snapid: data centre took a sequence range", "sequence", seq, "dc", dc, "first", next, "last", last)
	return r.insertRange(ctx, q, seq, dc, next, last, next, &now)
}

// resolveGrant resolves a grant batch whose outcome is unknown from
// GLOBAL's partition read at SERIAL: applied when the grant row starting
// at next carries token, sent again when GLOBAL's next and max are still
// those of g, lost otherwise.
func (r *Registry) resolveGrant(ctx context.Context, q cql.SeqQuerier, seq, dc string, g *cql.SeqRow, next uint64, token string) (outcome, error) {
	g2, rows2, err := r.readGlobal(ctx, q, seq)
	if err != nil {
		return outcomeLost, err
	}
	if w := find(rows2, cql.KindGrant, dc, int64(next)); w != nil && str(w.Token) == token {
		return outcomeApplied, nil
	}
	if g2 != nil && same(g2.Next, g.Next) && same(g2.Max, g.Max) {
		return outcomeResend, nil
	}
	return outcomeLost, nil
}

// insertRange records a granted range [first, last] whose next number to
// lease is next (last+1: used up) in the data centre's partition, if it is
// not there.
func (r *Registry) insertRange(ctx context.Context, q cql.SeqQuerier, seq, dc string, first, last, next uint64, at *time.Time) error {
	var when time.Time
	if at != nil {
		when = *at
	}
	_, err := runLWT(ctx, r.log, "range", seq,
		func() (bool, error) {
			return r.dcCAS(ctx, q, cql.SeqStmt{Stmt: r.seqs.stmts.insertRange,
				Args: []any{seq, cql.DCPart(dc), cql.KindRange, "", int64(first), i64(last), storeNext(next, last), when}})
		},
		func() (outcome, error) {
			rows, err := r.readDC(ctx, q, seq, dc)
			if err != nil {
				return outcomeLost, err
			}
			if find(rows, cql.KindRange, "", int64(first)) != nil {
				return outcomeApplied, nil
			}
			if len(rows) == 0 {
				// No row at all: the send whose outcome is unknown may
				// have been applied, leased from, and lost with the whole
				// partition since. Sent again used up (a gap), never
				// whole. A partition with rows was not lost (or was filled
				// again within the resolution's seconds, a second fault):
				// the send goes again as it was, which leaves no gap.
				next = last + 1
			}
			return outcomeResend, nil
		})
	return err
}

// rangeSize is the size of the data centre's next range: what its hosts
// leased from its latest range, per second since that range was granted
// (at least SequenceRepairAfter ago, so that a lease right after a grant,
// or a granter's clock ahead, makes no huge rate), times the horizon; at
// least the floor.
func (r *Registry) rangeSize(rgs []dcRange) uint64 {
	horizon, floor := r.sizing()
	if len(rgs) == 0 || rgs[len(rgs)-1].row.At == nil {
		return floor
	}
	latest := rgs[len(rgs)-1]
	used := latest.next - latest.first
	elapsed := max(r.now().Sub(*latest.row.At), SequenceRepairAfter)
	if used == 0 {
		return floor
	}
	perHorizon := float64(used) / elapsed.Seconds() * horizon.Seconds()
	if perHorizon <= float64(floor) {
		return floor
	}
	return uint64(math.Min(perHorizon, float64(registry.MaxSequence/4)))
}

// checkNoRemnants refuses to create the sequence seq, whose GLOBAL row
// does not exist, when grants (GLOBAL's partition, rows) or this data
// centre's ranges or leases of it exist: its GLOBAL row was lost, and a new
// one would hand the same numbers out again (ErrCorruptSequence).
func (r *Registry) checkNoRemnants(ctx context.Context, q cql.SeqQuerier, seq, dc string, rows []cql.SeqRow) error {
	dcRows, err := r.readDC(ctx, q, seq, dc)
	if err != nil {
		return err
	}
	var high uint64
	found := false
	for _, w := range append(append([]cql.SeqRow{}, rows...), dcRows...) {
		var last *int64
		switch w.Kind {
		case cql.KindGrant, cql.KindRange:
			last = w.Last
		case cql.KindHost:
			last = w.LeaseLast
		default:
			continue
		}
		found = true
		if last != nil && *last > 0 && uint64(*last) > high {
			high = uint64(*last)
		}
	}
	if !found {
		return nil
	}
	return fmt.Errorf("snapid: %w: sequence %q: its GLOBAL row is missing but numbers up to %d were granted to data centres; "+
		"restore the GLOBAL row from a backup, or create a sequence under a new name with a start above %d; nothing was changed",
		registry.ErrCorruptSequence, seq, high, high)
}

// grantedUpTo is whether a grant row of GLOBAL's partition rows ends at
// last.
func grantedUpTo(rows []cql.SeqRow, last uint64) bool {
	for _, w := range rows {
		if w.Kind == cql.KindGrant && w.Last != nil && *w.Last >= 0 && uint64(*w.Last) == last {
			return true
		}
	}
	return false
}
