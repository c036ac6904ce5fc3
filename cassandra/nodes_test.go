package cassandra

import (
	"context"
	"errors"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// reading is one coordinator's view of nodes id → data centre.
func reading(coord string, dcOf map[string]string, partial ...string) nodeReading {
	rd := nodeReading{coordinator: coord, dcOf: dcOf, addrs: map[string]bool{}, partial: partial}
	for id := range dcOf {
		rd.addrs["10.0.0."+id] = true
	}
	return rd
}

// readings returns a once func that gives rs in turn, then the last again.
func readings(rs ...nodeReading) (func(context.Context) (nodeReading, error), *int) {
	n := 0
	return func(context.Context) (nodeReading, error) {
		rd := rs[min(n, len(rs)-1)]
		n++
		return rd, nil
	}, &n
}

func TestSettleNodes(t *testing.T) {
	two := map[string]string{"1": "dc1", "2": "dc1"}
	three := map[string]string{"1": "dc1", "2": "dc1", "3": "dc1"}
	ctx := testCtx(t)

	// A coordinator that does not know the third node yet: the view counts
	// every node any coordinator knows, and settles once they agree.
	once, n := readings(reading("1", two), reading("3", three), reading("1", three), reading("2", three), reading("3", three))
	v, err := settleNodes(ctx, once, nil, true)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"dc1": 3}, v.nodes)
	assert.Empty(t, v.incomplete)
	assert.Equal(t, 4, *n, "three agreeing readings after the one that found the third node")

	// Without waiting, readings that disagree make an incomplete view.
	once, _ = readings(reading("1", two), reading("3", three), reading("1", two))
	v, err = settleNodes(ctx, once, nil, false)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"dc1": 3}, v.nodes)
	assert.Contains(t, v.incomplete, "disagree")

	// A peer row without host id or data centre: still joining.
	once, _ = readings(reading("1", two, "10.0.0.3"))
	v, err = settleNodes(ctx, once, nil, false)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"dc1": 2}, v.nodes)
	assert.Contains(t, v.incomplete, "10.0.0.3 without a host id")

	// A configured host that no coordinator lists; with wait, read until
	// the context ends.
	once, n = readings(reading("1", two))
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	v, err = settleNodes(short, once, map[string][]string{"10.0.0.3:9042": {"10.0.0.3"}, "10.0.0.1": {"10.0.0.1"}}, true)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"dc1": 2}, v.nodes)
	assert.Contains(t, v.incomplete, "configured host(s) 10.0.0.3:9042 are not in the cluster's view")
	assert.Greater(t, *n, 2)

	// A single node agrees at once.
	once, n = readings(reading("1", map[string]string{"1": "dc1"}))
	v, err = settleNodes(ctx, once, map[string][]string{"10.0.0.1": {"10.0.0.1"}}, true)
	require.NoError(t, err)
	assert.Empty(t, v.incomplete)
	assert.Equal(t, nodeAgreeing, *n)

	// A failure to read is an error (a definite one is not retried).
	fail := errors.New("peers unreadable")
	_, err = settleNodes(ctx, func(context.Context) (nodeReading, error) { return nodeReading{}, fail }, nil, false)
	require.ErrorIs(t, err, fail)
}

// A refusal made from a view that may lack nodes says so, and never
// suggests the replication that was asked for.
func TestFragileRefusalFromIncompleteView(t *testing.T) {
	for _, tc := range []struct {
		name    string
		repl    map[string]string
		nodes   map[string]int
		cons    gocql.Consistency
		localDC string
	}{
		{"dc1:3 with a node not yet seen", nts("dc1", "3"), map[string]int{"dc1": 2}, gocql.Quorum, ""},
		{"dc1:2,dc2:1 with dc2 not yet seen", nts("dc1", "2", "dc2", "1"), map[string]int{"dc1": 2}, gocql.Quorum, ""},
		{"dc1:3 with the local data centre dc2 at LOCAL_QUORUM", nts("dc1", "3"), map[string]int{"dc1": 3, "dc2": 1}, gocql.LocalQuorum, "dc2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := assessReplication("ks", tc.repl, tc.nodes, tc.cons, tc.localDC)
			require.Equal(t, ReplicationAttention, rep.Status)
			for _, incomplete := range []string{"configured host(s) 10.0.0.3 are not in the cluster's view", ""} {
				err := fragileError(rep, nodeView{nodes: tc.nodes, incomplete: incomplete}, tc.cons)
				require.ErrorIs(t, err, ErrFragileReplication)
				msg := err.Error()
				assert.NotContains(t, msg, "create it with replication "+renderMap(tc.repl), "never suggest what was asked for")
				assert.NotContains(t, msg, "--replication "+flagForm(tc.repl)+" ")
				if incomplete != "" {
					assert.Contains(t, msg, "incomplete ("+incomplete+")")
					assert.Contains(t, msg, "wait until every node has joined")
					assert.NotContains(t, msg, "create it with replication")
					assert.NotContains(t, msg, "add nodes")
				}
			}
		})
	}
}

// NewRegistry's refusal of a fragile replication counts nodes from a
// settled view: a first view short of a node is read again, and a view
// that stays incomplete refuses without suggesting what was asked for.
func TestCassandraFragileCheckWaitsForSettledView(t *testing.T) {
	host := requireCassandra(t)
	ctx := testCtx(t)
	dc := newTestKeyspace(t).LocalDC(t)
	repl := nts(dc, "3")
	joining := nodeView{nodes: map[string]int{dc: 2}, incomplete: "system.peers lists 10.0.0.3 without a host id or data centre (still joining?)"}

	k := newTestKeyspace(t)
	cfg := Config{Hosts: host, Keyspace: k.Name, Replication: repl}
	r, err := dial(ctx, cfg)
	require.NoError(t, err)
	defer r.Close()
	var waited []bool
	r.nodes = func(_ context.Context, wait bool) (nodeView, error) {
		waited = append(waited, wait)
		if wait {
			return nodeView{nodes: map[string]int{dc: 3}}, nil
		}
		return joining, nil
	}
	created, err := r.setUp(ctx, cfg, true)
	require.NoError(t, err, "the settled view has the three nodes")
	assert.True(t, created)
	assert.Equal(t, []bool{false, true}, waited)

	k2 := newTestKeyspace(t)
	cfg.Keyspace = k2.Name
	r2, err := dial(ctx, cfg)
	require.NoError(t, err)
	defer r2.Close()
	r2.nodes = func(context.Context, bool) (nodeView, error) { return joining, nil }
	_, err = r2.setUp(ctx, cfg, true)
	require.ErrorIs(t, err, ErrFragileReplication)
	assert.Contains(t, err.Error(), "incomplete")
	assert.NotContains(t, err.Error(), "create it with replication")
	assert.False(t, k2.keyspaceExists(t, k2.Name))

	// CheckReplication of an existing keyspace: the same.
	r.nodes = r2.nodes // r's keyspace exists
	rep, err := r.CheckReplication(ctx)
	require.NoError(t, err)
	assert.Equal(t, ReplicationAttention, rep.Status)
	assert.Equal(t, joining.incomplete, rep.NodesIncomplete)
	assert.NotContains(t, rep.Fix, "ALTER KEYSPACE")
	assert.Contains(t, rep.Fix, "wait until every node has joined")
}
