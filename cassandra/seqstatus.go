package cassandra

import (
	"context"
	"fmt"
	"sort"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
)

// What a sequence has handed out, for audits, metrics and seq show.

// SequenceStatus implements registry.SequenceRegistry.SequenceStatus: GLOBAL
// read at QUORUM and every data centre's partition (this one's at its
// commit consistency, the others' at QUORUM), no Paxos round: it feeds
// metrics, audits and seq show, which every host with a sequence open asks
// for once a minute, and a serial read per host would put that load on
// the one partition every range grant needs. What it sees is every
// committed change; a change whose Paxos round is still in flight shows at
// the next read. GLOBAL is read again after the data centres: a grant
// between the reads would show a range GLOBAL did not list, so the reads
// are made again (up to statusReads times) until GLOBAL is unchanged.
// Nothing that hands out numbers reads it.
func (r *Registry) SequenceStatus(ctx context.Context, seq string) (registry.SequenceStatus, error) {
	if err := registry.ValidateName(seq); err != nil {
		return registry.SequenceStatus{}, fmt.Errorf("sequence name: %w", err)
	}
	q, dc, err := r.seqQuerier(ctx)
	if err != nil {
		return registry.SequenceStatus{}, err
	}
	g, rows, err := r.readGlobalAt(ctx, q, seq, gocql.Quorum)
	for range statusReads {
		if err != nil {
			return registry.SequenceStatus{}, err
		}
		if g == nil {
			return registry.SequenceStatus{}, fmt.Errorf("snapid: %w: %q", registry.ErrNoSequence, seq)
		}
		gi, err := info(seq, g)
		if err != nil {
			return registry.SequenceStatus{}, err
		}
		st := registry.SequenceStatus{SequenceInfo: gi}
		for _, d := range statusGrants(&st, rows, dc) {
			if err := r.addDCStatus(ctx, q, &st, seq, d, d == dc); err != nil {
				return st, err
			}
		}
		g2, rows2, err2 := r.readGlobalAt(ctx, q, seq, gocql.Quorum)
		if err2 == nil && g2 != nil && same(g2.Next, g.Next) && same(g2.Max, g.Max) && len(rows2) == len(rows) {
			return st, nil
		}
		g, rows, err = g2, rows2, err2
	}
	return registry.SequenceStatus{}, fmt.Errorf("snapid: %w: sequence %q: its grants kept changing while its status was read", registry.ErrRegistry, seq)
}

// statusReads bounds the reads of SequenceStatus.
const statusReads = 4

// statusGrants adds the grants of GLOBAL's partition (rows) to st and
// returns the data centres to read, sorted: this one (dc) and every one
// granted a range.
func statusGrants(st *registry.SequenceStatus, rows []cql.SeqRow, dc string) []string {
	dcs := map[string]bool{dc: true}
	for _, w := range rows {
		if w.Kind == cql.KindGrant {
			st.Grants = append(st.Grants, rangeOf(w.Key, w))
			dcs[w.Key] = true
		}
	}
	names := make([]string, 0, len(dcs))
	for d := range dcs {
		names = append(names, d)
	}
	sort.Strings(names)
	return names
}

// addDCStatus reads data centre d's partition of sequence seq (this
// Registry's own, at its commit consistency; another's at QUORUM, which
// works whatever replicas this data centre holds) and adds its ranges (each checked against GLOBAL's bounds,
// st's SequenceInfo) and its hosts' leases to st.
func (r *Registry) addDCStatus(ctx context.Context, q cql.SeqQuerier, st *registry.SequenceStatus, seq, d string, own bool) error {
	cons := gocql.Quorum
	if own {
		cons = r.dcPaxos().commit()
	}
	dcRows, err := q.ReadPartition(ctx, cons, seq, cql.DCPart(d))
	if err != nil {
		return fmt.Errorf("snapid: %w: reading sequence %q of data centre %q: %w", registry.ErrRegistry, seq, d, err)
	}
	rgs, err := dcRanges(seq, dcRows)
	if err != nil {
		return err
	}
	for _, g := range rgs {
		if err := checkRange(seq, d, st.SequenceInfo, &g); err != nil {
			return err
		}
		rg := rangeOf(d, *g.row)
		rg.Next = g.next
		st.Ranges = append(st.Ranges, rg)
	}
	for _, w := range dcRows {
		switch w.Kind {
		case cql.KindHost:
			st.Leases = append(st.Leases, w.Lease(seq, d))
		}
	}
	return nil
}

func rangeOf(dc string, w cql.SeqRow) registry.SequenceRange {
	rg := registry.SequenceRange{DC: dc, First: uint64(w.First), Last: u64(w.Last)}
	if w.At != nil {
		rg.GrantedAt = *w.At
	}
	return rg
}

// ListSequences implements registry.SequenceRegistry.ListSequences: the
// status of every sequence (none if the sequences table does not exist),
// sorted by name.
func (r *Registry) ListSequences(ctx context.Context) ([]registry.SequenceStatus, error) {
	q, _, err := r.seqQuerier(ctx)
	if err != nil {
		return nil, err
	}
	if ok, err := r.ensureTable(ctx, false); err != nil || !ok {
		return nil, err
	}
	globals, err := q.ReadAllGlobal(ctx)
	if err != nil {
		return nil, fmt.Errorf("snapid: %w: listing sequences: %w", registry.ErrRegistry, err)
	}
	var out []registry.SequenceStatus
	for _, g := range globals {
		if g.Part != cql.PartGlobal {
			continue
		}
		st, err := r.SequenceStatus(ctx, g.Seq)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return strings.Compare(out[i].Name, out[j].Name) < 0 })
	return out, nil
}

// otherDCsLeft returns, for a lease that cannot be had in data centre dc,
// what the ranges of every other data centre GLOBAL granted a range to
// hold unleased (a grant whose range its data centre has not recorded yet
// counts whole), read as SequenceStatus reads them: GLOBAL at QUORUM,
// each data centre at LOCAL_QUORUM, a view that may lag its latest
// leases. nil when there are none, or they could not be read.
func (r *Registry) otherDCsLeft(ctx context.Context, q cql.SeqQuerier, seq, dc string) map[string]uint64 {
	_, rows, err := r.readGlobalAt(ctx, q, seq, gocql.Quorum)
	if err != nil {
		return nil
	}
	grants := map[string][]cql.SeqRow{}
	for _, w := range rows {
		if w.Kind == cql.KindGrant && w.Key != dc {
			grants[w.Key] = append(grants[w.Key], w)
		}
	}
	if len(grants) == 0 {
		return nil
	}
	out := make(map[string]uint64, len(grants))
	for d, gs := range grants {
		dcRows, err := q.ReadPartition(ctx, gocql.LocalQuorum, seq, cql.DCPart(d))
		if err != nil {
			return nil
		}
		rgs, err := dcRanges(seq, dcRows)
		if err != nil {
			return nil
		}
		for _, g := range rgs {
			out[d] += g.left()
		}
		for _, w := range gs {
			if find(dcRows, cql.KindRange, "", w.First) == nil && w.First > 0 && w.Last != nil && *w.Last >= w.First {
				out[d] += uint64(*w.Last-w.First) + 1
			}
		}
	}
	return out
}
