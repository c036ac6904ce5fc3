package cassandra

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/gocql/gocql"
	"github.com/snapid/snapid"
)

var _ snapid.SequenceRegistry = (*Registry)(nil)

// globalKey and hostKey are the clustering keys of the GLOBAL row and of a
// host row.
func (r *Registry) globalRow(seq string) []any {
	return []any{seq, partGlobal, kindGlobal, "", int64(0)}
}

func hostRow(seq, dc, name string) []any { return []any{seq, dcPart(dc), kindHost, name, int64(0)} }

func find(rows []seqRow, kind, key string, first int64) *seqRow {
	for i := range rows {
		if rows[i].kind == kind && rows[i].key == key && rows[i].first == first {
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
func (r *Registry) readGlobal(ctx context.Context, q seqQuerier, seq string) (*seqRow, []seqRow, error) {
	rows, err := q.readPartition(ctx, gocql.Consistency(gocql.Serial), seq, partGlobal)
	if err != nil {
		if noTable(err) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("snapid: %w: reading sequence %q at SERIAL: %w", snapid.ErrRegistry, seq, err)
	}
	return find(rows, kindGlobal, "", 0), rows, nil
}

func (r *Registry) readDC(ctx context.Context, q seqQuerier, seq, dc string) ([]seqRow, error) {
	rows, err := q.readPartition(ctx, gocql.Consistency(gocql.LocalSerial), seq, dcPart(dc))
	if err != nil && !noTable(err) {
		return nil, fmt.Errorf("snapid: %w: reading sequence %q of data centre %q at LOCAL_SERIAL: %w", snapid.ErrRegistry, seq, dc, err)
	}
	return rows, nil
}

// info decodes the GLOBAL row (see storeNext); a row it cannot have
// written is ErrCorruptSequence.
func info(seq string, g *seqRow) (snapid.SequenceInfo, error) {
	i := snapid.SequenceInfo{Name: seq}
	var err error
	if i.Start, err = loadNum(seq, "GLOBAL's start", g.start); err != nil {
		return i, err
	}
	if i.Max, err = loadNum(seq, "GLOBAL's max", g.max); err != nil {
		return i, err
	}
	if i.Start == 0 || i.Max < i.Start {
		return i, fmt.Errorf("snapid: %w: sequence %q: GLOBAL's bounds [%d, %d]; nothing was handed out", snapid.ErrCorruptSequence, seq, i.Start, i.Max)
	}
	if i.Next, err = loadNext(seq, "GLOBAL", g.next, i.Max); err != nil {
		return i, err
	}
	if i.Next < i.Start {
		return i, fmt.Errorf("snapid: %w: sequence %q: GLOBAL's next number %d is below its start %d; nothing was handed out",
			snapid.ErrCorruptSequence, seq, i.Next, i.Start)
	}
	if g.at != nil {
		i.CreatedAt = *g.at
	}
	return i, nil
}

// rangeNext decodes a data centre range row's first, last and next.
func rangeNext(seq string, w *seqRow) (first, last, next uint64, err error) {
	if w.first < 1 {
		return 0, 0, 0, fmt.Errorf("snapid: %w: sequence %q: a range starts at %d", snapid.ErrCorruptSequence, seq, w.first)
	}
	if last, err = loadNum(seq, "a range's last", w.last); err != nil {
		return 0, 0, 0, err
	}
	first = uint64(w.first)
	if next, err = loadNext(seq, fmt.Sprintf("range [%d, %d]", first, last), w.next, last); err != nil {
		return 0, 0, 0, err
	}
	if last < first || next < first {
		return 0, 0, 0, fmt.Errorf("snapid: %w: sequence %q: range [%d, %d] with next %d", snapid.ErrCorruptSequence, seq, first, last, next)
	}
	return first, last, next, nil
}

// CreateSequence implements snapid.SequenceRegistry.CreateSequence. It
// creates the sequences table if it is missing, then, at SERIAL, inserts
// the GLOBAL row (IF NOT EXISTS) or updates an existing one conditional on
// the next number and the max it read.
func (r *Registry) CreateSequence(ctx context.Context, seq string, start, max uint64) (snapid.SequenceInfo, error) {
	if err := snapid.CheckSequenceBounds(seq, start, max); err != nil {
		return snapid.SequenceInfo{}, err
	}
	q, _, err := r.seqQuerier(ctx)
	if err != nil {
		return snapid.SequenceInfo{}, err
	}
	if _, err := r.ensureTable(ctx, true); err != nil {
		return snapid.SequenceInfo{}, err
	}
	for attempt := 0; attempt < claimAttempts; attempt++ {
		g, _, err := r.readGlobal(ctx, q, seq)
		if err != nil {
			return snapid.SequenceInfo{}, err
		}
		token := newClaimToken()
		now := r.timestamp()
		var stmt seqStmt
		var want snapid.SequenceInfo
		if g == nil {
			want = snapid.SequenceInfo{Name: seq, Start: start, Max: max, Next: start, CreatedAt: now}
			stmt = seqStmt{r.seqs.stmts.insertGlobal, append(r.globalRow(seq), i64(start), i64(max), i64(start), now, token)}
		} else {
			cur, err := info(seq, g)
			if err != nil {
				return snapid.SequenceInfo{}, err
			}
			if err := snapid.CheckSequenceUpdate(cur, start, max); err != nil {
				return cur, err
			}
			want = cur
			// A raised start (allowed only before anything was handed
			// out, see CheckSequenceUpdate) becomes the sequence's start.
			want.Start, want.Max, want.Next = maxU(cur.Start, start), max, maxU(cur.Next, start)
			stmt = seqStmt{r.seqs.stmts.updateGlobal, append(append([]any{i64(want.Start), i64(max), storeNext(want.Next, max), token},
				r.globalRow(seq)...), g.next, g.max)}
		}
		applied, err := runLWT(ctx, r.log, "create sequence", seq,
			func() (bool, error) { return q.casBatch(ctx, gocql.Serial, gocql.Quorum, stmt) },
			func() (outcome, error) {
				g2, _, err := r.readGlobal(ctx, q, seq)
				switch {
				case err != nil:
					return outcomeLost, err
				case g2 != nil && str(g2.token) == token:
					return outcomeApplied, nil
				case g == nil && g2 == nil, g != nil && g2 != nil && same(g2.next, g.next) && same(g2.max, g.max):
					return outcomeResend, nil
				}
				return outcomeLost, nil
			})
		if err != nil {
			return snapid.SequenceInfo{}, err
		}
		if applied {
			return want, nil
		}
	}
	return snapid.SequenceInfo{}, fmt.Errorf("snapid: %w: create sequence %q: the row kept changing", snapid.ErrRegistry, seq)
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// LeaseSequence implements snapid.SequenceRegistry.LeaseSequence. It reads
// the data centre's partition at LOCAL_SERIAL, takes the lease from the
// lowest range with room with one conditional batch at LOCAL_SERIAL (the
// range's next number, old → new, and the host's row, conditional on what
// was read), and takes a range from GLOBAL (at SERIAL) first when the data
// centre has none with room, or in the background when half of its latest
// range is used. A host row of another claim is taken over only after the
// name's row, read at SERIAL, shows that the request carries the name's
// current claim.
func (r *Registry) LeaseSequence(ctx context.Context, req snapid.LeaseRequest) (snapid.SequenceLease, error) {
	if err := snapid.ValidateName(req.Sequence); err != nil {
		return snapid.SequenceLease{}, fmt.Errorf("sequence name: %w", err)
	}
	if err := snapid.ValidateName(req.Name); err != nil {
		return snapid.SequenceLease{}, err
	}
	if err := checkOwner(req.Owner); err != nil {
		return snapid.SequenceLease{}, err
	}
	if err := checkField("session", req.Session); err != nil {
		return snapid.SequenceLease{}, err
	}
	if req.Min == 0 || req.Size < req.Min || req.Size > snapid.MaxSequence {
		return snapid.SequenceLease{}, invalidArg("lease of %d to %d numbers", req.Min, req.Size)
	}
	q, dc, err := r.seqQuerier(ctx)
	if err != nil {
		return snapid.SequenceLease{}, err
	}
	nameChecked := false
	for attempt := 0; attempt < claimAttempts*2; attempt++ {
		if attempt > 0 {
			if err := backoff(ctx, attempt); err != nil {
				return snapid.SequenceLease{}, fmt.Errorf("snapid: %w: lease %q: %w", snapid.ErrRegistry, req.Sequence, err)
			}
		}
		rows, err := r.readDC(ctx, q, req.Sequence, dc)
		if err != nil {
			return snapid.SequenceLease{}, err
		}
		host := find(rows, kindHost, req.Name, 0)
		ours := host != nil && str(host.session) == req.Session && str(host.owner) == req.Owner
		if ours && (u64(host.leaseFirst) != req.PrevFirst || u64(host.leaseLast) != req.PrevLast) {
			return r.leaseOf(req.Sequence, dc, host), fmt.Errorf("snapid: %w: sequence %q: the registry records this host's lease as [%d, %d], not [%d, %d]",
				snapid.ErrLeaseMoved, req.Sequence, u64(host.leaseFirst), u64(host.leaseLast), req.PrevFirst, req.PrevLast)
		}
		if !ours && !nameChecked {
			h, err := r.Get(ctx, req.Name)
			if errors.Is(err, snapid.ErrNotRegistered) || err == nil && (h.Owner != req.Owner || h.Session != req.Session || h.State != snapid.StateActive) {
				return snapid.SequenceLease{}, fmt.Errorf("snapid: %w: lease of sequence %q for %q: the name is not held under this claim (%s)",
					snapid.ErrNameTaken, req.Sequence, req.Name, h)
			}
			if err != nil {
				return snapid.SequenceLease{}, err
			}
			nameChecked = true
		}
		rgs, err := dcRanges(req.Sequence, rows)
		if err != nil {
			return snapid.SequenceLease{}, err
		}
		pick := pickRange(rgs, req.Min)
		if pick == nil {
			if err := r.grant(ctx, q, req.Sequence, dc, rows, rgs, req.Min); err != nil {
				return snapid.SequenceLease{}, err
			}
			continue
		}
		rg, first := pick.row, pick.next
		n := leaseLen(pick, req.Size, req.Min)
		l := snapid.SequenceLease{Sequence: req.Sequence, DC: dc, Name: req.Name, Owner: req.Owner, Session: req.Session,
			First: first, Last: first + n - 1, LeasedAt: r.timestamp()}
		token := newClaimToken()
		stmts := []seqStmt{{r.seqs.stmts.advanceRange, []any{storeNext(first+n, pick.last), req.Sequence, dcPart(dc), kindRange, "", rg.first, rg.next}}}
		hostVals := []any{req.Owner, req.Session, i64(l.First), i64(l.Last), l.LeasedAt, token}
		if host == nil {
			stmts = append(stmts, seqStmt{r.seqs.stmts.insertHost, append(hostRow(req.Sequence, dc, req.Name), hostVals...)})
		} else {
			stmts = append(stmts, seqStmt{r.seqs.stmts.updateHost, append(append(hostVals, hostRow(req.Sequence, dc, req.Name)...),
				host.owner, host.session, host.leaseFirst, host.leaseLast)})
		}
		applied, err := runLWT(ctx, r.log, "lease", req.Sequence,
			func() (bool, error) { return q.casBatch(ctx, gocql.LocalSerial, gocql.LocalQuorum, stmts...) },
			func() (outcome, error) {
				now, err := r.readDC(ctx, q, req.Sequence, dc)
				if err != nil {
					return outcomeLost, err
				}
				h2, rg2 := find(now, kindHost, req.Name, 0), find(now, kindRange, "", rg.first)
				switch {
				case h2 != nil && str(h2.token) == token:
					return outcomeApplied, nil
				case rg2 != nil && same(rg2.next, rg.next) && sameHost(h2, host):
					return outcomeResend, nil
				}
				return outcomeLost, nil
			})
		if err != nil {
			return snapid.SequenceLease{}, err
		}
		if applied {
			r.maybeGrant(req.Sequence, dc, rgs, n)
			return l, nil
		}
	}
	return snapid.SequenceLease{}, fmt.Errorf("snapid: %w: lease %q: the data centre's ranges kept changing", snapid.ErrRegistry, req.Sequence)
}

func sameHost(a, b *seqRow) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return same(a.owner, b.owner) && same(a.session, b.session) && same(a.leaseFirst, b.leaseFirst) && same(a.leaseLast, b.leaseLast)
}

func (r *Registry) leaseOf(seq, dc string, h *seqRow) snapid.SequenceLease {
	l := snapid.SequenceLease{Sequence: seq, DC: dc, Name: h.key, Owner: str(h.owner), Session: str(h.session),
		First: u64(h.leaseFirst), Last: u64(h.leaseLast), ClosedAt: u64(h.closedPos)}
	if h.at != nil {
		l.LeasedAt = *h.at
	}
	return l
}

// dcRange is a data centre's range row, decoded.
type dcRange struct {
	row               *seqRow
	first, last, next uint64 // next is last+1 when used up
}

func (g dcRange) left() uint64 { return g.last - g.next + 1 }

// dcRanges decodes the range rows of a data centre's partition, sorted by
// first; a row it cannot have written is ErrCorruptSequence.
func dcRanges(seq string, rows []seqRow) ([]dcRange, error) {
	var out []dcRange
	for i := range rows {
		if rows[i].kind != kindRange {
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
			var now []seqRow
			if now, err = r.readDC(ctx, q, seq, dc); err == nil {
				var rgs []dcRange
				if rgs, err = dcRanges(seq, now); err == nil {
					err = r.grant(ctx, q, seq, dc, now, rgs, 1)
				}
			}
		}
		if err != nil && !errors.Is(err, snapid.ErrExhausted) {
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
func (r *Registry) grant(ctx context.Context, q seqQuerier, seq, dc string, dcRows []seqRow, rgs []dcRange, min uint64) error {
	g, rows, err := r.readGlobal(ctx, q, seq)
	if err != nil {
		return err
	}
	if g == nil {
		return fmt.Errorf("snapid: %w: %q (create it first: snapctl seq create)", snapid.ErrNoSequence, seq)
	}
	repaired := false
	for i := range rows {
		w := &rows[i]
		if w.kind == kindGrant && w.key == dc && find(dcRows, kindRange, "", w.first) == nil {
			if w.first < 1 || w.last == nil || *w.last < w.first {
				return fmt.Errorf("snapid: %w: sequence %q: GLOBAL's grant to %q starts at %d", snapid.ErrCorruptSequence, seq, dc, w.first)
			}
			if err := r.insertRange(ctx, q, seq, dc, uint64(w.first), uint64(*w.last), w.at); err != nil {
				return err
			}
			repaired = true
		}
	}
	if repaired {
		return nil // the caller reads the data centre again
	}
	gi, err := info(seq, g)
	if err != nil {
		return err
	}
	next, maxN := gi.Next, gi.Max
	if next > maxN || maxN-next+1 < min {
		e := &snapid.SequenceExhaustedError{Sequence: seq, DC: dc, Max: maxN, Wanted: min}
		if next <= maxN {
			e.GlobalLeft = maxN - next + 1
		}
		for _, g := range rgs {
			e.DCLeft += g.left()
		}
		return e
	}
	size := max(r.rangeSize(rgs), min)
	last := maxN
	if maxN-next >= size {
		last = next + size - 1
	}
	token := newClaimToken()
	now := r.timestamp()
	stmts := []seqStmt{
		{r.seqs.stmts.advanceGlobal, append(append([]any{storeNext(last+1, maxN), token}, r.globalRow(seq)...), g.next, g.max)},
		{r.seqs.stmts.insertGrant, []any{seq, partGlobal, kindGrant, dc, int64(next), i64(last), now, token}},
	}
	applied, err := runLWT(ctx, r.log, "grant", seq,
		func() (bool, error) { return q.casBatch(ctx, gocql.Serial, gocql.Quorum, stmts...) },
		func() (outcome, error) {
			g2, rows2, err := r.readGlobal(ctx, q, seq)
			if err != nil {
				return outcomeLost, err
			}
			if w := find(rows2, kindGrant, dc, int64(next)); w != nil && str(w.token) == token {
				return outcomeApplied, nil
			}
			if g2 != nil && same(g2.next, g.next) && same(g2.max, g.max) {
				return outcomeResend, nil
			}
			return outcomeLost, nil
		})
	if err != nil || !applied {
		return err // not applied: another grant moved GLOBAL; the caller reads again
	}
	r.log.Info("snapid: data centre took a sequence range", "sequence", seq, "dc", dc, "first", next, "last", last)
	return r.insertRange(ctx, q, seq, dc, next, last, &now)
}

// insertRange records a granted range in the data centre's partition, at
// LOCAL_SERIAL, if it is not there.
func (r *Registry) insertRange(ctx context.Context, q seqQuerier, seq, dc string, first, last uint64, at *time.Time) error {
	var when time.Time
	if at != nil {
		when = *at
	}
	stmt := seqStmt{r.seqs.stmts.insertRange, []any{seq, dcPart(dc), kindRange, "", int64(first), i64(last), i64(first), when}}
	_, err := runLWT(ctx, r.log, "range", seq,
		func() (bool, error) { return q.casBatch(ctx, gocql.LocalSerial, gocql.LocalQuorum, stmt) },
		func() (outcome, error) {
			rows, err := r.readDC(ctx, q, seq, dc)
			if err != nil {
				return outcomeLost, err
			}
			if find(rows, kindRange, "", int64(first)) != nil {
				return outcomeApplied, nil
			}
			return outcomeResend, nil
		})
	return err
}

// rangeSize is the size of the data centre's next range: what its hosts
// leased from its latest range, per second since that range was granted,
// times the horizon; at least the floor.
func (r *Registry) rangeSize(rgs []dcRange) uint64 {
	horizon, floor := r.sizing()
	if len(rgs) == 0 || rgs[len(rgs)-1].row.at == nil {
		return floor
	}
	latest := rgs[len(rgs)-1]
	used := latest.next - latest.first
	elapsed := r.now().Sub(*latest.row.at)
	if elapsed <= 0 || used == 0 {
		return floor
	}
	perHorizon := float64(used) / elapsed.Seconds() * horizon.Seconds()
	if perHorizon <= float64(floor) {
		return floor
	}
	return uint64(math.Min(perHorizon, float64(snapid.MaxSequence/4)))
}

// HostLease implements snapid.SequenceRegistry.HostLease: the host's row
// in its data centre's partition, read at LOCAL_SERIAL.
func (r *Registry) HostLease(ctx context.Context, seq, name string) (snapid.SequenceLease, error) {
	if err := snapid.ValidateName(seq); err != nil {
		return snapid.SequenceLease{}, fmt.Errorf("sequence name: %w", err)
	}
	if err := snapid.ValidateName(name); err != nil {
		return snapid.SequenceLease{}, err
	}
	q, dc, err := r.seqQuerier(ctx)
	if err != nil {
		return snapid.SequenceLease{}, err
	}
	rows, err := r.readDC(ctx, q, seq, dc)
	if err != nil {
		return snapid.SequenceLease{}, err
	}
	if h := find(rows, kindHost, name, 0); h != nil {
		return r.leaseOf(seq, dc, h), nil
	}
	if len(rows) == 0 {
		// No range in this data centre yet: does the sequence exist?
		g, _, err := r.readGlobal(ctx, q, seq)
		if err != nil {
			return snapid.SequenceLease{}, err
		}
		if g == nil {
			return snapid.SequenceLease{}, fmt.Errorf("snapid: %w: %q", snapid.ErrNoSequence, seq)
		}
	}
	return snapid.SequenceLease{}, nil
}

// SequenceStatus implements snapid.SequenceRegistry.SequenceStatus: GLOBAL
// read at SERIAL, this data centre's partition at LOCAL_SERIAL, and the
// partitions of the other data centres GLOBAL granted ranges to at
// LOCAL_QUORUM (they may lag behind those data centres' latest leases).
func (r *Registry) SequenceStatus(ctx context.Context, seq string) (snapid.SequenceStatus, error) {
	if err := snapid.ValidateName(seq); err != nil {
		return snapid.SequenceStatus{}, fmt.Errorf("sequence name: %w", err)
	}
	q, dc, err := r.seqQuerier(ctx)
	if err != nil {
		return snapid.SequenceStatus{}, err
	}
	g, rows, err := r.readGlobal(ctx, q, seq)
	if err != nil {
		return snapid.SequenceStatus{}, err
	}
	if g == nil {
		return snapid.SequenceStatus{}, fmt.Errorf("snapid: %w: %q", snapid.ErrNoSequence, seq)
	}
	gi, err := info(seq, g)
	if err != nil {
		return snapid.SequenceStatus{}, err
	}
	st := snapid.SequenceStatus{SequenceInfo: gi}
	dcs := map[string]bool{dc: true}
	for _, w := range rows {
		if w.kind == kindGrant {
			st.Grants = append(st.Grants, rangeOf(w.key, w))
			dcs[w.key] = true
		}
	}
	names := make([]string, 0, len(dcs))
	for d := range dcs {
		names = append(names, d)
	}
	sort.Strings(names)
	for _, d := range names {
		cons := gocql.LocalQuorum
		if d == dc {
			cons = gocql.Consistency(gocql.LocalSerial)
		}
		dcRows, err := q.readPartition(ctx, cons, seq, dcPart(d))
		if err != nil {
			return st, fmt.Errorf("snapid: %w: reading sequence %q of data centre %q: %w", snapid.ErrRegistry, seq, d, err)
		}
		rgs, err := dcRanges(seq, dcRows)
		if err != nil {
			return st, err
		}
		for _, g := range rgs {
			rg := rangeOf(d, *g.row)
			rg.Next = g.next
			st.Ranges = append(st.Ranges, rg)
		}
		for _, w := range dcRows {
			switch w.kind {
			case kindHost:
				st.Leases = append(st.Leases, r.leaseOf(seq, d, &w))
			}
		}
	}
	return st, nil
}

func rangeOf(dc string, w seqRow) snapid.SequenceRange {
	rg := snapid.SequenceRange{DC: dc, First: uint64(w.first), Last: u64(w.last)}
	if w.at != nil {
		rg.GrantedAt = *w.at
	}
	return rg
}

// ListSequences implements snapid.SequenceRegistry.ListSequences: the
// status of every sequence (none if the sequences table does not exist),
// sorted by name.
func (r *Registry) ListSequences(ctx context.Context) ([]snapid.SequenceStatus, error) {
	q, _, err := r.seqQuerier(ctx)
	if err != nil {
		return nil, err
	}
	if ok, err := r.ensureTable(ctx, false); err != nil || !ok {
		return nil, err
	}
	globals, err := q.readAllGlobal(ctx)
	if err != nil {
		return nil, fmt.Errorf("snapid: %w: listing sequences: %w", snapid.ErrRegistry, err)
	}
	var out []snapid.SequenceStatus
	for _, g := range globals {
		if g.part != partGlobal {
			continue
		}
		st, err := r.SequenceStatus(ctx, g.seq)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return strings.Compare(out[i].Name, out[j].Name) < 0 })
	return out, nil
}
