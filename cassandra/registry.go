package cassandra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
)

// Registry is the registry.Registry kept in an Apache Cassandra table; the
// package documentation describes the table and how its rows are kept
// consistent.
//
// It is safe for concurrent use by any number of goroutines, and any number
// of Registry values, in any number of processes and hosts, may use
// one table at once: every change is a lightweight transaction conditional
// on the row it was decided from. Every method honours its context.
//
// It must outlive the Generators that use it: close them first, then the
// Registry. A Generator closed after its registry cannot return its unused
// reservation (its Close fails with registry.ErrRegistry), and the next start
// of that host skips to the registry's mark.
type Registry struct {
	session  *gocql.Session // nil in tests that inject q alone
	q        cql.CASQuerier
	log      *slog.Logger
	ks, tbl  string // validated identifiers
	stmts    statements
	now      func() time.Time // tests move the clock
	pageSize int              // rows per page of List
	closed   sync.Once
	// awaitSchema waits for the cluster to agree on the schema (the
	// session's AwaitSchemaAgreement; tests count the calls). gocql
	// counts nodes that are down, so a wait with one node down lasts until
	// its timeout: it is called only after this process changed the schema.
	awaitSchema func(context.Context) error
	// cons and localDC are the configured commit consistency and data
	// centre; nodes counts the cluster's nodes per data centre (readNodes,
	// which checks that contacts, the configured hosts, are among them;
	// wait: let the view settle first; tests inject the topology of a
	// larger cluster).
	cons     gocql.Consistency
	localDC  string
	contacts []string
	nodes    func(ctx context.Context, wait bool) (nodeView, error)
	seqs     seqState // sequences (seqstore.go, sequence.go)
	serial   gocql.Consistency
	// wait is how the Registry waits between retries and attempts
	// (realWait, or a cql.Backend's Wait).
	wait waitFunc
	nums struct { // node numbers (numbers.go)
		mu sync.Mutex
		q  cql.NumQuerier
	}
}

var _ registry.Registry = (*Registry)(nil)

// Bounds of the loops that handle races, and the page size of List.
const (
	claimAttempts = 6 // reads and conditional updates of a row that keeps changing
	listPageSize  = 1000
)

// NewRegistry validates cfg, connects, checks what of cfg depends on the
// cluster (LocalDC must be one of its data centres; EACH_QUORUM needs a
// NetworkTopologyStrategy keyspace), creates the keyspace and the
// table if they do not exist (unless cfg.NoCreate; after creating anything
// it waits for the cluster to agree on the schema) and checks the table's
// columns. An invalid cfg is refused with an error wrapping
// registry.ErrInvalidOption before any connection is made, or, for what
// depends on the cluster, before anything is created: a keyspace to create
// whose replication cannot survive the loss of one node is refused with
// ErrFragileReplication unless cfg.AllowFragileReplication. A connection
// or schema failure wraps registry.ErrRegistry. ctx bounds the whole set-up.
//
// Creating what is missing keeps a single node or a test working with no
// set-up. On a production cluster, create the schema once with
// CreateSchema (snapctl setup), with the replication it needs,
// rather than from every host's first start at once.
func NewRegistry(ctx context.Context, cfg Config) (*Registry, error) {
	r, err := dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := r.setUp(ctx, cfg, !cfg.NoCreate); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// dial validates cfg and connects, without touching the schema.
func dial(ctx context.Context, cfg Config) (*Registry, error) {
	cluster, err := cfg.cluster()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cluster.Logger = slogLogger{log}
	session, err := createSession(ctx, cluster)
	if err != nil {
		return nil, fmt.Errorf("snapid: %w: connecting to Cassandra at %s: %w", registry.ErrRegistry, strings.Join(cfg.Hosts, ","), err)
	}
	r := newRegistry(session, &gocqlQuerier{
		s:      session,
		cons:   cluster.Consistency,
		serial: cluster.SerialConsistency,
	}, cfg.keyspace(), cfg.table(), log)
	r.cons, r.localDC, r.contacts = cluster.Consistency, cfg.LocalDC, cfg.Hosts
	r.serial = cluster.SerialConsistency
	r.seqs.cfg = cfg
	return r, nil
}

func newRegistry(s *gocql.Session, q *gocqlQuerier, ks, tbl string, log *slog.Logger) *Registry {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Registry{session: s, q: q, log: log, ks: ks, tbl: tbl, now: time.Now, pageSize: listPageSize, cons: gocql.Quorum, wait: realWait}
	r.nodes = func(ctx context.Context, wait bool) (nodeView, error) {
		return readNodes(ctx, r.session, r.contacts, wait)
	}
	r.awaitSchema = func(ctx context.Context) error {
		if r.session == nil {
			return errors.New("no session")
		}
		return r.session.AwaitSchemaAgreement(ctx)
	}
	r.stmts = newStatements(ks, tbl)
	q.selectOne = r.stmts.selectOne
	return r
}

// createSession connects, giving up when ctx ends (gocql's own connection
// set-up takes no context; a session that arrives after ctx ended is
// closed).
func createSession(ctx context.Context, cluster *gocql.ClusterConfig) (*gocql.Session, error) {
	type result struct {
		s   *gocql.Session
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := cluster.CreateSession()
		ch <- result{s, err}
	}()
	select {
	case res := <-ch:
		return res.s, res.err
	case <-ctx.Done():
		go func() {
			if res := <-ch; res.s != nil {
				res.s.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// Close closes the connections. It is idempotent; calls after Close fail
// with an error wrapping registry.ErrRegistry.
func (r *Registry) Close() {
	r.closed.Do(func() {
		r.closeSequences()
		if r.session != nil {
			r.session.Close()
		}
	})
}

// Keyspace returns the registry table's keyspace.
func (r *Registry) Keyspace() string { return r.ks }

// Table returns the registry table's name.
func (r *Registry) Table() string { return r.tbl }

// timestamp returns the current time at the precision Cassandra stores.
func (r *Registry) timestamp() time.Time {
	return r.now().UTC().Truncate(time.Millisecond)
}
