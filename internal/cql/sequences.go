package cql

import (
	"context"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/registry"
)

// Row kinds of the sequences table (the first clustering column).
const (
	KindGlobal = "global" // part "global": start, max, next, at (created), token
	KindGrant  = "grant"  // part "global", key = data centre: [first, last], at (granted), token
	KindRange  = "range"  // part "dc:<dc>": [first, last], next, at (granted)
	KindHost   = "host"   // part "dc:<dc>", key = node name: owner, session, [lease_first, lease_last], at, token
)

// PartGlobal is the part of a sequence's GLOBAL partition.
const PartGlobal = "global"

// DCPart is the part of data centre dc's partition of a sequence.
func DCPart(dc string) string { return "dc:" + dc }

// SeqColumns are the sequences table's columns and CQL types, in the
// order of SeqRow.Dests.
var SeqColumns = []Column{
	{"seq", "text"}, {"part", "text"}, {"kind", "text"}, {"key", "text"}, {"first", "bigint"},
	{"last", "bigint"}, {"next", "bigint"}, {"start", "bigint"}, {"max", "bigint"},
	{"owner", "text"}, {"session", "text"}, {"lease_first", "bigint"}, {"lease_last", "bigint"},
	{"at", "timestamp"}, {"lwt_token", "text"}, {"closed_pos", "bigint"},
}

// SeqRow is a row of the sequences table. Numbers are below 2^63 (see
// registry.MaxSequence), so the signed bigint order is their order.
type SeqRow struct {
	Seq, Part, Kind, Key   string
	First                  int64
	Last, Next, Start, Max *int64
	Owner, Session         *string
	LeaseFirst, LeaseLast  *int64
	At                     *time.Time
	Token                  *string
	ClosedPos              *int64
}

// Dests returns scan destinations in the order of SeqColumns.
func (w *SeqRow) Dests() []any {
	return []any{&w.Seq, &w.Part, &w.Kind, &w.Key, &w.First, &w.Last, &w.Next, &w.Start, &w.Max,
		&w.Owner, &w.Session, &w.LeaseFirst, &w.LeaseLast, &w.At, &w.Token, &w.ClosedPos}
}

func u64(p *int64) uint64 {
	if p == nil || *p < 0 {
		return 0
	}
	return uint64(*p)
}

// Lease is the host row w of data centre dc's partition of sequence seq,
// as the registry reports it.
func (w *SeqRow) Lease(seq, dc string) registry.SequenceLease {
	l := registry.SequenceLease{Sequence: seq, DC: dc, Name: w.Key, Owner: str(w.Owner), Session: str(w.Session),
		First: u64(w.LeaseFirst), Last: u64(w.LeaseLast), ClosedAt: u64(w.ClosedPos)}
	if w.At != nil {
		l.LeasedAt = *w.At
	}
	return l
}

// SeqStmt is one statement of a conditional batch.
type SeqStmt struct {
	Stmt string
	Args []any
}

// SeqQuerier is what sequences need from Cassandra. The adapter's
// gocqlSeqQuerier is the real one; its tests wrap it to lose replies.
type SeqQuerier interface {
	// CASBatch runs a conditional batch (one statement or more, one
	// partition) with the given serial consistency and commit
	// consistency, and reports whether it was applied.
	CASBatch(ctx context.Context, serial gocql.Consistency, cons gocql.Consistency, stmts ...SeqStmt) (bool, error)
	// ReadPartition reads every row of one partition at cons (a serial
	// consistency for reads that must see every completed LWT).
	ReadPartition(ctx context.Context, cons gocql.Consistency, seq, part string) ([]SeqRow, error)
	// ReadAllGlobal reads every sequence's GLOBAL row (for lists).
	ReadAllGlobal(ctx context.Context) ([]SeqRow, error)
}
