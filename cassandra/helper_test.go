package cassandra

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/internal/testcluster"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/require"
)

// Helpers for tests against a real Cassandra (see internal/testcluster).

// requireCassandra returns the contact points of the test node, failing
// (CI) or skipping the test without one.
func requireCassandra(tb testing.TB) []string {
	tb.Helper()
	return testcluster.Require(tb)
}

// testKeyspace is a keyspace of one test's own (see testcluster), made by
// the first registry opened on it and dropped when the test ends.
type testKeyspace struct{ *testcluster.Keyspace }

func newTestKeyspace(tb testing.TB) *testKeyspace {
	tb.Helper()
	return &testKeyspace{testcluster.NewKeyspace(tb)}
}

func randomHex(tb testing.TB, n int) string {
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(tb, err)
	return hex.EncodeToString(b)
}

func (k *testKeyspace) config() Config {
	return Config{Hosts: k.Hosts, Keyspace: k.Name}
}

// registry opens a registry on the keyspace, closed at cleanup.
func (k *testKeyspace) registry(tb testing.TB, mods ...func(*Config)) *Registry {
	tb.Helper()
	cfg := k.config()
	for _, m := range mods {
		m(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := NewRegistry(ctx, cfg)
	require.NoError(tb, err)
	tb.Cleanup(r.Close)
	return r
}

// keyspaceExists reports whether name is a keyspace.
func (k *testKeyspace) keyspaceExists(tb testing.TB, name string) bool {
	tb.Helper()
	return k.Replication(tb, name) != nil
}

// tableExists reports whether the test's keyspace has the table name.
func (k *testKeyspace) tableExists(tb testing.TB, name string) bool {
	tb.Helper()
	var n int
	err := k.Admin.Query(`SELECT COUNT(*) FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?`, k.Name, name).Scan(&n)
	require.NoError(tb, err)
	return n > 0
}

// rawRow reads the stored row at SERIAL, every column, for comparisons
// that must see all of it (the claim token included).
func rawRow(tb testing.TB, r *Registry, name string) (map[string]any, bool) {
	tb.Helper()
	var rec cql.Record
	found, err := r.q.SerialRead(context.Background(), &rec, name)
	require.NoError(tb, err)
	if !found {
		return nil, false
	}
	return recordValues(&rec), true
}

// recordValues returns every column's value (nil for null), by column name.
func recordValues(rec *cql.Record) map[string]any {
	out := map[string]any{}
	for i, d := range rec.Dests() {
		var v any
		switch p := d.(type) {
		case **string:
			if *p != nil {
				v = **p
			}
		case **time.Time:
			if *p != nil {
				v = (*p).UTC()
			}
		case **int64:
			if *p != nil {
				v = **p
			}
		}
		out[cql.Columns[i].Name] = v
	}
	return out
}

// Each simulated host keeps its own record of the names it uses (see
// /var/lib/snapid/records), as each machine has its own
// /var/lib/snapid/records. The place TestMain sets for the whole binary is
// shared by every test, whose keyspaces give the same node numbers to other
// names and whose hosts reuse names with fresh counter files; so every Open
// and Release here names its host's place, and every child gets it in
// SNAPID_T_RECORDS.
var (
	hostRecordsMu   sync.Mutex
	hostRecordsDirs = map[testing.TB]map[string]string{}
)

// hostRecords is the records place of the host key in the test tb: the same
// directory for the same key, a new one in the test's temporary directory
// for a new key.
func hostRecords(tb testing.TB, key string) string {
	tb.Helper()
	hostRecordsMu.Lock()
	defer hostRecordsMu.Unlock()
	dirs, ok := hostRecordsDirs[tb]
	if !ok {
		dirs = map[string]string{}
		hostRecordsDirs[tb] = dirs
		tb.Cleanup(func() {
			hostRecordsMu.Lock()
			defer hostRecordsMu.Unlock()
			delete(hostRecordsDirs, tb)
		})
	}
	if d, ok := dirs[key]; ok {
		return d
	}
	d := tb.TempDir()
	dirs[key] = d
	return d
}

// testName returns a fresh valid node name.
func testName(tb testing.TB) string {
	return "n_" + randomHex(tb, 6)
}

// testClaim is a claim by owner from a host named after it.
func testClaim(name, owner string) registry.Claim {
	return registry.Claim{Name: name, Owner: owner, Hostname: owner + ".example", Address: "192.0.2.1", MachineID: "machine-" + owner}
}

// lossyQuerier wraps a cql.CASQuerier and, for chosen CAS calls, loses the
// reply after the statement ran, or drops the statement and fails, as a
// network or a timeout would. It counts calls. It is not safe for
// concurrent use: each test drives its registry from one goroutine.
type lossyQuerier struct {
	inner cql.CASQuerier
	// plan is called before each CAS with its 1-based number and the
	// statement; it returns what to do.
	plan func(n int, stmt string) lossPlan

	casCalls, reads int
	readErr         error   // serial reads fail with this once set
	readFailures    []error // the next serial reads fail with these, one each, before readErr applies
}

type lossPlan struct {
	dropRequest bool   // do not run the statement
	loseReply   bool   // run it, then fail
	err         error  // the error returned when dropping or losing
	before      func() // runs before the statement (or before failing, if dropped)
	failRead    error  // serial reads fail with this from now on
}

func (l *lossyQuerier) CAS(ctx context.Context, rec *cql.Record, stmt string, args ...any) (bool, error) {
	l.casCalls++
	var p lossPlan
	if l.plan != nil {
		p = l.plan(l.casCalls, stmt)
	}
	if p.before != nil {
		p.before()
	}
	if p.failRead != nil {
		l.readErr = p.failRead
	}
	if p.dropRequest {
		return false, p.err
	}
	applied, err := l.inner.CAS(ctx, rec, stmt, args...)
	if p.loseReply && err == nil {
		*rec = cql.Record{}
		return false, p.err
	}
	return applied, err
}

func (l *lossyQuerier) SerialRead(ctx context.Context, rec *cql.Record, name string) (bool, error) {
	l.reads++
	if len(l.readFailures) > 0 {
		err := l.readFailures[0]
		l.readFailures = l.readFailures[1:]
		return false, err
	}
	if l.readErr != nil {
		return false, l.readErr
	}
	return l.inner.SerialRead(ctx, rec, name)
}

// lossy installs a lossyQuerier on r (before r is shared with goroutines).
func lossy(r *Registry, plan func(n int, stmt string) lossPlan) *lossyQuerier {
	l := &lossyQuerier{inner: r.q, plan: plan}
	r.q = l
	return l
}

// draw takes n numbers from g.
func draw(t *testing.T, g *snapid.Generator, n int) []uint64 {
	t.Helper()
	out := make([]uint64, 0, n)
	for range n {
		v, err := g.Next()
		require.NoError(t, err)
		out = append(out, v)
	}
	return out
}

// ctValue reads the counter's last issued number.
func ctValue(t *testing.T, path string) uint64 {
	t.Helper()
	v, err := admin.ReadCounter(path)
	require.NoError(t, err)
	return v
}
