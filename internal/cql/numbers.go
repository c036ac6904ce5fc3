package cql

import (
	"context"
	"strings"
	"time"
)

// NumRow is a row of the numbers table.
type NumRow struct {
	Number      *int64
	Name, Token *string
}

// NumTaken is a number row of the table: the node number taken for a
// name, and when it was written (zero if the querier cannot tell).
type NumTaken struct {
	Number uint64
	At     time.Time
}

// NumTable is the numbers table read whole: each name's number (its
// name: row), and the numbers taken for each name (its number: rows; a
// name whose assignment did not complete has one taken and none given).
type NumTable struct {
	Given map[string]uint64
	Taken map[string][]NumTaken
}

// Add records one row of the table read whole into t (whose maps are
// made): key is its id, n its number, name its name, written the write
// time of its name in microseconds since the epoch (nil: unknown). Rows
// other than name: and number: ones, and rows without a positive
// number, are left out.
func (t NumTable) Add(key string, n *int64, name *string, written *int64) {
	if n == nil || *n <= 0 {
		return
	}
	if nm, ok := strings.CutPrefix(key, "name:"); ok {
		t.Given[nm] = uint64(*n)
		return
	}
	if !strings.HasPrefix(key, "number:") || name == nil || *name == "" {
		return
	}
	taken := NumTaken{Number: uint64(*n)}
	if written != nil && *written > 0 {
		taken.At = time.UnixMicro(*written).UTC()
	}
	t.Taken[*name] = append(t.Taken[*name], taken)
}

// NumQuerier is what node numbers need from Cassandra; the adapter's
// tests wrap it to lose replies.
type NumQuerier interface {
	// Insert runs INSERT … IF NOT EXISTS of key's row; when not applied,
	// cur is the row there.
	Insert(ctx context.Context, key string, number uint64, name, token string) (applied bool, cur NumRow, err error)
	// Read reads key's row at SERIAL (serial) or at the configured
	// consistency; found is false if there is none.
	Read(ctx context.Context, key string, serial bool) (row NumRow, found bool, err error)
	// Hint writes the next row without a condition.
	Hint(ctx context.Context, n uint64) error
	// Names reads the whole table at the configured consistency.
	Names(ctx context.Context) (NumTable, error)
}
