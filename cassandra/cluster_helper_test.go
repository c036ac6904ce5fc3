package cassandra

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/internal/testcluster"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/require"
)

// Set-up shared by the tests against a real multi-node cluster
// (cluster_*_test.go). They run only in scripts/cluster-test.sh, which
// starts 3 nodes in 2 data centres (dc1 = nodes 1 and 3, dc2 = node 2)
// inside a network namespace; elsewhere they skip.
//
// Their keyspace has a replica on every node: NetworkTopologyStrategy
// {dc1: 2, dc2: 1}, 3 replicas. A quorum (2) survives the loss of any one
// node, and dc1 alone holds a quorum while dc2 alone does not, so a cut
// between the data centres leaves exactly one side able to claim.

// clusterEnv is a test's keyspace on the cluster, its registry table
// created while every node is up.
type clusterEnv struct {
	c  *testcluster.Cluster
	ks *testcluster.Keyspace
}

func newClusterEnv(t testing.TB) *clusterEnv {
	t.Helper()
	c := testcluster.RequireCluster(t)
	e := &clusterEnv{c: c, ks: c.NewKeyspace(t)}
	e.registry(t) // creates the keyspace and the table
	return e
}

// config is the registry configuration on the keyspace, over every node
// (or the nodes given, as contact points; the driver still finds the
// others).
func (e *clusterEnv) config(nodes ...int) Config {
	hosts := e.c.Addrs
	if len(nodes) > 0 {
		hosts = nil
		for _, i := range nodes {
			hosts = append(hosts, e.c.Addr(i))
		}
	}
	return Config{Hosts: hosts, Keyspace: e.ks.Name, Replication: e.c.Replication(), ReconnectInterval: time.Second}
}

// registry opens a registry through the library's own API, closed at
// cleanup.
func (e *clusterEnv) registry(t testing.TB, mods ...func(*Config)) *Registry {
	t.Helper()
	cfg := e.config()
	for _, m := range mods {
		m(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := NewRegistry(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(r.Close)
	return r
}

// registryVia opens a registry whose statements go to the coordinators
// policy orders first (see coordinatorPolicy), on the existing table.
func (e *clusterEnv) registryVia(t *testing.T, p *coordinatorPolicy, mods ...func(*Config)) *Registry {
	t.Helper()
	cfg := e.config()
	for _, m := range mods {
		m(&cfg)
	}
	cl, err := cfg.cluster()
	require.NoError(t, err)
	p.HostSelectionPolicy = gocql.RoundRobinHostPolicy()
	cl.PoolConfig.HostSelectionPolicy = p
	cl.Logger = slogLogger{slog.New(slog.DiscardHandler)}
	s, err := cl.CreateSession()
	require.NoError(t, err)
	r := newRegistry(s, &gocqlQuerier{s: s, cons: cl.Consistency, serial: cl.SerialConsistency}, cfg.keyspace(), cfg.table(), nil)
	t.Cleanup(r.Close)
	require.NoError(t, r.checkColumns(t.Context()))
	return r
}

// coordinatorPolicy is a gocql host selection policy for tests that choose
// the coordinator of each statement: hosts are tried in the order of
// rank (lower first; ties in round-robin order). The driver moves to the
// next host only when it has no connection to one (no retry policy), so a
// statement sent goes to the first host that is up as far as the driver
// knows.
type coordinatorPolicy struct {
	gocql.HostSelectionPolicy
	rank func(stmt, addr string) int
}

func (p *coordinatorPolicy) Pick(q gocql.ExecutableStatement) gocql.NextHost {
	next := p.HostSelectionPolicy.Pick(q)
	var stmt string
	if gq, ok := q.Statement().(*gocql.Query); ok {
		stmt = gq.Statement()
	}
	var hosts []gocql.SelectedHost
	for h := next(); h != nil; h = next() {
		hosts = append(hosts, h)
	}
	slices.SortStableFunc(hosts, func(a, b gocql.SelectedHost) int {
		return p.rank(stmt, a.Info().ConnectAddress().String()) - p.rank(stmt, b.Info().ConnectAddress().String())
	})
	i := 0
	return func() gocql.SelectedHost {
		if i >= len(hosts) {
			return nil
		}
		i++
		return hosts[i-1]
	}
}

// preferring ranks addr first for every statement.
func preferring(addr string) *coordinatorPolicy {
	return &coordinatorPolicy{rank: func(_, a string) int {
		if a == addr {
			return 0
		}
		return 1
	}}
}

// isLWT reports whether stmt is one of the registry's conditional writes.
func isLWT(stmt string) bool {
	return strings.HasPrefix(stmt, "INSERT") || strings.HasPrefix(stmt, "UPDATE")
}

// serialRow reads name's row at SERIAL through node via alone: an
// independent judge of what the registry holds (it also completes a Paxos
// round left in flight).
func (e *clusterEnv) serialRow(t *testing.T, s *gocql.Session, name string) (cql.Record, bool) {
	t.Helper()
	q := &gocqlQuerier{s: s, cons: gocql.Quorum, serial: gocql.Serial, selectOne: newStatements(e.ks.Name, DefaultTable).selectOne}
	var rec cql.Record
	var found bool
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		found, err = q.SerialRead(ctx, &rec, name)
		cancel()
		if err == nil {
			return rec, found
		}
		time.Sleep(time.Second)
	}
	require.NoError(t, err, "serial read of %q", name)
	return rec, found
}

// idLog collects ids issued by Generators, from any goroutine.
type idLog struct {
	mu  sync.Mutex
	ids map[string]int
	dup []string
}

func newIDLog() *idLog { return &idLog{ids: map[string]int{}} }

func (l *idLog) add(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ids[id]++
	if l.ids[id] == 2 {
		l.dup = append(l.dup, id)
	}
}

// count and duplicates: how many distinct ids, and those issued twice.
func (l *idLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ids)
}

func (l *idLog) duplicates() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.dup)
}

// openGen opens a Generator on a counter of its own under dir with the
// registry, small reservation steps (so the mark moves often) and a quick
// heartbeat; each edit then changes that configuration (its Registry is
// set). Each counter path is a host of its own: its records place is
// hostRecords(t, path), the same on every Open of that path.
func openGen(t *testing.T, path, name string, reg registry.Registry, step uint64, edits ...func(*snapid.Config)) (*snapid.Generator, error) {
	t.Helper()
	cfg := snapid.Config{
		Registry: &snapid.RegistryConfig{
			Registry:      reg,
			Host:          snapid.HostInfo{Hostname: name + ".example", Address: "192.0.2.7", MachineID: "m-" + name},
			ReserveStep:   step,
			OutageHorizon: -1, // sizing off: every step is step
			Heartbeat:     500 * time.Millisecond,
			Timeout:       30 * time.Second,
		},
		BindingDir: hostRecords(t, path),
	}
	for _, edit := range edits {
		edit(&cfg)
	}
	return snapid.Open(path, name, cfg)
}

// registryTimeout is the edit of openGen's configuration that bounds each
// registry call by d.
func registryTimeout(d time.Duration) func(*snapid.Config) {
	return func(c *snapid.Config) { c.Registry.Timeout = d }
}

// counterOf is the counter's value, 0 if it does not exist.
func counterOf(t *testing.T, path string) uint64 {
	t.Helper()
	v, err := admin.ReadCounter(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	require.NoError(t, err)
	return v
}
