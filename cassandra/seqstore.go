package cassandra

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
)

// The sequences table (see "Sequences" in the package documentation):
// one partition per sequence for GLOBAL ("global", written at SERIAL only)
// and one per sequence and data centre ("dc:<name>", written at that
// data centre's serial consistency only, see dcPaxos), so that no
// partition ever sees both kinds of Paxos.
const seqTable = "sequences"

func u64(p *int64) uint64 {
	if p == nil || *p < 0 {
		return 0
	}
	return uint64(*p)
}

func i64(v uint64) *int64 {
	x := int64(v)
	return &x
}

// How a next number is stored (GLOBAL's next, a range's next): only while
// it is a number still to hand out, next <= last (the sequence's max, the
// range's last). A used-up GLOBAL row or range stores next as null: with
// last = 2^63-1 the value last+1 cannot be stored in a bigint (it wrapped
// to -2^63, which read back as 0, and numbers were handed out again).
// Rows written before kept last+1 when it fitted; they read the same.

// storeNext returns next as stored: nil when next > last (used up).
func storeNext(next, last uint64) *int64 {
	if next > last {
		return nil
	}
	return i64(next)
}

// loadNext reads a stored next number of a row whose last number is last:
// null is last+1 (used up); a negative value or one above last+1 cannot
// have been written and is ErrCorruptSequence.
func loadNext(seq, what string, p *int64, last uint64) (uint64, error) {
	switch {
	case p == nil:
		return last + 1, nil
	case *p < 0 || uint64(*p) > last+1:
		return 0, fmt.Errorf("snapid: %w: sequence %q: %s's next number is %d, outside [1, %d]; nothing was handed out",
			registry.ErrCorruptSequence, seq, what, *p, last+1)
	}
	return uint64(*p), nil
}

// loadNum reads a stored number that must be set and not negative.
func loadNum(seq, what string, p *int64) (uint64, error) {
	if p == nil || *p < 0 {
		v := "null"
		if p != nil {
			v = fmt.Sprint(*p)
		}
		return 0, fmt.Errorf("snapid: %w: sequence %q: %s is %s; nothing was handed out", registry.ErrCorruptSequence, seq, what, v)
	}
	return uint64(*p), nil
}

type seqStatements struct {
	createTable, selectPart, selectAllGlobal  string
	insertGlobal, updateGlobal, advanceGlobal string
	insertGrant, insertRange, advanceRange    string
	insertHost, updateHost                    string
	closeHost, adoptHost                      string
}

func newSeqStatements(ks string) seqStatements {
	t := `"` + ks + `"."` + seqTable + `"`
	var defs, names []string
	for _, c := range cql.SeqColumns {
		defs = append(defs, c.Name+" "+c.Type)
		names = append(names, c.Name)
	}
	cols := strings.Join(names, ", ")
	row := " WHERE seq = ? AND part = ? AND kind = ? AND key = ? AND first = ?"
	return seqStatements{
		createTable: "CREATE TABLE IF NOT EXISTS " + t + " (" + strings.Join(defs, ", ") +
			", PRIMARY KEY ((seq, part), kind, key, first))",
		selectPart:      "SELECT " + cols + " FROM " + t + " WHERE seq = ? AND part = ?",
		selectAllGlobal: "SELECT " + cols + " FROM " + t + " WHERE kind = ? ALLOW FILTERING",
		insertGlobal: "INSERT INTO " + t + " (seq, part, kind, key, first, start, max, next, at, lwt_token)" +
			" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS",
		updateGlobal:  "UPDATE " + t + " SET start = ?, max = ?, next = ?, lwt_token = ?" + row + " IF next = ? AND max = ?",
		advanceGlobal: "UPDATE " + t + " SET next = ?, lwt_token = ?" + row + " IF next = ? AND max = ?",
		insertGrant:   "INSERT INTO " + t + " (seq, part, kind, key, first, last, at, lwt_token) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
		insertRange:   "INSERT INTO " + t + " (seq, part, kind, key, first, last, next, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS",
		advanceRange:  "UPDATE " + t + " SET next = ?" + row + " IF next = ?",
		insertHost: "INSERT INTO " + t + " (seq, part, kind, key, first, owner, session, lease_first, lease_last, at, lwt_token)" +
			" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS",
		updateHost: "UPDATE " + t + " SET owner = ?, session = ?, lease_first = ?, lease_last = ?, at = ?, lwt_token = ?, closed_pos = null" + row +
			" IF owner = ? AND session = ? AND lease_first = ? AND lease_last = ?",
		closeHost: "UPDATE " + t + " SET closed_pos = ?, lwt_token = ?" + row + " IF session = ? AND lease_first = ? AND lease_last = ?",
		adoptHost: "UPDATE " + t + " SET owner = ?, session = ?, closed_pos = null, lwt_token = ?" + row +
			" IF session = ? AND lease_first = ? AND lease_last = ? AND closed_pos = ?",
	}
}

type gocqlSeqQuerier struct {
	s     *gocql.Session
	stmts seqStatements
}

func (g *gocqlSeqQuerier) CASBatch(ctx context.Context, serial gocql.Consistency, cons gocql.Consistency, stmts ...cql.SeqStmt) (bool, error) {
	if len(stmts) == 1 {
		q := g.s.Query(stmts[0].Stmt, stmts[0].Args...).Consistency(cons).SerialConsistency(serial)
		return q.MapScanCASContext(ctx, map[string]any{})
	}
	b := g.s.Batch(gocql.LoggedBatch).Consistency(cons).SerialConsistency(serial)
	for _, st := range stmts {
		b.Query(st.Stmt, st.Args...)
	}
	applied, iter, err := b.MapExecCASContext(ctx, map[string]any{})
	if iter != nil {
		if cerr := iter.Close(); err == nil {
			err = cerr
		}
	}
	return applied, err
}

func (g *gocqlSeqQuerier) ReadPartition(ctx context.Context, cons gocql.Consistency, seq, part string) ([]cql.SeqRow, error) {
	return scanRows(g.s.Query(g.stmts.selectPart, seq, part).Consistency(cons).IterContext(ctx))
}

func (g *gocqlSeqQuerier) ReadAllGlobal(ctx context.Context) ([]cql.SeqRow, error) {
	return scanRows(g.s.Query(g.stmts.selectAllGlobal, cql.KindGlobal).Consistency(gocql.LocalQuorum).IterContext(ctx))
}

func scanRows(iter *gocql.Iter) ([]cql.SeqRow, error) {
	var out []cql.SeqRow
	for {
		var w cql.SeqRow
		if !iter.Scan(w.Dests()...) {
			break
		}
		out = append(out, w)
	}
	return out, iter.Close()
}

// seqState is a Registry's sequence side: the data centre it leases in,
// the session that reaches only that data centre's nodes, and sizing.
type seqState struct {
	cfg Config // for the data-centre session

	mu      sync.Mutex
	dc      string
	paxos   dcPaxos   // how dc's partitions are kept (seqpaxos.go)
	repl    string    // the keyspace's replication paxos was decided from
	paxosAt time.Time // when the replication paxos comes from was last read
	q       cql.SeqQuerier
	session *gocql.Session // the data centre's session, closed with the Registry
	table   bool           // the table is known to exist
	stmts   seqStatements

	horizon time.Duration
	floor   uint64
	bg      map[string]bool // sequences with a background grant running
	checked map[string]bool // ranges seen within GLOBAL's bounds (rangeKey)
	wg      sync.WaitGroup
	closing bool               // set by Close: no more background grants
	stop    context.CancelFunc // cancels the background grants' context
	bgCtx   context.Context

	// localDC finds the data centre when Config.LocalDC is empty (tests
	// replace it).
	localDC func(ctx context.Context) (string, error)
	// paxosFor decides how the data centre's partitions are kept from the
	// keyspace's replication (nil: the package's paxosFor; tests on one
	// node replace it to run LOCAL_SERIAL).
	paxosFor func(repl map[string]string, dc string) (dcPaxos, int)
}

// Defaults of SetSequenceSizing.
const (
	DefaultSequenceHorizon = 24 * time.Hour
	DefaultSequenceFloor   = 1_000_000
)

// SetSequenceSizing sets how large a range a data centre takes from a
// sequence's GLOBAL row: the numbers its hosts leased in horizon at the
// data centre's recent rate (the rate at which they used its latest
// range), and at least floor (defaults DefaultSequenceHorizon, 24 h, and
// DefaultSequenceFloor). A data centre cut off from the others keeps
// issuing for about horizon. Call it before the Registry is used for
// sequences.
func (r *Registry) SetSequenceSizing(horizon time.Duration, floor uint64) error {
	if horizon <= 0 || floor == 0 {
		return invalidArg("sequence sizing: horizon %v and floor %d must be positive", horizon, floor)
	}
	r.seqs.mu.Lock()
	defer r.seqs.mu.Unlock()
	r.seqs.horizon, r.seqs.floor = horizon, floor
	return nil
}

// DataCentre returns the data centre this Registry's hosts lease sequence
// numbers in: Config.LocalDC, or, without it, the cluster's only data
// centre (a cluster of several needs LocalDC).
func (r *Registry) DataCentre(ctx context.Context) (string, error) {
	_, dc, err := r.seqQuerier(ctx)
	return dc, err
}

// seqQuerier returns the sequence querier and the data centre, connecting
// the data centre's session on first use. How the data centre's
// partitions are kept (dcPaxos) comes from the keyspace's replication.
// Kept at LOCAL_SERIAL, every statement on sequences goes through nodes of
// that data centre only (a gocql host filter): LOCAL_SERIAL runs Paxos
// among the coordinator's data centre's replicas, so a coordinator
// elsewhere would run it on another quorum. The session's contact points
// are the data centre's nodes as the cluster lists them, so configured
// contact points all in other data centres still reach it. Kept at
// SERIAL, any node coordinates.
func (r *Registry) seqQuerier(ctx context.Context) (cql.SeqQuerier, string, error) {
	st := &r.seqs
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.q != nil {
		return st.q, st.dc, nil
	}
	dc := st.cfg.LocalDC
	if dc == "" {
		find := st.localDC
		if find == nil {
			find = r.onlyDC
		}
		var err error
		if dc, err = find(ctx); err != nil {
			return nil, "", err
		}
	}
	paxos, repl, err := r.seqPaxos(ctx, dc)
	if err != nil {
		return nil, "", err
	}
	cluster, err := st.cfg.cluster()
	if err != nil {
		return nil, "", err
	}
	addrs, err := r.dcAddrs(ctx, dc)
	if err != nil {
		return nil, "", err
	}
	if !paxos.global {
		cluster.Hosts = append(addrs, cluster.Hosts...)
		cluster.HostFilter = gocql.DataCenterHostFilter(dc)
	}
	cluster.Logger = slogLogger{r.log}
	s, err := createSession(ctx, cluster)
	if err != nil {
		return nil, "", fmt.Errorf("snapid: %w: connecting to data centre %q for sequences: %w", registry.ErrRegistry, dc, err)
	}
	st.session, st.dc, st.paxos, st.repl, st.paxosAt = s, dc, paxos, repl, r.now()
	st.stmts = newSeqStatements(r.ks)
	st.q = retryReads(&gocqlSeqQuerier{s: s, stmts: st.stmts}, r.log)
	return st.q, dc, nil
}

// dcPaxos returns how the data centre's partitions are kept (after
// seqQuerier).
func (r *Registry) dcPaxos() dcPaxos {
	r.seqs.mu.Lock()
	defer r.seqs.mu.Unlock()
	return r.seqs.paxos
}

// onlyDC returns the cluster's data centre, if it has only one.
func (r *Registry) onlyDC(ctx context.Context) (string, error) {
	if r.session == nil {
		return "", fmt.Errorf("snapid: %w: no session to find the data centre", registry.ErrRegistry)
	}
	dcs := map[string]bool{}
	var dc string
	if err := r.session.Query(`SELECT data_center FROM system.local`).ScanContext(ctx, &dc); err != nil {
		return "", fmt.Errorf("snapid: %w: reading the data centre: %w", registry.ErrRegistry, err)
	}
	dcs[dc] = true
	iter := r.session.Query(`SELECT data_center FROM system.peers`).IterContext(ctx)
	var peer string
	for iter.Scan(&peer) {
		dcs[peer] = true
	}
	if err := iter.Close(); err != nil {
		return "", fmt.Errorf("snapid: %w: reading the data centres: %w", registry.ErrRegistry, err)
	}
	if len(dcs) > 1 {
		names := make([]string, 0, len(dcs))
		for d := range dcs {
			names = append(names, d)
		}
		sort.Strings(names)
		return "", invalidArg("the cluster has data centres %s: set Config.LocalDC to the one this host is in, for sequences",
			strings.Join(names, ", "))
	}
	return dc, nil
}

// ensureTable creates the sequences table if it is missing (create) or
// reports whether it exists.
func (r *Registry) ensureTable(ctx context.Context, create bool) (bool, error) {
	ok, _, err := r.ensureTableCreated(ctx, create)
	return ok, err
}

// ensureTableCreated is ensureTable, also reporting whether it created the
// table.
func (r *Registry) ensureTableCreated(ctx context.Context, create bool) (ok, created bool, err error) {
	st := &r.seqs
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.table {
		return true, false, nil
	}
	if r.session == nil {
		st.table = true // tests with injected queriers
		return true, false, nil
	}
	ok, err = r.schemaHas(ctx, `SELECT COUNT(*) FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?`, r.ks, seqTable)
	if err != nil {
		return false, false, fmt.Errorf("snapid: %w: reading the schema: %w", registry.ErrRegistry, err)
	}
	if !ok && create {
		if err := r.session.Query(newSeqStatements(r.ks).createTable).ExecContext(ctx); err != nil {
			return false, false, fmt.Errorf("snapid: %w: creating table %s.%s: %w", registry.ErrRegistry, r.ks, seqTable, err)
		}
		if err := r.agree(ctx); err != nil {
			return false, true, err
		}
		ok, created = true, true
	}
	st.table = ok
	return ok, created, nil
}

// closeSequences waits for background grants and closes the data
// centre's session.
func (r *Registry) closeSequences() {
	r.seqs.mu.Lock()
	r.seqs.closing = true
	if r.seqs.stop != nil {
		r.seqs.stop()
	}
	r.seqs.mu.Unlock()
	r.seqs.wg.Wait()
	r.seqs.mu.Lock()
	defer r.seqs.mu.Unlock()
	if r.seqs.session != nil {
		r.seqs.session.Close()
	}
}

// noTable reports whether err says the sequences table does not exist.
func noTable(err error) bool {
	var re gocql.RequestError
	return errors.As(err, &re) && re.Code() == gocql.ErrCodeInvalid && strings.Contains(strings.ToLower(re.Message()), "table")
}
