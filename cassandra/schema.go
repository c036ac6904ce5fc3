package cassandra

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
)

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
	for _, c := range cql.Columns {
		defs = append(defs, c.Name+" "+c.Type)
		names = append(names, c.Name)
	}
	defs[0] += " PRIMARY KEY"
	cols := strings.Join(names, ", ")
	// Conditions compare marks for equality only: CQL orders bigint as
	// signed, and marks are unsigned (see Registry.Release).
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

// setUp checks cfg against the cluster (see checkCluster), creates the
// keyspace and the table if they are missing (when create is set) and
// checks the table's columns. It reports whether it created anything.
func (r *Registry) setUp(ctx context.Context, cfg Config, create bool) (created bool, err error) {
	rep, err := r.setUpReport(ctx, cfg, create)
	return rep.KeyspaceCreated || len(rep.TablesCreated) > 0, err
}

// setUpReport is setUp, saying what it created.
func (r *Registry) setUpReport(ctx context.Context, cfg Config, create bool) (rep SchemaReport, err error) {
	rep.Keyspace, rep.Table = r.ks, r.tbl
	if err := r.checkCluster(ctx, cfg); err != nil {
		return rep, err
	}
	if create {
		if err = r.createMissing(ctx, cfg, &rep); err != nil {
			return rep, err
		}
	}
	return rep, r.checkColumns(ctx)
}

// checkCluster checks what of cfg depends on the cluster, before anything
// is created: LocalDC must be one of the cluster's data centres, and
// EACH_QUORUM needs a NetworkTopologyStrategy keyspace.
func (r *Registry) checkCluster(ctx context.Context, cfg Config) error {
	if cfg.LocalDC != "" {
		view, err := r.settledNodes(ctx, func(nodes map[string]int) bool { return nodes[cfg.LocalDC] > 0 })
		if err != nil {
			return fmt.Errorf("snapid: %w: reading the cluster's data centres (system.local, system.peers): %w", registry.ErrRegistry, err)
		}
		if view.nodes[cfg.LocalDC] == 0 {
			why := ""
			if view.incomplete != "" {
				why = "; " + incompleteAdvice(view) + " and try again"
			}
			return invalidConfig("local data centre %q is not one of the cluster's data centres (%s): every statement would go to another data centre%s",
				cfg.LocalDC, strings.Join(sortedKeys(view.nodes), ", "), why)
		}
	}
	if r.cons == gocql.EachQuorum {
		repl, err := r.keyspaceReplication(ctx)
		if err != nil {
			return fmt.Errorf("snapid: %w: reading the replication of keyspace %s: %w", registry.ErrRegistry, r.ks, err)
		}
		what := "uses"
		if repl == nil {
			repl, what = cfg.replication(), "would be created with"
		}
		if _, simple, ok := replicationFactors(repl, nil); ok && simple {
			return invalidConfig("consistency EACH_QUORUM needs a keyspace with NetworkTopologyStrategy; keyspace %s %s SimpleStrategy", r.ks, what)
		}
	}
	return nil
}

// createMissing creates the keyspace and the table if they do not exist,
// and reports whether it created anything; only then does it wait for the
// cluster to agree on the schema. What exists is used as it is, so that a
// role allowed only to read and write the table (no CREATE permission)
// needs no NoCreate, and a role with CREATE on the keyspace alone can make
// the table.
func (r *Registry) createMissing(ctx context.Context, cfg Config, rep *SchemaReport) (err error) {
	ksExists, tblExists, err := r.schemaExists(ctx)
	if err != nil {
		return err
	}
	if !ksExists {
		if cfg.NoCreateKeyspace {
			return r.noKeyspaceError(ctx)
		}
		if err := r.checkNewKeyspace(ctx, cfg); err != nil {
			return err
		}
	}
	created := false
	if !ksExists {
		if err := r.createKeyspace(ctx, cfg); err != nil {
			return err
		}
		rep.KeyspaceCreated, created = true, true
		rep.Replication = cfg.replication()
	}
	if !tblExists {
		if err := r.session.Query(r.stmts.createTable).ExecContext(ctx); err != nil {
			return schemaFail("table "+r.ks+"."+r.tbl+" does not exist and creating it failed", err)
		}
		rep.TablesCreated = append(rep.TablesCreated, r.tbl)
		created = true
	}
	if created {
		return r.agree(ctx)
	}
	return nil
}

// agree waits for the cluster's nodes to agree on the schema. Its error
// wraps registry.ErrRegistry and ErrSchemaAgreement, and says how long it
// waited.
func (r *Registry) agree(ctx context.Context) error {
	start := time.Now()
	err := r.awaitSchema(ctx)
	if err == nil {
		return nil
	}
	return fmt.Errorf("snapid: %w: %w within %v: %w", registry.ErrRegistry, ErrSchemaAgreement, time.Since(start).Round(100*time.Millisecond), err)
}

// schemaFail is the error of a schema step (what) that failed with err.
func schemaFail(what string, err error) error {
	return fmt.Errorf("snapid: %w: %s: %w", registry.ErrRegistry, what, err)
}

// schemaExists reads from the schema whether the keyspace exists and, if
// it does, whether the table does.
func (r *Registry) schemaExists(ctx context.Context) (ksExists, tblExists bool, err error) {
	ksExists, err = r.schemaHas(ctx, `SELECT COUNT(*) FROM system_schema.keyspaces WHERE keyspace_name = ?`, r.ks)
	if err != nil {
		return false, false, schemaFail("reading the schema", err)
	}
	if ksExists {
		if tblExists, err = r.schemaHas(ctx, `SELECT COUNT(*) FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?`, r.ks, r.tbl); err != nil {
			return false, false, schemaFail("reading the schema", err)
		}
	}
	return ksExists, tblExists, nil
}

// checkNewKeyspace refuses, before any DDL (nothing is created), a keyspace
// to create whose replication names data centres the cluster lacks or,
// unless cfg.AllowFragileReplication, cannot survive the loss of one node.
// One settled view of the cluster's nodes serves both checks.
func (r *Registry) checkNewKeyspace(ctx context.Context, cfg Config) error {
	repl := cfg.replication()
	view, err := r.settledNodes(ctx, func(nodes map[string]int) bool {
		return len(unknownDataCentres(repl, nodes)) == 0 &&
			(cfg.AllowFragileReplication || assessReplication(r.ks, repl, nodes, r.cons, cfg.LocalDC).Status != ReplicationAttention)
	})
	if err != nil {
		return schemaFail("reading the cluster's nodes (system.local, system.peers)", err)
	}
	if err := r.dataCentresError(repl, view); err != nil {
		return err
	}
	if a := assessReplication(r.ks, repl, view.nodes, r.cons, cfg.LocalDC); !cfg.AllowFragileReplication && a.Status == ReplicationAttention {
		return fragileError(a, view, r.cons)
	}
	return nil
}

// createKeyspace creates the keyspace with cfg's replication.
func (r *Registry) createKeyspace(ctx context.Context, cfg Config) error {
	repl, _ := replicationCQL(cfg.Replication) // validated already
	stmt := `CREATE KEYSPACE IF NOT EXISTS "` + r.ks + `" WITH replication = ` + repl
	if err := r.session.Query(stmt).ExecContext(ctx); err != nil {
		return schemaFail("keyspace "+r.ks+" does not exist and creating it failed (wrong keyspace name?)", err)
	}
	return nil
}

// noKeyspaceError is the refusal of a missing keyspace under
// NoCreateKeyspace: it names the keyspaces that hold a table of this name
// (the registries that exist), so that a misspelt name is seen as one.
func (r *Registry) noKeyspaceError(ctx context.Context) error {
	var found []string
	iter := r.session.Query(`SELECT keyspace_name, table_name FROM system_schema.tables`).IterContext(ctx)
	var ks, tbl string
	for iter.Scan(&ks, &tbl) {
		if tbl == r.tbl && !strings.HasPrefix(ks, "system") {
			found = append(found, ks)
		}
	}
	if err := iter.Close(); err != nil {
		return fmt.Errorf("snapid: %w: %w: keyspace %s does not exist (listing the keyspaces failed: %w)", registry.ErrInvalidOption, ErrNoKeyspace, r.ks, err)
	}
	// The names closest to the one asked for first (a misspelling),
	// at most maxListed of them.
	common := func(a string) int {
		n := 0
		for n < len(a) && n < len(r.ks) && a[n] == r.ks[n] {
			n++
		}
		return n
	}
	sort.Slice(found, func(i, j int) bool {
		if ci, cj := common(found[i]), common(found[j]); ci != cj {
			return ci > cj
		}
		return found[i] < found[j]
	})
	have := "no keyspace holds a registry yet"
	const maxListed = 8
	if len(found) > maxListed {
		found = append(found[:maxListed], fmt.Sprintf("and %d more", len(found)-maxListed))
	}
	if len(found) > 0 {
		have = "the registries are in keyspace " + strings.Join(found, ", ")
	}
	return fmt.Errorf("snapid: %w: %w: keyspace %s does not exist (%s); nothing was created", registry.ErrInvalidOption, ErrNoKeyspace, r.ks, have)
}

// unknownDataCentres returns the data centres of a NetworkTopologyStrategy
// replication that nodes (the cluster's nodes per data centre) lacks.
func unknownDataCentres(repl map[string]string, nodes map[string]int) []string {
	if strings.TrimPrefix(repl["class"], "org.apache.cassandra.locator.") != "NetworkTopologyStrategy" {
		return nil
	}
	var unknown []string
	for _, dc := range sortedKeys(repl) {
		if dc != "class" && dc != "replication_factor" && nodes[dc] == 0 {
			unknown = append(unknown, dc)
		}
	}
	return unknown
}

// dataCentresError refuses a replication naming a data centre the cluster
// does not have (a misspelt name), naming the cluster's data centres:
// Cassandra would refuse it too, and no AllowFragileReplication makes it
// work.
func (r *Registry) dataCentresError(repl map[string]string, view nodeView) error {
	unknown := unknownDataCentres(repl, view.nodes)
	if len(unknown) == 0 {
		return nil
	}
	why := ""
	if view.incomplete != "" {
		why = "; " + incompleteAdvice(view) + " and try again"
	}
	return fmt.Errorf("snapid: %w: Cassandra registry: %w: %s in the replication of keyspace %s; the cluster's data centres are %s "+
		"(nodetool status lists them)%s; nothing was created",
		registry.ErrInvalidOption, ErrUnknownDataCentre, quoteList(unknown), r.ks, strings.Join(sortedKeys(view.nodes), ", "), why)
}

// quoteList renders names as "a", "b".
func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// schemaHas runs a COUNT(*) query on system_schema (readable by every
// role) and reports whether it counted anything.
func (r *Registry) schemaHas(ctx context.Context, stmt string, args ...any) (bool, error) {
	var n int
	err := retryRead(ctx, r.log, "reading the schema", r.ks, func(ctx context.Context) error {
		return r.session.Query(stmt, args...).ScanContext(ctx, &n)
	})
	return n > 0, err
}

// checkColumns verifies that the table exists with the columns this code
// reads and writes, so that an incompatible table made by someone else is
// reported plainly instead of as a failing statement later.
func (r *Registry) checkColumns(ctx context.Context) error {
	iter := r.session.Query(`SELECT column_name, type, kind FROM system_schema.columns WHERE keyspace_name = ? AND table_name = ?`,
		r.ks, r.tbl).IterContext(ctx)
	have := map[string]string{}
	var name, typ, kind string
	for iter.Scan(&name, &typ, &kind) {
		if kind == "partition_key" {
			typ += " PRIMARY KEY"
		}
		have[name] = typ
	}
	if err := iter.Close(); err != nil {
		return fmt.Errorf("snapid: %w: reading the schema of %s.%s: %w", registry.ErrRegistry, r.ks, r.tbl, err)
	}
	if len(have) == 0 {
		return fmt.Errorf("snapid: %w: table %s.%s does not exist", registry.ErrRegistry, r.ks, r.tbl)
	}
	var bad []string
	for i, c := range cql.Columns {
		want := c.Type
		if i == 0 {
			want += " PRIMARY KEY"
		}
		if got, ok := have[c.Name]; !ok {
			bad = append(bad, fmt.Sprintf("column %s is missing", c.Name))
		} else if got != want {
			bad = append(bad, fmt.Sprintf("column %s is %s, want %s", c.Name, got, want))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("snapid: %w: table %s.%s has an incompatible schema: %s", registry.ErrRegistry, r.ks, r.tbl, strings.Join(bad, "; "))
	}
	return nil
}

// SchemaReport says what SetUpSchema found and did.
type SchemaReport struct {
	Keyspace, Table string
	// KeyspaceCreated is set when the keyspace was created (with
	// Config.Replication); otherwise it existed and was left as it was.
	KeyspaceCreated bool
	// Replication is the keyspace's replication as the cluster stores it
	// after the set-up (for a keyspace that existed: its own, whatever
	// Config.Replication asked for).
	Replication map[string]string
	// TablesCreated lists the tables created; the others existed.
	TablesCreated []string
}

// CreateSchema is SetUpSchema reporting only whether it created
// anything (the keyspace or one of the tables).
func CreateSchema(ctx context.Context, cfg Config) (created bool, err error) {
	rep, err := SetUpSchema(ctx, cfg)
	return rep.KeyspaceCreated || len(rep.TablesCreated) > 0, err
}

// SetUpSchema creates the registry's keyspace (with
// cfg.Replication), its table and the table of integer sequences if they
// do not exist (a Registry creates the sequences' table itself only when
// a sequence is first created), and checks the table's columns. It waits
// for the cluster's nodes to agree on the schema first, so that what
// exists is what every node has, and again after each thing it creates.
// Its report says what it created and the keyspace's replication; running
// it again creates nothing. A keyspace that exists is
// used as it is, whatever its replication (Registry.CheckReplication
// reports on it); one to create whose replication cannot survive the loss
// of one node is refused before anything is created
// (ErrFragileReplication) unless cfg.AllowFragileReplication, and one
// naming a data centre the cluster does not have is refused
// (ErrUnknownDataCentre). With cfg.NoCreateKeyspace a missing keyspace is
// refused (ErrNoKeyspace). cfg.NoCreate is ignored. Errors wrap
// registry.ErrInvalidOption (invalid cfg, refused before anything is
// created) or registry.ErrRegistry.
//
// On an error the report says what was created before it (the keyspace,
// the tables), which stays. Nodes that do not agree on the schema within
// ctx's time (ErrSchemaAgreement: a node down since the schema changed, a
// slow cluster) stop it there; running it again is safe: it waits for the
// nodes to agree, then creates only what is missing.
//
// This is the explicit, one-time set-up of a production cluster (snapctl
// setup): run it once, from one place, before the hosts start, so that the
// keyspace gets the replication it needs and is not created concurrently
// by every host's first start. It is safe to run concurrently with itself
// and with NewRegistry (every statement is IF NOT EXISTS).
func SetUpSchema(ctx context.Context, cfg Config) (rep SchemaReport, err error) {
	r, err := dial(ctx, cfg)
	if err != nil {
		return rep, err
	}
	defer r.Close()
	return r.setUpSchema(ctx, cfg)
}

// setUpSchema is SetUpSchema on r.
func (r *Registry) setUpSchema(ctx context.Context, cfg Config) (rep SchemaReport, err error) {
	rep.Keyspace, rep.Table = r.ks, r.tbl
	if err := r.agree(ctx); err != nil {
		return rep, err
	}
	if rep, err = r.setUpReport(ctx, cfg, true); err != nil {
		return rep, err
	}
	_, seqCreated, err := r.ensureTableCreated(ctx, true)
	if seqCreated {
		rep.TablesCreated = append(rep.TablesCreated, seqTable)
	}
	if err != nil {
		return rep, err
	}
	_, _, numCreated, err := r.numbersCreated(ctx, true)
	if numCreated {
		rep.TablesCreated = append(rep.TablesCreated, r.tbl+numbersSuffix)
	}
	if errors.Is(err, registry.ErrInvalidOption) {
		// A table name too long for the numbers' table: node numbers
		// are not available with it; names and sequences are.
		err = nil
	}
	if err != nil {
		return rep, err
	}
	if rep.Replication, err = r.keyspaceReplication(ctx); err != nil {
		return rep, fmt.Errorf("snapid: %w: reading the replication of keyspace %s: %w", registry.ErrRegistry, r.ks, err)
	}
	return rep, nil
}
