package cassandra

import (
	"log/slog"

	"github.com/snapid/snapid/internal/cql"
)

// NewBackendRegistry returns a Registry with no session that runs its
// statements through b's queriers, and a function that waits until the
// Registry has no background range grant running. Its caller is the
// simulated CQL cluster (internal/simcql), which runs this Registry,
// unchanged, over simulated nodes; a program's Registry comes from
// NewRegistry.
func NewBackendRegistry(b cql.Backend) (*Registry, func()) {
	r := newBackendRegistry(b)
	return r, r.seqs.wg.Wait
}

// newBackendRegistry is a Registry with no session, over the queriers of
// b (see cql.Backend), in the default keyspace and table.
func newBackendRegistry(b cql.Backend) *Registry {
	log := slog.New(slog.DiscardHandler)
	r := newRegistry(nil, &gocqlQuerier{}, DefaultKeyspace, DefaultTable, log)
	r.q = b.Names
	r.now, r.localDC, r.serial, r.cons = b.Now, b.DC, b.Serial, b.Consistency
	r.wait = b.Wait
	r.nums.q = b.Numbers
	r.seqs.q = &retryingSeqQuerier{SeqQuerier: b.Seqs, log: log, wait: r.wait}
	r.seqs.dc, r.seqs.stmts, r.seqs.table = b.DC, newSeqStatements(DefaultKeyspace), true
	r.seqs.cfg.LocalDC = b.DC
	r.seqs.horizon, r.seqs.floor = b.SeqHorizon, b.SeqFloor
	return r
}
