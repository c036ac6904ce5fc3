package cassandra

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/gocql/gocql"
	"github.com/snapid/snapid/registry"
)

var _ registry.SequenceRegistry = (*Registry)(nil)

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
	return r.readGlobalAt(ctx, q, seq, gocql.Consistency(gocql.Serial))
}

// readGlobalAt reads the GLOBAL partition at cons.
func (r *Registry) readGlobalAt(ctx context.Context, q seqQuerier, seq string, cons gocql.Consistency) (*seqRow, []seqRow, error) {
	level := cons.String()
	if cons == gocql.Consistency(gocql.Serial) {
		level = "SERIAL" // gocql names only the non-serial levels
	}
	rows, err := q.readPartition(ctx, cons, seq, partGlobal)
	if err != nil {
		if noTable(err) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("snapid: %w: reading sequence %q at %s: %w", registry.ErrRegistry, seq, level, err)
	}
	return find(rows, kindGlobal, "", 0), rows, nil
}

func (r *Registry) readDC(ctx context.Context, q seqQuerier, seq, dc string) ([]seqRow, error) {
	rows, err := q.readPartition(ctx, gocql.Consistency(gocql.LocalSerial), seq, dcPart(dc))
	if err != nil && !noTable(err) {
		return nil, fmt.Errorf("snapid: %w: reading sequence %q of data centre %q at LOCAL_SERIAL: %w", registry.ErrRegistry, seq, dc, err)
	}
	return rows, nil
}

// info decodes the GLOBAL row (see storeNext); a row it cannot have
// written is ErrCorruptSequence.
func info(seq string, g *seqRow) (registry.SequenceInfo, error) {
	i := registry.SequenceInfo{Name: seq}
	var err error
	if i.Start, err = loadNum(seq, "GLOBAL's start", g.start); err != nil {
		return i, err
	}
	if i.Max, err = loadNum(seq, "GLOBAL's max", g.max); err != nil {
		return i, err
	}
	if i.Start == 0 || i.Max < i.Start {
		return i, fmt.Errorf("snapid: %w: sequence %q: GLOBAL's bounds [%d, %d]; nothing was handed out", registry.ErrCorruptSequence, seq, i.Start, i.Max)
	}
	if i.Next, err = loadNext(seq, "GLOBAL", g.next, i.Max); err != nil {
		return i, err
	}
	if i.Next < i.Start {
		return i, fmt.Errorf("snapid: %w: sequence %q: GLOBAL's next number %d is below its start %d; nothing was handed out",
			registry.ErrCorruptSequence, seq, i.Next, i.Start)
	}
	if g.at != nil {
		i.CreatedAt = *g.at
	}
	return i, nil
}

// rangeNext decodes a data centre range row's first, last and next.
func rangeNext(seq string, w *seqRow) (first, last, next uint64, err error) {
	if w.first < 1 {
		return 0, 0, 0, fmt.Errorf("snapid: %w: sequence %q: a range starts at %d", registry.ErrCorruptSequence, seq, w.first)
	}
	if last, err = loadNum(seq, "a range's last", w.last); err != nil {
		return 0, 0, 0, err
	}
	first = uint64(w.first)
	if next, err = loadNext(seq, fmt.Sprintf("range [%d, %d]", first, last), w.next, last); err != nil {
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
	for attempt := 0; attempt < claimAttempts; attempt++ {
		g, rows, err := r.readGlobal(ctx, q, seq)
		if err != nil {
			return registry.SequenceInfo{}, err
		}
		if g == nil {
			if err := r.checkNoRemnants(ctx, q, seq, dc, rows); err != nil {
				return registry.SequenceInfo{}, err
			}
		}
		token := newClaimToken()
		now := r.timestamp()
		var stmt seqStmt
		var want registry.SequenceInfo
		if g == nil {
			want = registry.SequenceInfo{Name: seq, Start: start, Max: max, Next: start, CreatedAt: now}
			stmt = seqStmt{r.seqs.stmts.insertGlobal, append(r.globalRow(seq), i64(start), i64(max), i64(start), now, token)}
		} else {
			cur, err := info(seq, g)
			if err != nil {
				return registry.SequenceInfo{}, err
			}
			max := max
			if keepMax {
				max = cur.Max // the update is conditional on it
			}
			if err := registry.CheckSequenceUpdate(cur, start, max); err != nil {
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
			return registry.SequenceInfo{}, err
		}
		if applied {
			return want, nil
		}
	}
	return registry.SequenceInfo{}, fmt.Errorf("snapid: %w: create sequence %q: the row kept changing", registry.ErrRegistry, seq)
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
	if err := registry.ValidateName(req.Sequence); err != nil {
		return registry.SequenceLease{}, fmt.Errorf("sequence name: %w", err)
	}
	if err := registry.ValidateName(req.Name); err != nil {
		return registry.SequenceLease{}, err
	}
	if err := checkOwner(req.Owner); err != nil {
		return registry.SequenceLease{}, err
	}
	if err := checkField("session", req.Session); err != nil {
		return registry.SequenceLease{}, err
	}
	if req.Min == 0 || req.Size < req.Min || req.Size > registry.MaxSequence {
		return registry.SequenceLease{}, invalidArg("lease of %d to %d numbers", req.Min, req.Size)
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
		rows, err := r.readDC(ctx, q, req.Sequence, dc)
		if err != nil {
			return registry.SequenceLease{}, err
		}
		host := find(rows, kindHost, req.Name, 0)
		ours := host != nil && str(host.session) == req.Session && str(host.owner) == req.Owner
		if ours && (u64(host.leaseFirst) != req.PrevFirst || u64(host.leaseLast) != req.PrevLast) {
			return r.leaseOf(req.Sequence, dc, host), fmt.Errorf("snapid: %w: sequence %q: the registry records this host's lease as [%d, %d], not [%d, %d]",
				registry.ErrLeaseMoved, req.Sequence, u64(host.leaseFirst), u64(host.leaseLast), req.PrevFirst, req.PrevLast)
		}
		if !ours && !nameChecked {
			h, err := r.Get(ctx, req.Name)
			if errors.Is(err, registry.ErrNotRegistered) || err == nil && (h.Owner != req.Owner || h.Session != req.Session || h.State != registry.StateActive) {
				return registry.SequenceLease{}, fmt.Errorf("snapid: %w: lease of sequence %q for %q: the name is not held under this claim (%s)",
					registry.ErrNameTaken, req.Sequence, req.Name, h)
			}
			if err != nil {
				return registry.SequenceLease{}, err
			}
			nameChecked = true
		}
		rgs, err := dcRanges(req.Sequence, rows)
		if err != nil {
			return registry.SequenceLease{}, err
		}
		pick := pickRange(rgs, req.Min)
		if pick == nil {
			if err := r.grant(ctx, q, req.Sequence, dc, rows, rgs, req.Min); err != nil {
				return registry.SequenceLease{}, err
			}
			continue
		}
		if err := r.verifyRange(ctx, q, req.Sequence, dc, pick); err != nil {
			return registry.SequenceLease{}, err
		}
		rg, first := pick.row, pick.next
		n := leaseLen(pick, req.Size, req.Min)
		l := registry.SequenceLease{Sequence: req.Sequence, DC: dc, Name: req.Name, Owner: req.Owner, Session: req.Session,
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
			return registry.SequenceLease{}, err
		}
		if applied {
			r.maybeGrant(req.Sequence, dc, rgs, n)
			return l, nil
		}
	}
	return registry.SequenceLease{}, fmt.Errorf("snapid: %w: lease %q: the data centre's ranges kept changing", registry.ErrRegistry, req.Sequence)
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

func sameHost(a, b *seqRow) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return same(a.owner, b.owner) && same(a.session, b.session) && same(a.leaseFirst, b.leaseFirst) && same(a.leaseLast, b.leaseLast)
}

func (r *Registry) leaseOf(seq, dc string, h *seqRow) registry.SequenceLease {
	l := registry.SequenceLease{Sequence: seq, DC: dc, Name: h.key, Owner: str(h.owner), Session: str(h.session),
		First: u64(h.leaseFirst), Last: u64(h.leaseLast), ClosedAt: u64(h.closedPos)}
	if h.at != nil {
		l.LeasedAt = *h.at
	}
	return l
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
	if h := find(rows, kindHost, name, 0); h != nil {
		return r.leaseOf(seq, dc, h), nil
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
