// Package cql holds what the Cassandra adapter (package cassandra) sends
// to and reads from Cassandra, below its Registry: the rows of its tables
// as stored, and the queriers the Registry runs its statements through.
// The adapter's queriers run them on a gocql session; another
// implementation (the simulated CQL cluster, internal/simcql) runs the
// same Registry over other storage. Only the adapter and what runs it may
// import this package.
package cql

import (
	"context"
	"time"

	"github.com/snapid/snapid/registry"
)

// Column is a column of a table and its CQL type.
type Column struct{ Name, Type string }

// Columns are the registry table's columns and CQL types, in the order of
// the SELECTs.
var Columns = []Column{
	{"name", "text"},
	{"owner", "text"},
	{"hostname", "text"},
	{"address", "text"},
	{"machine_id", "text"},
	{"registered_at", "timestamp"},
	{"last_seen", "timestamp"},
	{"reserved", "bigint"},
	{"state", "text"},
	{"claim_token", "text"},
}

// Record is a registry row as stored. Pointers distinguish null (or, in an
// LWT's reply, a column that was not returned) from an empty value, so that
// a condition on a partial row written by another tool binds null where the
// row holds null.
type Record struct {
	Name, Owner, Hostname, Address, MachineID *string
	RegisteredAt, LastSeen                    *time.Time
	Reserved                                  *int64
	State, Token                              *string
}

// Dests returns scan destinations in the order of Columns.
func (rec *Record) Dests() []any {
	return []any{&rec.Name, &rec.Owner, &rec.Hostname, &rec.Address, &rec.MachineID,
		&rec.RegisteredAt, &rec.LastSeen, &rec.Reserved, &rec.State, &rec.Token}
}

// DestMap returns the destinations by column name, for MapScanCAS, which
// scans into the values already in its map.
func (rec *Record) DestMap() map[string]any {
	m := make(map[string]any, len(Columns)+1)
	for i, d := range rec.Dests() {
		m[Columns[i].Name] = d
	}
	return m
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func tm(p *time.Time) time.Time {
	if p == nil {
		return time.Time{}
	}
	return *p
}

// Holder is the row as the registry reports it.
func (rec *Record) Holder() registry.Holder {
	var reserved uint64
	if rec.Reserved != nil {
		reserved = uint64(*rec.Reserved) // bit for bit (the column is a signed bigint)
	}
	return registry.Holder{
		Name: str(rec.Name), Owner: str(rec.Owner),
		Hostname: str(rec.Hostname), Address: str(rec.Address), MachineID: str(rec.MachineID),
		State: str(rec.State), RegisteredAt: tm(rec.RegisteredAt), LastSeen: tm(rec.LastSeen),
		Reserved: reserved, Session: str(rec.Token),
	}
}

// CASQuerier is what the registry needs from Cassandra for its rows.
// The adapter's gocqlQuerier is the real one; its tests wrap it to lose
// replies.
type CASQuerier interface {
	// CAS runs a conditional statement (it must have an IF clause) at the
	// registry's consistency and serial consistency. When it is not
	// applied, rec receives the columns Cassandra sent back: the whole row
	// for INSERT … IF NOT EXISTS, the condition's columns for an UPDATE.
	CAS(ctx context.Context, rec *Record, stmt string, args ...any) (applied bool, err error)
	// SerialRead reads the row of name at SERIAL (or LOCAL_SERIAL)
	// consistency into rec; found is false if there is no row.
	SerialRead(ctx context.Context, rec *Record, name string) (found bool, err error)
}

// RowLister is a CASQuerier that reads every row itself (one with no
// gocql session, such as the simulated cluster's).
type RowLister interface {
	List(ctx context.Context) ([]Record, error)
}
