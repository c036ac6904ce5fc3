package cassandra

import (
	"log/slog"

	"github.com/snapid/snapid/internal/cql"
)

func init() {
	cql.NewRegistry = func(b cql.Backend) (cql.Registry, func()) {
		r := newBackendRegistry(b)
		return r, r.seqs.wg.Wait
	}
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
