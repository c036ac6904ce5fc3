package cql

import (
	"context"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/registry"
)

// Backend is what a Registry runs over in place of a gocql session: its
// queriers, its consistencies, its clock and its waits. A Registry on a
// Backend has no session: List reads through Names (which must be a
// RowLister), and it neither creates nor checks the schema.
type Backend struct {
	DC          string // the coordinator's data centre (Config.LocalDC)
	Consistency gocql.Consistency
	Serial      gocql.Consistency
	Now         func() time.Time
	// Wait waits d, or until ctx ends, between retries and attempts.
	Wait    func(ctx context.Context, d time.Duration) error
	Names   CASQuerier
	Numbers NumQuerier
	Seqs    SeqQuerier // its reads are retried as the adapter's are
	// SeqHorizon and SeqFloor size the ranges a data centre takes
	// (cassandra.Registry.SetSequenceSizing).
	SeqHorizon time.Duration
	SeqFloor   uint64
}

// Registry is package cassandra's Registry, as
// cassandra.NewBackendRegistry returns it.
type Registry interface {
	registry.Registry
	registry.SequenceRegistry
	registry.NumberRegistry
	// Close closes the Registry (waits for its background range grants).
	Close()
}
