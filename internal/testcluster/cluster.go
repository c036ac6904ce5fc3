package testcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// Environment that scripts/cluster-test.sh sets for the cluster tests,
// inside the network namespace that holds the cluster.
const (
	// EnvNodes lists the nodes' addresses in node order, comma-separated
	// ("127.0.0.1,127.0.0.2,127.0.0.3").
	EnvNodes = "SNAPID_CLUSTER_NODES"
	// EnvDCs lists each node's data centre in the same order
	// ("dc1,dc2,dc1").
	EnvDCs = "SNAPID_CLUSTER_DCS"
	// EnvDir is the cluster's state directory (pid files), the
	// SNAPID_CLUSTER_DIR of scripts/cassandra.sh.
	EnvDir = "SNAPID_CLUSTER_DIR"
)

// Cluster is the multi-node Cassandra cluster that scripts/cluster-test.sh
// starts with scripts/cassandra.sh (nodes 127.0.0.1 … 127.0.0.N, each in a
// data centre) inside a network namespace of its own, with the tests. Its
// methods kill and restart nodes and cut data centres apart with nftables
// rules in that namespace; every test that changes the cluster gets it back
// whole when it ends (Restore runs at cleanup), also on failure.
//
// A Cluster is used by one test at a time (the cluster tests do not run in
// parallel); its methods may be called from any goroutine of that test,
// but Kill, Start and Partition must not be called concurrently for one
// node.
type Cluster struct {
	Addrs []string // node i (1-based) is Addrs[i-1]
	DCs   []string // data centre of each node, in the same order
	dir   string
	mu    sync.Mutex
	down  map[int]bool
	cut   bool
}

var (
	probeOnce sync.Once
	probeErr  error
)

// RequireCluster returns the cluster described by SNAPID_CLUSTER_NODES and
// SNAPID_CLUSTER_DCS, with every node up, or skips tb (also in CI: the
// cluster tests run in their own step, scripts/cluster-test.sh, which
// fails unless each of them passed). At tb's end it restarts killed nodes
// and heals partitions (Restore).
func RequireCluster(tb testing.TB) *Cluster {
	tb.Helper()
	nodes, dcs := os.Getenv(EnvNodes), os.Getenv(EnvDCs)
	if nodes == "" || dcs == "" {
		tb.Skipf("needs a multi-node cluster in a network namespace: run bash scripts/cluster-test.sh (it sets %s and %s)", EnvNodes, EnvDCs)
	}
	c := &Cluster{Addrs: strings.Split(nodes, ","), DCs: strings.Split(dcs, ","), dir: os.Getenv(EnvDir), down: map[int]bool{}}
	if len(c.Addrs) != len(c.DCs) || c.dir == "" {
		tb.Fatalf("%s=%q, %s=%q, %s=%q: want one data centre per node and the state directory", EnvNodes, nodes, EnvDCs, dcs, EnvDir, c.dir)
	}
	probeOnce.Do(func() { probeErr = c.makeProbe() })
	if probeErr != nil {
		tb.Fatalf("cluster probe keyspace: %v", probeErr)
	}
	tb.Cleanup(func() { c.Restore(tb) })
	c.WaitAllUp(tb)
	return c
}

// N is the number of nodes.
func (c *Cluster) N() int { return len(c.Addrs) }

// Addr is node i's address (1-based).
func (c *Cluster) Addr(i int) string { return c.Addrs[i-1] }

// DC is node i's data centre.
func (c *Cluster) DC(i int) string { return c.DCs[i-1] }

// NodesIn returns the nodes (1-based) of data centre dc.
func (c *Cluster) NodesIn(dc string) []int {
	var out []int
	for i, d := range c.DCs {
		if d == dc {
			out = append(out, i+1)
		}
	}
	return out
}

// DataCentres returns the data centres in order of first appearance.
func (c *Cluster) DataCentres() []string {
	var out []string
	for _, d := range c.DCs {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// Replication is the NetworkTopologyStrategy map that puts a replica on
// every node: each data centre's factor is its number of nodes.
func (c *Cluster) Replication() map[string]string {
	m := map[string]string{"class": "NetworkTopologyStrategy"}
	for _, dc := range c.DataCentres() {
		m[dc] = strconv.Itoa(len(c.NodesIn(dc)))
	}
	return m
}

func (c *Cluster) replicationCQL() string {
	var parts []string
	for _, dc := range c.DataCentres() {
		parts = append(parts, fmt.Sprintf("'%s': %d", dc, len(c.NodesIn(dc))))
	}
	return "{'class': 'NetworkTopologyStrategy', " + strings.Join(parts, ", ") + "}"
}

func (c *Cluster) clusterConfig(only ...int) *gocql.ClusterConfig {
	hosts := c.Addrs
	if len(only) > 0 {
		hosts = nil
		for _, i := range only {
			hosts = append(hosts, c.Addr(i))
		}
	}
	cfg := gocql.NewCluster(hosts...)
	cfg.ProtoVersion = 4
	cfg.Timeout = 12 * time.Second
	cfg.ConnectTimeout = 5 * time.Second
	cfg.ReconnectInterval = time.Second
	// gocql's messages are dropped: killed nodes make it log every failed
	// reconnection.
	cfg.Logger = gocql.NewLogger(gocql.LogLevelNone)
	if len(only) > 0 {
		cfg.HostFilter = gocql.WhiteListHostFilter(hosts...)
	}
	return cfg
}

// Session returns a session closed when tb ends. With nodes given, every
// statement goes to those nodes only (they coordinate it); without, to any
// node.
func (c *Cluster) Session(tb testing.TB, nodes ...int) *gocql.Session {
	tb.Helper()
	s, err := c.clusterConfig(nodes...).CreateSession()
	if err != nil {
		tb.Fatalf("session to nodes %v: %v", nodes, err)
	}
	tb.Cleanup(s.Close)
	return s
}

// NewKeyspace picks a fresh keyspace name (made by whatever uses it first,
// with Replication) and a direct session to every node. The keyspace is
// dropped at tb's end, after the cluster is restored (see the cleanup for
// a drop that keeps failing).
func (c *Cluster) NewKeyspace(tb testing.TB) *Keyspace {
	tb.Helper()
	k := &Keyspace{Hosts: c.Addrs, Name: "snapid_test_" + randomHex(tb), Admin: c.Session(tb)}
	tb.Cleanup(func() {
		c.Restore(tb)
		// Right after nodes were killed and restarted, the coordinator may
		// not know the keyspace's tables yet ("Unknown CF"): the drop is
		// tried again until the nodes agree. A keyspace left behind harms
		// nothing (the cluster's next start wipes its state), so it is
		// reported, not failed.
		if err := k.drop(2*time.Minute, 2*time.Second); err != nil {
			tb.Logf("test keyspace %s left in the test cluster (its next start wipes it): %v", k.Name, err)
		}
	})
	return k
}

// script returns the path of scripts/cassandra.sh (beside this package in
// the module).
func script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "scripts", "cassandra.sh")
}

// pid returns the running process of node i, from its pid file, if it is
// that node's Cassandra.
func (c *Cluster) pid(i int) (int, bool) {
	dir := filepath.Join(c.dir, fmt.Sprintf("node%d", i))
	b, err := os.ReadFile(filepath.Join(dir, "cassandra.pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), filepath.Join(dir, "conf", "cassandra.yaml")) {
		return 0, false
	}
	return pid, true
}

// Kill SIGKILLs node i and returns once the process is gone. Its data
// stays; Start brings it back, and Restore does at tb's end.
func (c *Cluster) Kill(tb testing.TB, i int) {
	tb.Helper()
	c.mu.Lock()
	c.down[i] = true
	c.mu.Unlock()
	pid, ok := c.pid(i)
	if !ok {
		return
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		tb.Errorf("kill node %d (pid %d): %v", i, pid, err)
		return
	}
	for {
		if _, ok := c.pid(i); !ok {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Start starts node i again with its data and returns once it takes CQL
// connections (scripts/cassandra.sh start-node). It reports a failure with
// tb.Errorf and returns false, so it may run in any goroutine.
//
// A node that finds no peer answering its gossip shadow round in time
// ("Unable to gossip with any peers": on this 2-core machine the other
// nodes can be slow to answer while they take over the killed node's
// load) exits at once; it is started again, up to three times, as an
// operator would.
func (c *Cluster) Start(tb testing.TB, i int) bool {
	var out []byte
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		out, err = exec.Command("bash", script(), "start-node", strconv.Itoa(i)).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "Unable to gossip with any peers") {
			break
		}
		tb.Logf("start node %d: no peer answered its gossip shadow round (attempt %d); starting it again", i, attempt)
		time.Sleep(2 * time.Second)
	}
	if err != nil {
		tb.Errorf("start node %d: %v\n%s", i, err, out)
		return false
	}
	c.mu.Lock()
	delete(c.down, i)
	c.mu.Unlock()
	return true
}

// Down returns the nodes killed and not started again, in order.
func (c *Cluster) Down() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for i := range c.down {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// nft runs nft with a ruleset on stdin.
func nft(rules string) error {
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %w: %s", err, out)
	}
	return nil
}

// nftTable is the nftables table of the partitions, in the cluster's
// network namespace only.
const nftTable = "snapid_partition"

// Partition cuts the storage traffic (port 7000, both directions) between
// the nodes of data centre a and those of b, with nftables rules in the
// cluster's network namespace: each side then sees the other's nodes as
// down, while clients still reach every node. Heal removes the rules, and
// so does Restore at tb's end.
func (c *Cluster) Partition(tb testing.TB, a, b string) {
	tb.Helper()
	set := func(dc string) string {
		var addrs []string
		for _, i := range c.NodesIn(dc) {
			addrs = append(addrs, c.Addr(i))
		}
		if len(addrs) == 0 {
			tb.Fatalf("no nodes in data centre %q", dc)
		}
		return "{ " + strings.Join(addrs, ", ") + " }"
	}
	sa, sb := set(a), set(b)
	var rules strings.Builder
	fmt.Fprintf(&rules, "table ip %s {\n chain out {\n  type filter hook output priority 0; policy accept;\n", nftTable)
	for _, p := range [][2]string{{sa, sb}, {sb, sa}} {
		fmt.Fprintf(&rules, "  ip saddr %s ip daddr %s tcp dport 7000 drop\n", p[0], p[1])
		fmt.Fprintf(&rules, "  ip saddr %s ip daddr %s tcp sport 7000 drop\n", p[0], p[1])
	}
	rules.WriteString(" }\n}\n")
	c.mu.Lock()
	c.cut = true
	c.mu.Unlock()
	if err := nft(rules.String()); err != nil {
		tb.Fatalf("partition %s | %s: %v", a, b, err)
	}
}

// CutClients drops the CQL traffic (port 9042) of node i with an nftables
// rule in the cluster's network namespace: the requests clients send to it
// (requests true), or its replies to them (false), so that a statement
// is lost before its coordinator saw it, or after it ran. Heal removes
// the rule, and so does Restore at tb's end.
func (c *Cluster) CutClients(tb testing.TB, i int, requests bool) {
	tb.Helper()
	rule := fmt.Sprintf("ip saddr %s tcp sport 9042 drop", c.Addr(i))
	if requests {
		rule = fmt.Sprintf("ip daddr %s tcp dport 9042 drop", c.Addr(i))
	}
	c.mu.Lock()
	c.cut = true
	c.mu.Unlock()
	if err := nft(fmt.Sprintf("table ip %s {\n chain out {\n  type filter hook output priority 0; policy accept;\n  %s\n }\n}\n", nftTable, rule)); err != nil {
		tb.Fatalf("cutting the clients of node %d: %v", i, err)
	}
}

// Heal removes every partition rule.
func (c *Cluster) Heal(tb testing.TB) {
	tb.Helper()
	c.mu.Lock()
	cut := c.cut
	c.cut = false
	c.mu.Unlock()
	if !cut {
		return
	}
	if err := nft("delete table ip " + nftTable + "\n"); err != nil {
		tb.Errorf("heal: %v", err)
	}
}

// Restore heals partitions, starts every killed node again and waits until
// every node sees every other up. Cleanup runs it; tests call it to end a
// failure period early.
func (c *Cluster) Restore(tb testing.TB) {
	tb.Helper()
	c.Heal(tb)
	for _, i := range c.Down() {
		c.Start(tb, i)
	}
	c.WaitAllUp(tb)
}

// The probe keyspace has a replica on every node: a read of it at ALL
// through node i succeeds only when i sees every node up, and fails with
// Unavailable, without waiting, once i has convicted one as down.
const probeKeyspace = "snapid_cluster_probe"

func (c *Cluster) makeProbe() error {
	s, err := c.clusterConfig().CreateSession()
	if err != nil {
		return err
	}
	defer s.Close()
	// Right after start-up a node may not know every data centre yet
	// ("Unrecognized strategy option"): try again for a while.
	deadline := time.Now().Add(2 * time.Minute)
	for _, stmt := range []string{
		"CREATE KEYSPACE IF NOT EXISTS " + probeKeyspace + " WITH replication = " + c.replicationCQL(),
		"CREATE TABLE IF NOT EXISTS " + probeKeyspace + ".probe (k int PRIMARY KEY)",
	} {
		for {
			err := s.Query(stmt).Exec()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: %w", stmt, err)
			}
			time.Sleep(time.Second)
		}
	}
	return nil
}

// probe reads the probe row through the session's node at consistency
// level cl.
func (c *Cluster) probe(s *gocql.Session, cl gocql.Consistency) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var k int
	err := s.Query("SELECT k FROM "+probeKeyspace+".probe WHERE k = 0").Consistency(cl).ScanContext(ctx, &k)
	if errors.Is(err, gocql.ErrNotFound) {
		return nil
	}
	return err
}

// waitView waits (up to 3 minutes) until ok holds for the probe through
// each of nodes.
func (c *Cluster) waitView(tb testing.TB, what string, nodes []int, cl gocql.Consistency, ok func(err error) bool) {
	tb.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for _, i := range nodes {
		var s *gocql.Session
		for {
			var err error
			if s == nil {
				s, err = c.clusterConfig(i).CreateSession()
			}
			if err == nil {
				err = c.probe(s, cl)
				if ok(err) {
					break
				}
			}
			if time.Now().After(deadline) {
				if s != nil {
					s.Close()
				}
				tb.Fatalf("node %d (%s) does not see %s after 3 minutes: %v", i, c.Addr(i), what, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		s.Close()
	}
}

// WaitAllUp waits until every node running sees every node up.
func (c *Cluster) WaitAllUp(tb testing.TB) {
	tb.Helper()
	var up []int
	for i := 1; i <= c.N(); i++ {
		if !slices.Contains(c.Down(), i) {
			up = append(up, i)
		}
	}
	c.waitView(tb, "every node up", up, gocql.All, func(err error) bool { return err == nil })
}

// WaitSeesDown waits until each of nodes has convicted at least down
// nodes as down: a read through it that needs the other N-down+1 replicas
// fails at once with Unavailable. After Kill or Partition, that is the
// moment from which its coordinators stop waiting for the lost nodes.
func (c *Cluster) WaitSeesDown(tb testing.TB, down int, nodes ...int) {
	tb.Helper()
	var cl gocql.Consistency
	switch need := c.N() - down + 1; {
	case need == c.N():
		cl = gocql.All
	case need == 1:
		cl = gocql.One
	case need == 2:
		cl = gocql.Two
	case need == 3:
		cl = gocql.Three
	default:
		tb.Fatalf("WaitSeesDown(%d) on %d nodes: no consistency level needs %d replicas", down, c.N(), need)
	}
	c.waitView(tb, fmt.Sprintf("%d node(s) down", down), nodes, cl, func(err error) bool {
		var u *gocql.RequestErrUnavailable
		return errors.As(err, &u)
	})
}
