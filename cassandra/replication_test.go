package cassandra

import (
	"context"
	"errors"
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func simple(rf string) map[string]string {
	return map[string]string{"class": "org.apache.cassandra.locator.SimpleStrategy", "replication_factor": rf}
}

func nts(kv ...string) map[string]string {
	m := map[string]string{"class": "org.apache.cassandra.locator.NetworkTopologyStrategy"}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// The rule on clusters this machine cannot run: the topology is given.
func TestAssessReplication(t *testing.T) {
	one, three := map[string]int{"dc1": 1}, map[string]int{"dc1": 3}
	twoDCs := map[string]int{"dc1": 3, "dc2": 3}
	for _, tc := range []struct {
		name             string
		repl             map[string]string
		nodes            map[string]int
		cons             gocql.Consistency
		localDC          string
		status           string
		replicas, quorum int
		detail, fix      string // substrings
	}{
		{"one node, one replica", simple("1"), one, 0, "", ReplicationWarning, 1, 1, "one-node cluster", "3 nodes per data centre"},
		{"one node, nts one replica", nts("dc1", "1"), one, 0, "", ReplicationWarning, 1, 1, "one-node cluster", ""},
		{"one node, three replicas", simple("3"), one, 0, "", ReplicationAttention, 3, 2, "only 1 exist", "add nodes"},
		{"one node, three replicas: 1 node", simple("3"), one, 0, "", ReplicationAttention, 3, 2, "the cluster has 1 node for 3 replicas", "add nodes"},
		{"three nodes, one replica", simple("1"), three, 0, "", ReplicationAttention, 1, 1, "one replica on a cluster of 3 nodes",
			`ALTER KEYSPACE "ks" WITH replication = {'class': 'NetworkTopologyStrategy', 'dc1': '3'}`},
		{"three nodes, two replicas", simple("2"), three, 0, "", ReplicationAttention, 2, 2, "with one of the nodes holding them down", "nodetool repair --full ks"},
		{"three nodes, three replicas", simple("3"), three, 0, "", ReplicationOK, 3, 2, "", ""},
		{"two nodes, three replicas", simple("3"), map[string]int{"dc1": 2}, 0, "", ReplicationAttention, 3, 2, "the cluster has 2 nodes for 3 replicas", "add nodes"},
		{"two nodes, two replicas", nts("dc1", "2"), map[string]int{"dc1": 2}, 0, "", ReplicationAttention, 2, 2, "one of the nodes", "add nodes"},
		{"two dcs of three", nts("dc1", "3", "dc2", "3"), twoDCs, 0, "", ReplicationOK, 6, 4, "", ""},
		{"two dcs, one each", nts("dc1", "1", "dc2", "1"), twoDCs, 0, "", ReplicationAttention, 2, 2, "needs 2 of the 2", "'dc1': '3', 'dc2': '3'"},
		// At QUORUM only the total counts: 3 replicas survive one loss.
		{"two and one at quorum", nts("dc1", "2", "dc2", "1"), twoDCs, gocql.Quorum, "", ReplicationOK, 3, 2, "", ""},
		{"two and one, local quorum", nts("dc1", "2", "dc2", "1"), twoDCs, gocql.LocalQuorum, "dc1", ReplicationAttention, 3, 2,
			"LOCAL_QUORUM need 2 of the 2 replicas in data centre dc1", "'dc1': '3', 'dc2': '3'"},
		{"three each, local quorum", nts("dc1", "3", "dc2", "3"), twoDCs, gocql.LocalQuorum, "dc2", ReplicationOK, 6, 4, "", ""},
		{"local dc without replicas", nts("dc1", "3"), twoDCs, gocql.LocalQuorum, "dc2", ReplicationAttention, 3, 2, "need 1 replicas in data centre dc2, which has 0", ""},
		{"three and two, each quorum", nts("dc1", "3", "dc2", "2"), twoDCs, gocql.EachQuorum, "", ReplicationAttention, 5, 3, "EACH_QUORUM need 2 of the 2 replicas in data centre dc2", ""},
		{"three each, each quorum", nts("dc1", "3", "dc2", "3"), twoDCs, gocql.EachQuorum, "", ReplicationOK, 6, 4, "", ""},
		{"simple, each quorum", simple("3"), three, gocql.EachQuorum, "", ReplicationAttention, 3, 2, "EACH_QUORUM needs NetworkTopologyStrategy", ""},
		{"replication_factor for every dc", nts("replication_factor", "3"), twoDCs, 0, "", ReplicationOK, 6, 4, "", ""},
		{"unknown dc", nts("dc9", "3"), three, 0, "", ReplicationAttention, 3, 2, "data centre dc9 is not in the cluster (its data centres: dc1)", "'dc1': '3'"},
		{"unknown class", map[string]string{"class": "EverywhereStrategy"}, three, 0, "", ReplicationWarning, 0, 0, "not one this check understands", ""},
		{"transient replicas", nts("dc1", "3/1"), three, 0, "", ReplicationWarning, 0, 0, "not one this check understands", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := assessReplication("ks", tc.repl, tc.nodes, tc.cons, tc.localDC)
			assert.Equal(t, tc.status, rep.Status, rep.Detail)
			assert.Equal(t, tc.replicas, rep.Replicas, "replicas")
			assert.Equal(t, tc.quorum, rep.Quorum, "quorum")
			assert.Contains(t, rep.Detail, tc.detail)
			assert.Contains(t, rep.Fix, tc.fix)
			if tc.status == ReplicationOK {
				assert.Empty(t, rep.Detail)
				assert.Empty(t, rep.Fix)
			} else {
				assert.NotEmpty(t, rep.Detail)
			}
		})
	}
}

// The refusal, on the real node, for the topology of a larger cluster
// (injected: this machine runs one node): the keyspace is not created.
func TestCassandraFragileReplicationRefusedOnLargerCluster(t *testing.T) {
	host := requireCassandra(t)
	ctx := testCtx(t)
	dc := newTestKeyspace(t).LocalDC(t)
	for _, tc := range []struct {
		name    string
		nodes   map[string]int
		repl    map[string]string
		cons    gocql.Consistency
		local   string
		allow   bool
		created bool
		advice  string
	}{
		{"default one replica on three nodes", map[string]int{dc: 3}, nil, 0, "", false, false, "snapctl --replication " + dc + ":3"},
		{"one replica per dc on two dcs", map[string]int{dc: 3, "other": 3}, nts(dc, "1", "other", "1"), 0, "", false, false, "--replication " + dc + ":3,other:3"},
		{"two replicas on three nodes", map[string]int{dc: 3}, simple("2"), 0, "", false, false, dc + ":3"},
		{"two replicas on two nodes", map[string]int{dc: 2}, nts(dc, "2"), 0, "", false, false, "add nodes"},
		{"local quorum of two", map[string]int{dc: 3, "other": 3}, nts(dc, "2", "other", "3"), gocql.LocalQuorum, dc, false, false, dc + ":3,other:3"},
		{"allowed when asked", map[string]int{dc: 3}, nil, 0, "", true, true, ""},
		{"one node, one replica", map[string]int{dc: 1}, nil, 0, "", false, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newTestKeyspace(t)
			cfg := Config{Hosts: host, Keyspace: k.Name, Replication: tc.repl, AllowFragileReplication: tc.allow,
				Consistency: tc.cons, LocalDC: tc.local}
			r, err := dial(ctx, cfg)
			require.NoError(t, err)
			defer r.Close()
			r.nodes = func(context.Context, bool) (nodeView, error) { return nodeView{nodes: tc.nodes}, nil }
			created, err := r.setUp(ctx, cfg, true)
			if !tc.created {
				require.ErrorIs(t, err, ErrFragileReplication)
				require.ErrorIs(t, err, snapid.ErrInvalidOption)
				assert.Contains(t, err.Error(), "cannot survive the loss of one node")
				assert.Contains(t, err.Error(), tc.advice)
				assert.Contains(t, err.Error(), "AllowFragileReplication")
				assert.False(t, created)
				assert.False(t, k.keyspaceExists(t, k.Name), "nothing created")
				return
			}
			require.NoError(t, err)
			assert.True(t, created)
			assert.True(t, k.keyspaceExists(t, k.Name))
		})
	}
}

// On the real node, with the real query of its topology: one node holds
// one replica (allowed), but three replicas on it could never reach a
// quorum (refused, nothing created, unless asked for).
func TestCassandraReplicationCheckedOnSingleNode(t *testing.T) {
	ctx := testCtx(t)
	k := newTestKeyspace(t)
	dc := k.LocalDC(t)
	r := k.registry(t) // default: one replica, on a one-node cluster
	view, err := readNodes(ctx, r.session, k.config().Hosts, true)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{dc: 1}, view.nodes)
	assert.Empty(t, view.incomplete, "one node settles at once")

	k2 := newTestKeyspace(t)
	cfg := k2.config()
	cfg.Replication = map[string]string{"class": "NetworkTopologyStrategy", dc: "3"}
	_, err = NewRegistry(ctx, cfg)
	require.ErrorIs(t, err, ErrFragileReplication)
	assert.Contains(t, err.Error(), "only 1 exist")
	_, err = CreateSchema(ctx, cfg)
	require.ErrorIs(t, err, ErrFragileReplication)
	assert.False(t, k2.keyspaceExists(t, k2.Name))

	cfg.AllowFragileReplication = true
	created, err := CreateSchema(ctx, cfg)
	require.NoError(t, err)
	assert.True(t, created)
	assert.Equal(t, "3", k2.Replication(t, k2.Name)[dc])
}

func TestLocalSerialRefusedWithReason(t *testing.T) {
	for _, cfg := range []Config{
		{Hosts: []string{"127.0.0.1"}, SerialConsistency: gocql.LocalSerial},
		{Hosts: []string{"127.0.0.1"}, SerialConsistency: gocql.LocalSerial, LocalDC: "dc1", Consistency: gocql.LocalQuorum},
	} {
		err := cfg.Validate()
		require.ErrorIs(t, err, ErrLocalSerial)
		require.ErrorIs(t, err, snapid.ErrInvalidOption)
		assert.Contains(t, err.Error(), "two data centres cut off from each other could both win the same name")
		_, err = NewRegistry(context.Background(), cfg)
		require.ErrorIs(t, err, ErrLocalSerial)
	}
	assert.NoError(t, (&Config{Hosts: []string{"127.0.0.1"}, SerialConsistency: gocql.Serial}).Validate())
}

func TestConsistencyChoices(t *testing.T) {
	for _, tc := range []struct {
		cons  gocql.Consistency
		local string
		ok    bool
		why   string
	}{
		{0, "", true, ""},
		{gocql.Quorum, "", true, ""},
		{gocql.EachQuorum, "", true, ""},
		{gocql.LocalQuorum, "dc1", true, ""},
		{gocql.LocalQuorum, "", false, "needs LocalDC"},
		{gocql.All, "", false, "while any one replica is down"},
		{gocql.One, "", false, "miss acknowledged changes"},
		{gocql.LocalOne, "dc1", false, "miss acknowledged changes"},
		{gocql.Serial, "", false, "is a serial consistency"},
		{gocql.LocalSerial, "dc1", false, "is a serial consistency"},
	} {
		err := (&Config{Hosts: []string{"127.0.0.1"}, Consistency: tc.cons, LocalDC: tc.local}).Validate()
		if tc.ok {
			assert.NoError(t, err, "%v", tc.cons)
			continue
		}
		require.ErrorIs(t, err, snapid.ErrInvalidOption, "%v", tc.cons)
		assert.Contains(t, err.Error(), tc.why)
	}
}

// LocalDC and the consistencies that depend on the keyspace, checked on
// the real node before anything is created.
func TestCassandraLocalDCAndConsistencyOnNode(t *testing.T) {
	ctx := testCtx(t)
	dc := newTestKeyspace(t).LocalDC(t)
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string // "" : works, a claim succeeds
	}{
		{"local dc", Config{LocalDC: dc}, ""},
		{"local quorum", Config{LocalDC: dc, Consistency: gocql.LocalQuorum}, ""},
		{"unknown local dc", Config{LocalDC: "nowhere"}, `local data centre "nowhere" is not one of the cluster's data centres (` + dc + ")"},
		{"each quorum on simple", Config{Consistency: gocql.EachQuorum}, "EACH_QUORUM needs a keyspace with NetworkTopologyStrategy"},
		{"each quorum on nts", Config{Consistency: gocql.EachQuorum, Replication: nts(dc, "1")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newTestKeyspace(t)
			cfg := tc.cfg
			cfg.Hosts, cfg.Keyspace = k.Hosts, k.Name
			r, err := NewRegistry(ctx, cfg)
			if tc.err != "" {
				require.ErrorIs(t, err, snapid.ErrInvalidOption)
				assert.Contains(t, err.Error(), tc.err)
				assert.False(t, k.keyspaceExists(t, k.Name), "nothing created")
				return
			}
			require.NoError(t, err)
			defer r.Close()
			mustClaim(t, ctx, r, testName(t), "owner_a")
		})
	}
}

// check-names' report on real keyspaces: the node's own topology, and a
// larger cluster's injected.
func TestCassandraCheckReplication(t *testing.T) {
	ctx := testCtx(t)
	k := newTestKeyspace(t)
	dc := k.LocalDC(t)

	// One replica on the one node: a warning (nothing can be fixed here).
	r := k.registry(t)
	rep, err := r.CheckReplication(ctx)
	require.NoError(t, err)
	assert.Equal(t, ReplicationWarning, rep.Status)
	assert.Equal(t, map[string]int{dc: 1}, rep.Nodes)
	assert.Equal(t, "org.apache.cassandra.locator.SimpleStrategy", rep.Replication["class"])
	assert.Equal(t, 1, rep.Replicas)
	assert.Contains(t, rep.Detail, "nothing survives the loss of that node")

	// The same keyspace on three nodes needs attention.
	r.nodes = func(context.Context, bool) (nodeView, error) { return nodeView{nodes: map[string]int{dc: 3}}, nil }
	rep, err = r.CheckReplication(ctx)
	require.NoError(t, err)
	assert.Equal(t, ReplicationAttention, rep.Status)
	assert.Contains(t, rep.Fix, `ALTER KEYSPACE "`+k.Name+`" WITH replication = {'class': 'NetworkTopologyStrategy', '`+dc+`': '3'}`)
	assert.Contains(t, rep.Fix, "nodetool repair --full "+k.Name)

	// Made fragile by hand on the one node: two replicas, of which one
	// exists, can never reach a quorum.
	k2 := newTestKeyspace(t)
	k2.Exec(t, `CREATE KEYSPACE "`+k2.Name+`" WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 2}`)
	r2 := k2.registry(t) // creates the table only
	rep, err = r2.CheckReplication(ctx)
	require.NoError(t, err)
	assert.Equal(t, ReplicationAttention, rep.Status)
	assert.Equal(t, 2, rep.Replicas)
	assert.Equal(t, 2, rep.Quorum)
	assert.Contains(t, rep.Detail, "needs 2 of the 2 replicas")
	assert.Contains(t, rep.Fix, "add nodes")

	// Failures to read are registry errors.
	r2.nodes = func(context.Context, bool) (nodeView, error) { return nodeView{}, errors.New("peers unreadable") }
	_, err = r2.CheckReplication(ctx)
	require.ErrorIs(t, err, snapid.ErrRegistry)
}
