package cql

import "context"

// NumRow is a row of the numbers table.
type NumRow struct {
	Number      *int64
	Name, Token *string
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
	// Names reads every name's row: name → number.
	Names(ctx context.Context) (map[string]uint64, error)
}
