package cassandra

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gocql/gocql"
	"github.com/snapid/snapid"
)

// The registry table (SPEC §5), one row per node name:
//
//	CREATE TABLE IF NOT EXISTS <keyspace>.<table> (
//	    name          text PRIMARY KEY, -- the node name
//	    owner         text,      -- owner token of the counter file holding the name
//	    hostname      text,      -- the holder's host name,
//	    address       text,      --   network address
//	    machine_id    text,      --   and machine identity (clone detection)
//	    registered_at timestamp, -- when this owner took the name
//	    last_seen     timestamp, -- last claim, extension, heartbeat or release
//	    reserved      bigint,    -- reserved-up-to mark M; for a released row the
//	                             --   final counter value. A uint64 stored bit for
//	                             --   bit: values above 2^63-1 read as negative in cqlsh
//	    state         text,      -- 'active' or 'released'
//	    claim_token   text       -- random, new with every claim; resolves claims
//	                             --   whose outcome was lost (see below)
//	)
//
// How the rows are kept consistent:
//
//   - Every write is a lightweight transaction (LWT) run at the configured
//     serial consistency; no plain INSERT, UPDATE or DELETE is ever sent.
//     snapid.Claim is "INSERT … IF NOT EXISTS" and, for an existing row, an
//     "UPDATE … IF owner=? AND state=? AND reserved=? AND claim_token=?"
//     conditional on the whole row as the failed insert returned it, so that
//     what snapid.Claim decided from (the owner, the state, the recorded mark, the
//     holder's machine) is exactly what it replaces; a row that changed in
//     between makes the update fail, and snapid.Claim looks again (a few times).
//   - Extend, Touch and snapid.Release are UPDATEs conditional on the owner (and on
//     state='active' and the claim_token of the host's claim for Extend and
//     Touch, and on the old mark for Extend; snapid.Release on the mark it read at
//     SERIAL and found, compared as unsigned in Go, not above the final
//     value). Conditions only ever compare marks for equality: CQL orders
//     bigint as signed, which would put marks at and above 2^63 below 0.
//     That is how a refresh never resurrects a released or taken-over row:
//     the condition fails instead. A conditional UPDATE on a missing row is
//     not applied either, so a deleted row is not recreated as a partial row.
//     Conditions were chosen over deletes written into the future ("custom
//     timestamps in CQL3") because the claim needs LWTs anyway, for the
//     linearizable read-compare-write that makes two hosts never both win,
//     and one mechanism is easier to reason about than two; timestamps would
//     also depend on the hosts' clocks.
//   - An LWT whose outcome is unknown (a write timeout, an unavailable,
//     overloaded or "CAS write unknown" error, a client timeout or a lost
//     connection after the request was sent: any failure but the few that
//     provably come before any work, see outcomeUnknown) is resolved by reading the row at SERIAL
//     consistency, which also completes any Paxos round left in flight: our
//     effect there (for a claim: our claim_token) means the statement was
//     applied; the statement's condition still holding means it was not, and
//     the same statement (same token) is sent again; anything else means
//     another writer got there first, and the call carries on as if the
//     condition had failed. The outcome is never guessed: if the read fails
//     too, or the caller's context has ended, the call returns an error
//     wrapping snapid.ErrRegistry that says the outcome is unknown.
//
// The cluster is used without a gocql RetryPolicy: gocql v1.7.0 re-sends
// non-idempotent statements, LWTs included, under a retry policy, which
// would turn one claim into two Paxos rounds with unknowable results.

// Defaults of Config.
const (
	DefaultKeyspace          = "snapid"
	DefaultTable             = "node_names"
	DefaultTimeout           = 12 * time.Second // above the server's 10 s request timeouts
	DefaultConnectTimeout    = 10 * time.Second
	DefaultReconnectInterval = 5 * time.Second
	DefaultPort              = 9042
)

// Config configures NewRegistry. The zero value of every
// field but Hosts means its default.
type Config struct {
	// Hosts are the contact points, "host" or "host:port" (IPv6 as
	// "[::1]:9042"); the default port is 9042. At least one is required.
	Hosts []string

	// Keyspace and Table name the registry table (defaults "snapid" and
	// "node_names"). They are CQL identifiers written into statements (they
	// cannot be bound), so they must match ^[a-z][a-z0-9_]{0,47}$, and the
	// keyspace cannot start with "system".
	Keyspace string
	Table    string

	// Replication is the keyspace's replication map, used only when the
	// keyspace is created. Default {"class": "SimpleStrategy",
	// "replication_factor": "1"}, which is only fit for tests. For
	// production use NetworkTopologyStrategy with a factor per data centre,
	// for example {"class": "NetworkTopologyStrategy", "dc1": "3",
	// "dc2": "3"}. Keys and values are validated: the class must be
	// SimpleStrategy (with replication_factor only) or
	// NetworkTopologyStrategy (data-centre names, or replication_factor),
	// and every factor a positive integer.
	Replication map[string]string

	// NoCreate skips CREATE KEYSPACE and CREATE TABLE; the table must
	// exist. Without it they run only when the table does not exist yet, so
	// a user with SELECT and MODIFY on an existing registry keyspace (and no
	// CREATE permission) works either way. The table's columns are checked
	// either way.
	NoCreate bool

	// Username and Password turn on password authentication.
	Username string
	Password string

	// TLS, when set, is the TLS configuration (it is cloned). TLSCAFile,
	// TLSCertFile and TLSKeyFile are PEM files added to it (or to a new
	// configuration that verifies the server when TLS is nil): a CA to
	// verify the servers with, and a client certificate and its key (both
	// or neither). Any of the four turns TLS on.
	TLS         *tls.Config
	TLSCAFile   string
	TLSCertFile string
	TLSKeyFile  string

	// Timeout is the client-side timeout of one statement (default 12 s).
	// Keep it above the server's request timeouts (10 s by default), or a
	// statement the server is still working on is abandoned as a client
	// timeout, which for an LWT is an outcome to resolve.
	Timeout time.Duration
	// ConnectTimeout bounds each connection attempt (default 10 s).
	ConnectTimeout time.Duration
	// ReconnectInterval is how often nodes seen down are tried again
	// (default 5 s), so that a snapid.Generator resumes soon after an outage.
	ReconnectInterval time.Duration

	// Consistency is used for the commit phase of LWTs and for List: Quorum
	// (default), LocalQuorum or All.
	Consistency gocql.Consistency
	// SerialConsistency is used for the Paxos phase of LWTs and for serial
	// reads: gocql.Serial (default) or gocql.LocalSerial. LocalSerial only
	// serialises hosts of one data centre: two hosts in different data
	// centres could then both claim the same name. Use it only if every
	// host sharing names sits in one data centre.
	SerialConsistency gocql.SerialConsistency

	// LocalDC, when set, routes statements to that data centre's nodes
	// first. LocalQuorum and LocalSerial require it.
	LocalDC string

	// Logger receives notices (unknown outcomes and how they were resolved,
	// take-overs, the driver's own messages). Default: discarded.
	Logger *slog.Logger
}

// Registry is the snapid.Registry kept in an Apache Cassandra table; see
// the comment on the schema above for how its rows are kept consistent.
//
// It is safe for concurrent use by any number of goroutines, and any number
// of Registry values, in any number of processes and hosts, may use
// one table at once: every change is a lightweight transaction conditional
// on the row it was decided from. Every method honours its context.
type Registry struct {
	session  *gocql.Session // nil in tests that inject q alone
	q        casQuerier
	log      *slog.Logger
	ks, tbl  string // validated identifiers
	stmts    statements
	now      func() time.Time // tests move the clock
	pageSize int              // rows per page of List
	closed   sync.Once
	// awaitSchema waits for the cluster to agree on the schema (the
	// session's AwaitSchemaAgreement; tests count the calls). gocql 1.7.0
	// counts nodes that are down, so a wait with one node down lasts until
	// its timeout: it is called only after this process changed the schema.
	awaitSchema func(context.Context) error
}

var _ snapid.Registry = (*Registry)(nil)

// identRE is the rule for keyspace and table names.
var identRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,47}$`)

// dcRE is the rule for data-centre names in the replication map and LocalDC.
var dcRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$`)

// Bounds of the loops that handle races and unknown outcomes.
const (
	claimAttempts  = 6 // reads and conditional updates of a row that keeps changing
	resendAttempts = 3 // sends of one LWT whose outcome was unknown and not applied
	listPageSize   = 1000
)

// NewRegistry validates cfg, connects, creates the keyspace and the
// table if they do not exist (unless cfg.NoCreate; after creating anything
// it waits for the cluster to agree on the schema) and checks the table's
// columns. An invalid cfg is refused with an error wrapping
// snapid.ErrInvalidOption before any connection is made; a connection or schema
// failure wraps snapid.ErrRegistry. ctx bounds the whole set-up.
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
	if err := r.setUp(ctx, cfg); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// CreateSchema creates the registry's keyspace (with
// cfg.Replication) and table if they do not exist, waits for the cluster to
// agree on the schema if it created anything, and checks the table's
// columns. It reports whether it created anything; running it again
// changes nothing and reports false. A keyspace that exists is used as it
// is, whatever its replication. cfg.NoCreate is ignored. Errors wrap
// snapid.ErrInvalidOption (invalid cfg, refused before connecting) or snapid.ErrRegistry.
//
// This is the explicit, one-time set-up of a production cluster (snapctl
// setup): run it once, from one place, before the hosts start, so that the
// keyspace gets the replication it needs and is not created concurrently
// by every host's first start. It is safe to run concurrently with itself
// and with NewRegistry (every statement is IF NOT EXISTS).
func CreateSchema(ctx context.Context, cfg Config) (created bool, err error) {
	r, err := dial(ctx, cfg)
	if err != nil {
		return false, err
	}
	defer r.Close()
	if created, err = r.createMissing(ctx, cfg); err != nil {
		return created, err
	}
	return created, r.checkColumns(ctx)
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
	cluster.Logger = slogStdLogger{log}
	session, err := createSession(ctx, cluster)
	if err != nil {
		return nil, fmt.Errorf("snapid: %w: connecting to Cassandra at %s: %w", snapid.ErrRegistry, strings.Join(cfg.Hosts, ","), err)
	}
	return newRegistry(session, &gocqlQuerier{
		s:      session,
		cons:   cluster.Consistency,
		serial: cluster.SerialConsistency,
	}, cfg.keyspace(), cfg.table(), log), nil
}

func newRegistry(s *gocql.Session, q *gocqlQuerier, ks, tbl string, log *slog.Logger) *Registry {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Registry{session: s, q: q, log: log, ks: ks, tbl: tbl, now: time.Now, pageSize: listPageSize}
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
// with an error wrapping snapid.ErrRegistry.
func (r *Registry) Close() {
	r.closed.Do(func() {
		if r.session != nil {
			r.session.Close()
		}
	})
}

// Keyspace returns the registry table's keyspace.
func (r *Registry) Keyspace() string { return r.ks }

// Table returns the registry table's name.
func (r *Registry) Table() string { return r.tbl }

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

func (cfg *Config) keyspace() string {
	if cfg.Keyspace == "" {
		return DefaultKeyspace
	}
	return cfg.Keyspace
}

func (cfg *Config) table() string {
	if cfg.Table == "" {
		return DefaultTable
	}
	return cfg.Table
}

func invalidConfig(format string, args ...any) error {
	return fmt.Errorf("snapid: %w: Cassandra registry: %s", snapid.ErrInvalidOption, fmt.Sprintf(format, args...))
}

// Validate checks cfg without connecting. NewRegistry calls it
// first; errors wrap snapid.ErrInvalidOption.
func (cfg *Config) Validate() error {
	_, err := cfg.cluster()
	return err
}

// cluster validates cfg and builds the gocql configuration.
func (cfg *Config) cluster() (*gocql.ClusterConfig, error) {
	if len(cfg.Hosts) == 0 {
		return nil, invalidConfig("no Cassandra hosts given (want host[:port], for example 127.0.0.1:9042)")
	}
	for _, h := range cfg.Hosts {
		if err := checkHost(h); err != nil {
			return nil, err
		}
	}
	ks, tbl := cfg.keyspace(), cfg.table()
	if !identRE.MatchString(ks) {
		return nil, invalidConfig("keyspace %q: a keyspace name must match ^[a-z][a-z0-9_]{0,47}$", ks)
	}
	if strings.HasPrefix(ks, "system") {
		return nil, invalidConfig("keyspace %q: names starting with \"system\" belong to Cassandra", ks)
	}
	if !identRE.MatchString(tbl) {
		return nil, invalidConfig("table %q: a table name must match ^[a-z][a-z0-9_]{0,47}$", tbl)
	}
	if _, err := replicationCQL(cfg.Replication); err != nil {
		return nil, err
	}
	if cfg.Password != "" && cfg.Username == "" {
		return nil, invalidConfig("a password without a user name")
	}
	if cfg.Timeout < 0 || cfg.ConnectTimeout < 0 || cfg.ReconnectInterval < 0 {
		return nil, invalidConfig("negative timeout")
	}
	if cfg.LocalDC != "" && !dcRE.MatchString(cfg.LocalDC) {
		return nil, invalidConfig("local data centre %q is not a valid data-centre name", cfg.LocalDC)
	}
	cons := cfg.Consistency
	switch cons {
	case gocql.Any: // the zero value: default
		cons = gocql.Quorum
	case gocql.Quorum, gocql.All:
	case gocql.LocalQuorum:
		if cfg.LocalDC == "" {
			return nil, invalidConfig("consistency LOCAL_QUORUM needs LocalDC")
		}
	default:
		return nil, invalidConfig("consistency %v: use QUORUM, LOCAL_QUORUM or ALL", cons)
	}
	serial := cfg.SerialConsistency
	switch serial {
	case 0:
		serial = gocql.Serial
	case gocql.Serial:
	case gocql.LocalSerial:
		if cfg.LocalDC == "" {
			return nil, invalidConfig("serial consistency LOCAL_SERIAL needs LocalDC")
		}
	default:
		return nil, invalidConfig("serial consistency %v: use SERIAL or LOCAL_SERIAL", serial)
	}
	tlsConfig, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}

	cluster := gocql.NewCluster(cfg.Hosts...)
	cluster.Port = DefaultPort
	cluster.ProtoVersion = 4 // gocql 1.7.0's v5 is the pre-release framing
	cluster.Timeout = cmpOr(cfg.Timeout, DefaultTimeout)
	cluster.ConnectTimeout = cmpOr(cfg.ConnectTimeout, DefaultConnectTimeout)
	cluster.ReconnectInterval = cmpOr(cfg.ReconnectInterval, DefaultReconnectInterval)
	cluster.Consistency = cons
	cluster.SerialConsistency = serial
	cluster.RetryPolicy = nil // see the comment on the schema
	cluster.MaxWaitSchemaAgreement = cluster.Timeout * 5
	if cfg.LocalDC != "" {
		cluster.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.DCAwareRoundRobinPolicy(cfg.LocalDC))
	} else {
		cluster.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.RoundRobinHostPolicy())
	}
	if cfg.Username != "" {
		cluster.Authenticator = gocql.PasswordAuthenticator{Username: cfg.Username, Password: cfg.Password}
	}
	if tlsConfig != nil {
		cluster.SslOpts = &gocql.SslOptions{Config: tlsConfig, EnableHostVerification: !tlsConfig.InsecureSkipVerify}
	}
	return cluster, nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func checkHost(h string) error {
	if h == "" || strings.ContainsAny(h, " \t\r\n,") {
		return invalidConfig("host %q: want host[:port], one per entry", h)
	}
	host, port := h, ""
	if strings.HasPrefix(h, "[") || strings.Count(h, ":") == 1 {
		var err error
		if host, port, err = net.SplitHostPort(h); err != nil {
			return invalidConfig("host %q: %v", h, err)
		}
	}
	if host == "" {
		return invalidConfig("host %q: empty host name", h)
	}
	if port != "" {
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return invalidConfig("host %q: port %q is not a number from 1 to 65535", h, port)
		}
	}
	return nil
}

// replicationCQL validates a replication map and renders it as a CQL map
// literal (it cannot be bound in CREATE KEYSPACE).
func replicationCQL(m map[string]string) (string, error) {
	if len(m) == 0 {
		return "{'class': 'SimpleStrategy', 'replication_factor': '1'}", nil
	}
	class := m["class"]
	short := strings.TrimPrefix(class, "org.apache.cassandra.locator.")
	factor := func(k, v string) error {
		if n, err := strconv.Atoi(v); err != nil || n < 1 || n > 99 || strconv.Itoa(n) != v {
			return invalidConfig("replication %q: %q is not a replication factor (a whole number from 1 to 99)", k, v)
		}
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	switch short {
	case "SimpleStrategy":
		for _, k := range keys {
			if k != "class" && k != "replication_factor" {
				return "", invalidConfig("replication: SimpleStrategy takes only replication_factor, not %q", k)
			}
		}
		if _, ok := m["replication_factor"]; !ok {
			return "", invalidConfig("replication: SimpleStrategy needs replication_factor")
		}
	case "NetworkTopologyStrategy":
		if len(m) == 1 {
			return "", invalidConfig("replication: NetworkTopologyStrategy needs a factor per data centre (or replication_factor)")
		}
		for _, k := range keys {
			if k != "class" && !dcRE.MatchString(k) {
				return "", invalidConfig("replication: %q is not a data-centre name", k)
			}
		}
	case "":
		return "", invalidConfig("replication: no class (want SimpleStrategy or NetworkTopologyStrategy)")
	default:
		return "", invalidConfig("replication class %q: want SimpleStrategy or NetworkTopologyStrategy", class)
	}
	var b strings.Builder
	b.WriteString("{'class': '" + short + "'")
	for _, k := range keys {
		if k == "class" {
			continue
		}
		if err := factor(k, m[k]); err != nil {
			return "", err
		}
		b.WriteString(", '" + k + "': '" + m[k] + "'")
	}
	b.WriteString("}")
	return b.String(), nil
}

// tlsConfig builds the TLS configuration from cfg, reading the PEM files
// now so that a wrong path is reported before connecting.
func (cfg *Config) tlsConfig() (*tls.Config, error) {
	if cfg.TLS == nil && cfg.TLSCAFile == "" && cfg.TLSCertFile == "" && cfg.TLSKeyFile == "" {
		return nil, nil
	}
	var c *tls.Config
	if cfg.TLS != nil {
		c = cfg.TLS.Clone()
	} else {
		c = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if cfg.TLSCAFile != "" {
		pem, err := os.ReadFile(cfg.TLSCAFile)
		if err != nil {
			return nil, invalidConfig("TLS CA file: %v", err)
		}
		if c.RootCAs == nil {
			c.RootCAs = x509.NewCertPool()
		}
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, invalidConfig("TLS CA file %s holds no PEM certificate", cfg.TLSCAFile)
		}
	}
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		return nil, invalidConfig("TLS client certificate and key: give both files or neither")
	}
	if cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, invalidConfig("TLS client certificate: %v", err)
		}
		c.Certificates = append(c.Certificates, cert)
	}
	return c, nil
}

// slogStdLogger adapts slog to gocql's logger interface.
type slogStdLogger struct{ l *slog.Logger }

func (s slogStdLogger) Print(v ...any) { s.l.Warn(strings.TrimSpace(fmt.Sprint(v...))) }
func (s slogStdLogger) Printf(format string, v ...any) {
	s.l.Warn(strings.TrimSpace(fmt.Sprintf(format, v...)))
}
func (s slogStdLogger) Println(v ...any) { s.l.Warn(strings.TrimSpace(fmt.Sprintln(v...))) }

// ---------------------------------------------------------------------------
// Schema
// ---------------------------------------------------------------------------

// columns are the registry table's columns and CQL types, in the order of
// the SELECTs.
var columns = []struct{ name, typ string }{
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

type statements struct {
	createTable, selectOne, selectAll string
	insert, claimUpdate               string
	extend, touch, release            string
}

func newStatements(ks, tbl string) statements {
	// Identifiers are validated and double-quoted, so even a reserved word
	// is a valid name; every value is a bind marker.
	t := `"` + ks + `"."` + tbl + `"`
	var defs, names []string
	for _, c := range columns {
		defs = append(defs, c.name+" "+c.typ)
		names = append(names, c.name)
	}
	defs[0] += " PRIMARY KEY"
	cols := strings.Join(names, ", ")
	// Conditions compare marks for equality only: CQL orders bigint as
	// signed, and marks are unsigned (see snapid.Release).
	return statements{
		createTable: "CREATE TABLE IF NOT EXISTS " + t + " (" + strings.Join(defs, ", ") + ")",
		selectOne:   "SELECT " + cols + " FROM " + t + " WHERE name = ?",
		selectAll:   "SELECT " + cols + " FROM " + t,
		insert:      "INSERT INTO " + t + " (" + cols + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS",
		claimUpdate: "UPDATE " + t + " SET owner = ?, hostname = ?, address = ?, machine_id = ?, registered_at = ?," +
			" last_seen = ?, reserved = ?, state = ?, claim_token = ? WHERE name = ?" +
			" IF owner = ? AND state = ? AND reserved = ? AND claim_token = ?",
		extend: "UPDATE " + t + " SET reserved = ?, last_seen = ? WHERE name = ?" +
			" IF owner = ? AND claim_token = ? AND state = ? AND reserved = ?",
		touch:   "UPDATE " + t + " SET last_seen = ? WHERE name = ? IF owner = ? AND claim_token = ? AND state = ?",
		release: "UPDATE " + t + " SET state = ?, reserved = ?, last_seen = ? WHERE name = ? IF owner = ? AND reserved = ?",
	}
}

// setUp creates the keyspace and the table if missing (unless
// cfg.NoCreate) and checks the table's columns.
func (r *Registry) setUp(ctx context.Context, cfg Config) error {
	if !cfg.NoCreate {
		if _, err := r.createMissing(ctx, cfg); err != nil {
			return err
		}
	}
	return r.checkColumns(ctx)
}

// createMissing creates the keyspace and the table if they do not exist,
// and reports whether it created anything; only then does it wait for the
// cluster to agree on the schema. What exists is used as it is, so that a
// role allowed only to read and write the table (no CREATE permission)
// needs no NoCreate, and a role with CREATE on the keyspace alone can make
// the table.
func (r *Registry) createMissing(ctx context.Context, cfg Config) (created bool, err error) {
	fail := func(what string, err error) error {
		return fmt.Errorf("snapid: %w: %s: %w", snapid.ErrRegistry, what, err)
	}
	ksExists, err := r.schemaHas(ctx, `SELECT COUNT(*) FROM system_schema.keyspaces WHERE keyspace_name = ?`, r.ks)
	if err != nil {
		return false, fail("reading the schema", err)
	}
	tblExists := false
	if ksExists {
		if tblExists, err = r.schemaHas(ctx, `SELECT COUNT(*) FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?`, r.ks, r.tbl); err != nil {
			return false, fail("reading the schema", err)
		}
	}
	if !ksExists {
		repl, _ := replicationCQL(cfg.Replication) // validated already
		stmt := `CREATE KEYSPACE IF NOT EXISTS "` + r.ks + `" WITH replication = ` + repl
		if err := r.session.Query(stmt).WithContext(ctx).Exec(); err != nil {
			return false, fail("keyspace "+r.ks+" does not exist and creating it failed (wrong keyspace name?)", err)
		}
		created = true
	}
	if !tblExists {
		if err := r.session.Query(r.stmts.createTable).WithContext(ctx).Exec(); err != nil {
			return created, fail("table "+r.ks+"."+r.tbl+" does not exist and creating it failed", err)
		}
		created = true
	}
	if created {
		if err := r.awaitSchema(ctx); err != nil {
			return created, fail("waiting for the cluster to agree on the schema", err)
		}
	}
	return created, nil
}

// schemaHas runs a COUNT(*) query on system_schema (readable by every
// role) and reports whether it counted anything.
func (r *Registry) schemaHas(ctx context.Context, stmt string, args ...any) (bool, error) {
	var n int
	err := r.session.Query(stmt, args...).WithContext(ctx).Scan(&n)
	return n > 0, err
}

// checkColumns verifies that the table exists with the columns this code
// reads and writes, so that an incompatible table made by someone else is
// reported plainly instead of as a failing statement later.
func (r *Registry) checkColumns(ctx context.Context) error {
	iter := r.session.Query(`SELECT column_name, type, kind FROM system_schema.columns WHERE keyspace_name = ? AND table_name = ?`,
		r.ks, r.tbl).WithContext(ctx).Iter()
	have := map[string]string{}
	var name, typ, kind string
	for iter.Scan(&name, &typ, &kind) {
		if kind == "partition_key" {
			typ += " PRIMARY KEY"
		}
		have[name] = typ
	}
	if err := iter.Close(); err != nil {
		return fmt.Errorf("snapid: %w: reading the schema of %s.%s: %w", snapid.ErrRegistry, r.ks, r.tbl, err)
	}
	if len(have) == 0 {
		return fmt.Errorf("snapid: %w: table %s.%s does not exist", snapid.ErrRegistry, r.ks, r.tbl)
	}
	var bad []string
	for i, c := range columns {
		want := c.typ
		if i == 0 {
			want += " PRIMARY KEY"
		}
		if got, ok := have[c.name]; !ok {
			bad = append(bad, fmt.Sprintf("column %s is missing", c.name))
		} else if got != want {
			bad = append(bad, fmt.Sprintf("column %s is %s, want %s", c.name, got, want))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("snapid: %w: table %s.%s has an incompatible schema: %s", snapid.ErrRegistry, r.ks, r.tbl, strings.Join(bad, "; "))
	}
	return nil
}

// ---------------------------------------------------------------------------
// Rows and the statements that touch them
// ---------------------------------------------------------------------------

// record is a registry row as stored. Pointers distinguish null (or, in an
// LWT's reply, a column that was not returned) from an empty value, so that
// a condition on a partial row written by another tool binds null where the
// row holds null.
type record struct {
	name, owner, hostname, address, machineID *string
	registeredAt, lastSeen                    *time.Time
	reserved                                  *int64
	state, token                              *string
}

// dests returns scan destinations in the order of columns.
func (rec *record) dests() []any {
	return []any{&rec.name, &rec.owner, &rec.hostname, &rec.address, &rec.machineID,
		&rec.registeredAt, &rec.lastSeen, &rec.reserved, &rec.state, &rec.token}
}

// destMap returns the destinations by column name, for MapScanCAS, which
// scans into the values already in its map.
func (rec *record) destMap() map[string]any {
	m := make(map[string]any, len(columns)+1)
	for i, d := range rec.dests() {
		m[columns[i].name] = d
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

func (rec *record) holder() snapid.Holder {
	var reserved uint64
	if rec.reserved != nil {
		reserved = uint64(*rec.reserved) // bit for bit, see the schema comment
	}
	return snapid.Holder{
		Name: str(rec.name), Owner: str(rec.owner),
		Hostname: str(rec.hostname), Address: str(rec.address), MachineID: str(rec.machineID),
		State: str(rec.state), RegisteredAt: tm(rec.registeredAt), LastSeen: tm(rec.lastSeen),
		Reserved: reserved, Session: str(rec.token),
	}
}

// same reports whether two nullable columns hold the same value.
func same[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// casQuerier is what the registry needs from Cassandra for its rows.
// gocqlQuerier is the real one; tests wrap it to lose replies.
type casQuerier interface {
	// cas runs a conditional statement (it must have an IF clause) at the
	// registry's consistency and serial consistency. When it is not
	// applied, rec receives the columns Cassandra sent back: the whole row
	// for INSERT … IF NOT EXISTS, the condition's columns for an UPDATE.
	cas(ctx context.Context, rec *record, stmt string, args ...any) (applied bool, err error)
	// serialRead reads the row of name at SERIAL (or LOCAL_SERIAL)
	// consistency into rec; found is false if there is no row.
	serialRead(ctx context.Context, rec *record, name string) (found bool, err error)
}

type gocqlQuerier struct {
	s         *gocql.Session
	cons      gocql.Consistency
	serial    gocql.SerialConsistency
	selectOne string
}

func (g *gocqlQuerier) cas(ctx context.Context, rec *record, stmt string, args ...any) (bool, error) {
	q := g.s.Query(stmt, args...).WithContext(ctx).Consistency(g.cons).SerialConsistency(g.serial)
	defer q.Release()
	return q.MapScanCAS(rec.destMap())
}

func (g *gocqlQuerier) serialRead(ctx context.Context, rec *record, name string) (bool, error) {
	q := g.s.Query(g.selectOne, name).WithContext(ctx).Consistency(gocql.Consistency(g.serial))
	defer q.Release()
	err := q.Scan(rec.dests()...)
	if errors.Is(err, gocql.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// outcome is what a serial read says about an LWT whose reply was lost.
type outcome int

const (
	outcomeLost    outcome = iota // another writer changed the row: the condition failed
	outcomeApplied                // our change is there
	outcomeResend                 // the condition still holds: our change was not made
)

// casResult is the result of runCAS.
type casResult struct {
	applied bool
	// cur is the row's current state when not applied: what Cassandra
	// returned with the failed condition, or (full) the whole row as read
	// at SERIAL when the outcome had to be resolved.
	cur    record
	full   bool // cur is the whole row (or no row: found false)
	found  bool
	reread bool // the outcome was resolved by a serial read
}

// runCAS runs one LWT and resolves an unknown outcome: judge says, from
// the row as read at SERIAL (found false: no row), whether our change is
// there, whether the condition still holds, or neither.
func (r *Registry) runCAS(ctx context.Context, op, name string, judge func(cur *record, found bool) outcome,
	stmt string, args ...any) (casResult, error) {
	if err := ctx.Err(); err != nil {
		return casResult{}, fmt.Errorf("snapid: %w: %s %q: nothing sent: %w", snapid.ErrRegistry, op, name, err)
	}
	var lastErr error
	for send := 0; send < resendAttempts; send++ {
		var res casResult
		applied, err := r.q.cas(ctx, &res.cur, stmt, args...)
		if err == nil {
			res.applied = applied
			return res, nil
		}
		if !outcomeUnknown(err) {
			return res, fmt.Errorf("snapid: %w: %s %q: %w", snapid.ErrRegistry, op, name, err)
		}
		lastErr = err
		if ctx.Err() != nil {
			return res, fmt.Errorf("snapid: %w: %s %q: the outcome is unknown (%w), and the call's context ended before it could be resolved; %s",
				snapid.ErrRegistry, op, name, err, unknownAdvice(op))
		}
		r.log.Warn("snapid: registry write outcome unknown; resolving it with a serial read",
			"op", op, "name", name, "err", err)
		res = casResult{reread: true, full: true}
		found, rerr := r.q.serialRead(ctx, &res.cur, name)
		if rerr != nil {
			return res, fmt.Errorf("snapid: %w: %s %q: the outcome is unknown (%w), and the serial read that resolves it failed: %w; %s",
				snapid.ErrRegistry, op, name, err, rerr, unknownAdvice(op))
		}
		res.found = found
		switch judge(&res.cur, found) {
		case outcomeApplied:
			r.log.Info("snapid: registry write outcome resolved: applied", "op", op, "name", name)
			res.applied = true
			return res, nil
		case outcomeLost:
			r.log.Info("snapid: registry write outcome resolved: not applied, the row changed", "op", op, "name", name)
			return res, nil
		}
		r.log.Info("snapid: registry write outcome resolved: not applied; sending it again", "op", op, "name", name)
	}
	return casResult{}, fmt.Errorf("snapid: %w: %s %q: %d attempts ended with an unknown outcome, each resolved as not applied; last error: %w",
		snapid.ErrRegistry, op, name, resendAttempts, lastErr)
}

func unknownAdvice(op string) string {
	if op == "claim" {
		return "the name may now be held by this owner; claiming again resolves it"
	}
	return "the row may or may not have changed; the next call sees it"
}

// outcomeUnknown reports whether an LWT that failed with err may still have
// been applied. Only errors that provably come before any work are
// definite: statements Cassandra refuses while parsing, preparing or
// authorising them (syntax, invalid, unauthorized, unprepared, protocol,
// config, credentials, already exists), and failures to send (no
// connection made, session closed). Everything else is unknown, Overloaded
// included: Cassandra 5.0's StorageProxy.commitPaxos checks hint overload
// after a quorum accepted the proposal, so an LWT answered Overloaded may
// have been applied. Bootstrapping is treated as unknown too, as is any
// code this list does not name.
func outcomeUnknown(err error) bool {
	if errors.Is(err, gocql.ErrNoConnections) || errors.Is(err, gocql.ErrSessionClosed) {
		return false
	}
	var re gocql.RequestError
	if errors.As(err, &re) {
		switch re.Code() {
		case gocql.ErrCodeSyntax, gocql.ErrCodeUnauthorized, gocql.ErrCodeInvalid, gocql.ErrCodeConfig,
			gocql.ErrCodeCredentials, gocql.ErrCodeProtocol, gocql.ErrCodeUnprepared, gocql.ErrCodeAlreadyExists:
			return false
		}
		// Write and read timeouts and failures, unavailable, CAS write
		// unknown, overloaded, bootstrapping, server errors.
		return true
	}
	// Client timeouts, lost connections, context ends, anything else.
	return true
}

// ---------------------------------------------------------------------------
// snapid.Registry methods
// ---------------------------------------------------------------------------

func invalidArg(format string, args ...any) error {
	return fmt.Errorf("snapid: %w: %s", snapid.ErrInvalidOption, fmt.Sprintf(format, args...))
}

// checkOwner validates an owner token: 1 to 128 printable ASCII characters
// without spaces (snapid's tokens are 32 hex digits).
func checkOwner(owner string) error {
	if owner == "" {
		return invalidArg("empty owner token")
	}
	if len(owner) > 128 {
		return invalidArg("owner token of %d bytes (at most 128)", len(owner))
	}
	for i := 0; i < len(owner); i++ {
		if owner[i] <= ' ' || owner[i] > '~' {
			return invalidArg("owner token byte %d is %q (want printable ASCII)", i, owner[i])
		}
	}
	return nil
}

func checkField(what, v string) error {
	if len(v) > 1024 {
		return invalidArg("%s of %d bytes (at most 1024)", what, len(v))
	}
	return nil
}

// timestamp returns the current time at the precision Cassandra stores.
func (r *Registry) timestamp() time.Time {
	return r.now().UTC().Truncate(time.Millisecond)
}

func newClaimToken() string {
	var b [16]byte
	if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
		panic("snapid: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// snapid.Claim implements snapid.Registry.Claim (see there, and SPEC §5).
//
// It sends "INSERT … IF NOT EXISTS"; a new name is then held. Otherwise the
// failed insert returns the row, and snapid.Claim decides from it:
//
//   - same owner: refused with snapid.ErrProbableClone if c.CloneWindow > 0, the
//     row is active, was last seen less than c.CloneWindow ago, and its
//     machine id or host name differ from c's; otherwise refreshed (host
//     name, address, machine id, last seen, state active). Force does not
//     bypass the clone check: set CloneWindow to zero for that.
//   - another owner, released: taken over; Reserved is the old holder's
//     recorded final value, which the new holder's counter must start at.
//   - another owner, active (or a partial row without owner or state):
//     refused with an error wrapping snapid.ErrNameTaken that describes the
//     holder, unless c.Force; then taken over with Reserved = max(the old
//     mark, c.Floor).
//
// The update is conditional on the row as read, so two claimers never both
// win; a claimer whose update fails looks at the row again. Each claim
// writes a fresh random claim token, which resolves a claim whose reply was
// lost (see the schema comment).
func (r *Registry) Claim(ctx context.Context, c snapid.Claim) (snapid.Holder, error) {
	if err := snapid.ValidateName(c.Name); err != nil {
		return snapid.Holder{}, err
	}
	if err := checkOwner(c.Owner); err != nil {
		return snapid.Holder{}, err
	}
	for _, f := range [...]struct{ what, v string }{{"host name", c.Hostname}, {"address", c.Address}, {"machine id", c.MachineID}} {
		if err := checkField(f.what, f.v); err != nil {
			return snapid.Holder{}, err
		}
	}
	if c.CloneWindow < 0 {
		return snapid.Holder{}, invalidArg("negative clone window %v", c.CloneWindow)
	}
	var lastRow snapid.Holder
	for attempt := 0; attempt < claimAttempts; attempt++ {
		if attempt > 0 {
			if err := backoff(ctx, attempt); err != nil {
				return snapid.Holder{}, fmt.Errorf("snapid: %w: claim %q: %w", snapid.ErrRegistry, c.Name, err)
			}
		}
		h, done, err := r.claimOnce(ctx, c, &lastRow)
		if done || err != nil {
			return h, err
		}
	}
	return lastRow, fmt.Errorf("snapid: %w: claim %q: the row kept changing during %d attempts (last seen: %s)",
		snapid.ErrRegistry, c.Name, claimAttempts, lastRow)
}

// orUnknown is s, or "unknown" if it is empty.
func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// backoff waits a short random time that grows with attempt, so that
// claimers racing on one row do not retry in lock step.
func backoff(ctx context.Context, attempt int) error {
	n, err := rand.Int(rand.Reader, big.NewInt(int64(attempt)*20+1))
	if err != nil {
		return err
	}
	t := time.NewTimer(time.Duration(n.Int64()+1) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// claimOnce makes one attempt: insert, or decide from the row and update
// it. done false means the row changed under us: try again.
func (r *Registry) claimOnce(ctx context.Context, c snapid.Claim, lastRow *snapid.Holder) (h snapid.Holder, done bool, err error) {
	now := r.timestamp()
	token := newClaimToken()
	mine := func(cur *record, found bool) outcome {
		switch {
		case found && str(cur.token) == token:
			return outcomeApplied
		case !found:
			return outcomeResend
		}
		return outcomeLost
	}
	res, err := r.runCAS(ctx, "claim", c.Name, mine, r.stmts.insert,
		c.Name, c.Owner, c.Hostname, c.Address, c.MachineID, now, now, int64(0), snapid.StateActive, token)
	if err != nil {
		return snapid.Holder{}, true, err
	}
	if res.applied {
		if res.reread {
			return res.cur.holder(), true, nil
		}
		r.log.Debug("snapid: name claimed", "name", c.Name)
		return snapid.Holder{Name: c.Name, Owner: c.Owner, Hostname: c.Hostname, Address: c.Address, MachineID: c.MachineID,
			State: snapid.StateActive, RegisteredAt: now, LastSeen: now, Session: token}, true, nil
	}
	// The whole row: INSERT IF NOT EXISTS returns it, as does the serial
	// read that resolved a lost reply.
	decided := res.cur
	old := decided.holder()
	*lastRow = old
	if str(decided.token) == token {
		// A reply lost earlier in this attempt was in fact applied, and the
		// resent insert found our own row.
		return old, true, nil
	}

	next := snapid.Holder{Name: c.Name, Owner: c.Owner, Hostname: c.Hostname, Address: c.Address, MachineID: c.MachineID,
		State: snapid.StateActive, RegisteredAt: old.RegisteredAt, LastSeen: now, Reserved: old.Reserved, Session: token}
	switch {
	case old.Owner == c.Owner:
		otherMachine := old.MachineID != c.MachineID || old.Hostname != c.Hostname
		seen := now.Sub(old.LastSeen)
		if otherMachine && old.State == snapid.StateActive && c.CloneWindow > 0 && seen < c.CloneWindow {
			return old, true, fmt.Errorf("snapid: %w: %q is active with this owner token on %s (machine %s, last seen %s ago), but this claim comes from %s (machine %s); "+
				"if the other machine is gone, wait %s after its last sighting",
				snapid.ErrProbableClone, c.Name, orUnknown(old.Hostname), orUnknown(old.MachineID), seen.Round(time.Second),
				orUnknown(c.Hostname), orUnknown(c.MachineID), c.CloneWindow)
		}
	case old.State == snapid.StateReleased && old.Owner != "":
		next.RegisteredAt = now
		r.log.Info("snapid: taking over a released name", "name", c.Name, "previous", old.String(), "final", old.Reserved)
	case c.Force:
		next.RegisteredAt = now
		next.Reserved = max(old.Reserved, c.Floor)
		r.log.Warn("snapid: forced take-over of a name held by another owner", "name", c.Name, "previous", old.String(),
			"reserved", next.Reserved)
	default:
		return old, true, fmt.Errorf("snapid: %w: %q is %s; take it over only if that holder is gone for good (force, with a start floor)",
			snapid.ErrNameTaken, c.Name, old)
	}

	// Conditional on the row we decided from.
	judge := func(cur *record, found bool) outcome {
		switch {
		case found && str(cur.token) == token:
			return outcomeApplied
		case found && same(cur.owner, decided.owner) && same(cur.state, decided.state) &&
			same(cur.reserved, decided.reserved) && same(cur.token, decided.token):
			return outcomeResend
		}
		return outcomeLost
	}
	res2, err := r.runCAS(ctx, "claim", c.Name, judge, r.stmts.claimUpdate,
		next.Owner, next.Hostname, next.Address, next.MachineID, next.RegisteredAt, next.LastSeen,
		int64(next.Reserved), next.State, token, c.Name,
		decided.owner, decided.state, decided.reserved, decided.token)
	if err != nil {
		return snapid.Holder{}, true, err
	}
	switch {
	case res2.applied && res2.reread:
		return res2.cur.holder(), true, nil
	case res2.applied:
		return next, true, nil
	case str(res2.cur.token) == token:
		// Applied by an earlier send whose reply was lost; read the row.
		var rec record
		found, err := r.q.serialRead(ctx, &rec, c.Name)
		if err != nil {
			return snapid.Holder{}, true, fmt.Errorf("snapid: %w: claim %q: reading the claimed row: %w", snapid.ErrRegistry, c.Name, err)
		}
		if found && str(rec.token) == token {
			return rec.holder(), true, nil
		}
	}
	return snapid.Holder{}, false, nil
}

// Extend implements snapid.Registry.Extend:
//
//	UPDATE … SET reserved = new, last_seen = now WHERE name = ?
//	IF owner = ? AND state = 'active' AND reserved = old
//
// On success the returned snapid.Holder has Name, Owner, State, Reserved (new) and
// LastSeen set; the other fields are zero (an applied LWT returns no row).
// When the condition fails, the row is read at SERIAL: a missing row, or a
// row released or held by another owner, is snapid.ErrNameTaken (wrapped with the
// holder's details; a missing row also matches snapid.ErrNotRegistered), and the
// row is not changed or recreated; a row of this owner whose mark is not
// old is returned with snapid.ErrMarkMoved.
func (r *Registry) Extend(ctx context.Context, name, owner, session string, old, new uint64) (snapid.Holder, error) {
	if err := snapid.ValidateName(name); err != nil {
		return snapid.Holder{}, err
	}
	if err := checkOwner(owner); err != nil {
		return snapid.Holder{}, err
	}
	if err := checkField("session", session); err != nil {
		return snapid.Holder{}, err
	}
	for attempt := 0; attempt < claimAttempts; attempt++ {
		now := r.timestamp()
		ours := func(cur *record) bool {
			return str(cur.owner) == owner && str(cur.token) == session && str(cur.state) == snapid.StateActive
		}
		judge := func(cur *record, found bool) outcome {
			switch {
			case found && ours(cur) && cur.reserved != nil && uint64(*cur.reserved) == new && cur.lastSeen != nil && cur.lastSeen.Equal(now):
				return outcomeApplied
			case found && ours(cur) && cur.reserved != nil && uint64(*cur.reserved) == old:
				return outcomeResend
			}
			return outcomeLost
		}
		res, err := r.runCAS(ctx, "extend", name, judge, r.stmts.extend,
			int64(new), now, name, owner, session, snapid.StateActive, int64(old))
		if err != nil {
			return snapid.Holder{}, err
		}
		if res.applied {
			return snapid.Holder{Name: name, Owner: owner, Session: session, State: snapid.StateActive, Reserved: new, LastSeen: now}, nil
		}
		cur, found, err := r.fullRow(ctx, "extend", name, res)
		if err != nil {
			return snapid.Holder{}, err
		}
		h := cur.holder()
		switch {
		case !found || !ours(&cur):
			return h, r.notHeld("extend", name, owner, h, found)
		case cur.reserved == nil || uint64(*cur.reserved) != old:
			return h, fmt.Errorf("snapid: %w: %q: the registry's mark is %d, not %d", snapid.ErrMarkMoved, name, h.Reserved, old)
		}
		// The condition holds again (the row changed back): try again.
	}
	return snapid.Holder{}, fmt.Errorf("snapid: %w: extend %q: the row kept changing", snapid.ErrRegistry, name)
}

// fullRow returns the whole row after a failed condition, reading it at
// SERIAL unless the resolution of an unknown outcome already did.
func (r *Registry) fullRow(ctx context.Context, op, name string, res casResult) (record, bool, error) {
	if res.full {
		return res.cur, res.found, nil
	}
	var rec record
	found, err := r.q.serialRead(ctx, &rec, name)
	if err != nil {
		return rec, false, fmt.Errorf("snapid: %w: %s %q: reading the row after a failed condition: %w", snapid.ErrRegistry, op, name, err)
	}
	return rec, found, nil
}

// notHeld is the error of a change refused because owner does not hold
// name.
func (r *Registry) notHeld(op, name, owner string, h snapid.Holder, found bool) error {
	switch {
	case !found:
		return fmt.Errorf("snapid: %w: %s %q: the name has no row (%w); nothing was written", snapid.ErrNameTaken, op, name, snapid.ErrNotRegistered)
	case h.Owner == owner && h.State == snapid.StateActive:
		return fmt.Errorf("snapid: %w: %s %q: a later claim with this owner token replaced this host's (%s): "+
			"a copy of the counter directory in use elsewhere?; nothing was written", snapid.ErrNameTaken, op, name, h)
	case h.Owner == owner:
		return fmt.Errorf("snapid: %w: %s %q: this owner released the name (%s); nothing was written", snapid.ErrNameTaken, op, name, h)
	}
	return fmt.Errorf("snapid: %w: %s %q: another owner has it: %s; nothing was written", snapid.ErrNameTaken, op, name, h)
}

// Touch implements snapid.Registry.Touch:
//
//	UPDATE … SET last_seen = now WHERE name = ? IF owner = ? AND claim_token = ? AND state = 'active'
//
// A missing, released or taken-over row is not changed: snapid.ErrNameTaken.
func (r *Registry) Touch(ctx context.Context, name, owner, session string) error {
	if err := snapid.ValidateName(name); err != nil {
		return err
	}
	if err := checkOwner(owner); err != nil {
		return err
	}
	if err := checkField("session", session); err != nil {
		return err
	}
	now := r.timestamp()
	ours := func(cur *record) bool {
		return str(cur.owner) == owner && str(cur.token) == session && str(cur.state) == snapid.StateActive
	}
	judge := func(cur *record, found bool) outcome {
		switch {
		case found && ours(cur) && cur.lastSeen != nil && cur.lastSeen.Equal(now):
			return outcomeApplied
		case found && ours(cur):
			return outcomeResend
		}
		return outcomeLost
	}
	res, err := r.runCAS(ctx, "touch", name, judge, r.stmts.touch, now, name, owner, session, snapid.StateActive)
	if err != nil || res.applied {
		return err
	}
	cur, found, err := r.fullRow(ctx, "touch", name, res)
	if err != nil {
		return err
	}
	if found && ours(&cur) {
		// Released and claimed back by this owner in between: the name is
		// ours again, and the claim refreshed last_seen.
		return nil
	}
	return r.notHeld("touch", name, owner, cur.holder(), found)
}

// snapid.Release implements snapid.Registry.Release. It reads the row at SERIAL,
// compares the recorded mark with final in Go (as unsigned numbers: CQL
// compares bigint as signed, which would misorder marks at and above
// 2^63), then writes
//
//	UPDATE … SET state = 'released', reserved = final, last_seen = now
//	WHERE name = ? IF owner = ? AND reserved = <the mark read>
//
// so the condition holds only on the row the decision was made from. If
// the row changed in between, it reads and decides again (a few times).
// A missing row or a row of another owner is not changed: snapid.ErrNameTaken. A
// mark above final is not changed either: snapid.ErrMarkMoved. Releasing a
// released row of the same owner records final again.
func (r *Registry) Release(ctx context.Context, name, owner string, final uint64) error {
	if err := snapid.ValidateName(name); err != nil {
		return err
	}
	if err := checkOwner(owner); err != nil {
		return err
	}
	for attempt := 0; attempt < claimAttempts; attempt++ {
		if attempt > 0 {
			if err := backoff(ctx, attempt); err != nil {
				return fmt.Errorf("snapid: %w: release %q: %w", snapid.ErrRegistry, name, err)
			}
		}
		var cur record
		found, err := r.q.serialRead(ctx, &cur, name)
		if err != nil {
			return fmt.Errorf("snapid: %w: release %q: reading the row: %w", snapid.ErrRegistry, name, err)
		}
		h := cur.holder()
		switch {
		case !found || h.Owner != owner:
			return r.notHeld("release", name, owner, h, found)
		case h.Reserved > final:
			return fmt.Errorf("snapid: %w: release %q: the registry's mark %d is above the final value %d; nothing was written",
				snapid.ErrMarkMoved, name, h.Reserved, final)
		}
		read := cur.reserved
		now := r.timestamp()
		judge := func(row *record, found bool) outcome {
			switch {
			case !found || str(row.owner) != owner:
				return outcomeLost
			case str(row.state) == snapid.StateReleased && row.reserved != nil && uint64(*row.reserved) == final &&
				row.lastSeen != nil && row.lastSeen.Equal(now):
				return outcomeApplied
			case same(row.reserved, read):
				return outcomeResend
			}
			return outcomeLost
		}
		res, err := r.runCAS(ctx, "release", name, judge, r.stmts.release,
			snapid.StateReleased, int64(final), now, name, owner, read)
		if err != nil || res.applied {
			return err
		}
		// The row changed since it was read: decide again.
	}
	return fmt.Errorf("snapid: %w: release %q: the row kept changing during %d attempts", snapid.ErrRegistry, name, claimAttempts)
}

// Get implements snapid.Registry.Get: the row read at SERIAL consistency (which
// sees every LWT that completed, and completes one left in flight), or
// snapid.ErrNotRegistered.
func (r *Registry) Get(ctx context.Context, name string) (snapid.Holder, error) {
	if err := snapid.ValidateName(name); err != nil {
		return snapid.Holder{}, err
	}
	var rec record
	found, err := r.q.serialRead(ctx, &rec, name)
	if err != nil {
		return snapid.Holder{}, fmt.Errorf("snapid: %w: get %q: %w", snapid.ErrRegistry, name, err)
	}
	if !found {
		return snapid.Holder{}, fmt.Errorf("snapid: %w: %q", snapid.ErrNotRegistered, name)
	}
	return rec.holder(), nil
}

// List implements snapid.Registry.List: every row, read page by page at the
// configured consistency (not serial: a row being changed at that moment
// may show its previous state). Rows are in token order.
func (r *Registry) List(ctx context.Context) ([]snapid.Holder, error) {
	if r.session == nil {
		return nil, fmt.Errorf("snapid: %w: list: no session", snapid.ErrRegistry)
	}
	q := r.session.Query(r.stmts.selectAll).WithContext(ctx).PageSize(r.pageSize)
	defer q.Release()
	iter := q.Iter()
	var out []snapid.Holder
	for {
		var rec record
		if !iter.Scan(rec.dests()...) {
			break
		}
		out = append(out, rec.holder())
	}
	if err := iter.Close(); err != nil {
		return nil, fmt.Errorf("snapid: %w: list: %w", snapid.ErrRegistry, err)
	}
	return out, nil
}
