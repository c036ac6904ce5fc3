package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSetupCreatesRegistryOnce(t *testing.T) {
	t.Parallel()
	f, s, ks := registryEnvBare(t, nil)
	dc := s.LocalDC(t)

	// Bad replication: one clear line, exit 2, nothing created.
	for _, bad := range [][]string{
		{"setup", "--replication", ""},
		{"setup"},
		{"setup", "--replication", "0"},
		{"setup", "--replication", dc + ":three"},
		{"setup", "--replication", dc + ":1,"},
		{"setup", "--replication", "3," + dc + ":1"},
		{"setup", "--replication", dc + ":1," + dc + ":2"},
	} {
		line := requireError(t, f.run(t, bad...))
		assert.Contains(t, line, "replication", "%v", bad)
		assert.Nil(t, s.Replication(t, ks), "%v created the keyspace", bad)
	}
	// A data centre the cluster does not have (a misspelt name): refused
	// naming the cluster's data centres, not as a fragile replication
	// that --allow-fragile-replication would let through.
	for _, args := range [][]string{{"--replication", "no_such_dc:1"}, {"--replication", "no_such_dc:1", "--allow-fragile-replication"}} {
		line := requireError(t, f.run(t, append([]string{"setup"}, args...)...))
		assert.Contains(t, line, `"no_such_dc" in the replication of keyspace `+ks)
		assert.Contains(t, line, "the cluster's data centres are "+dc)
		assert.Contains(t, line, "check --replication")
		assert.NotContains(t, line, "allow-fragile")
		assert.Nil(t, s.Replication(t, ks))
	}

	f.vars["SNAPID_REPLICATION"] = "x:y"
	requireError(t, f.run(t, "setup"))
	assert.Nil(t, s.Replication(t, ks))

	// The flag wins over the environment.
	r := f.run(t, "setup", "--replication", dc+":1")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "keyspace "+ks+" created (replication "+dc+":1)\ntables created: node_names, sequences, node_names_numbers\n", r.stdout)
	assert.Equal(t, map[string]string{"class": "org.apache.cassandra.locator.NetworkTopologyStrategy", dc: "1"},
		s.Replication(t, ks))
	var n int
	require.NoError(t, s.Admin.Query(`SELECT COUNT(*) FROM system_schema.tables WHERE keyspace_name = ? AND table_name = 'node_names'`, ks).Scan(&n))
	assert.Equal(t, 1, n, "the table is created")

	// Idempotent: a second run (here from the environment) changes nothing.
	f.vars["SNAPID_REPLICATION"] = "1"
	r = f.run(t, "setup")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "keyspace "+ks+" exists: left as it was (replication "+dc+":1)\ntables: all existed; nothing created\n", r.stdout)
	assert.Equal(t, "snapctl: warning: keyspace "+ks+" keeps its replication "+dc+":1, not the 1 asked for: setup never changes an existing keyspace "+
		"('snapctl check-names' says whether it survives the loss of a node, and how to change it)\n", r.stderr)
	delete(f.vars, "SNAPID_REPLICATION")
	r = f.run(t, "setup", "--replication", dc+":1")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Empty(t, r.stderr, "the replication asked for is the keyspace's")
	assert.Equal(t, map[string]string{"class": "org.apache.cassandra.locator.NetworkTopologyStrategy", dc: "1"},
		s.Replication(t, ks), "an existing keyspace keeps its replication")

	f.vars["SNAPID_NAME"] = "web_1"
	r = f.run(t, "register")
	require.Equal(t, exitOK, r.code, r.stderr)

	// A keyspace made beforehand (here by hand, with SimpleStrategy) is
	// left as it was: setup says so, makes the missing tables, and names
	// the replication that differs from the one asked for.
	h, s3, ks3 := registryEnvBare(t, nil)
	s3.Exec(t, `CREATE KEYSPACE "`+ks3+`" WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}`)
	r = h.run(t, "setup", "--replication", dc+":1")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "keyspace "+ks3+" exists: left as it was (replication 1)\ntables created: node_names, sequences, node_names_numbers\n", r.stdout)
	assert.Contains(t, r.stderr, "keeps its replication 1, not the "+dc+":1 asked for")
	assert.NotContains(t, r.stdout, "created (replication")

	// A bare factor is SimpleStrategy.
	g, s2, ks2 := registryEnvBare(t, nil)
	r = g.run(t, "setup", "--replication", "1")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, map[string]string{"class": "org.apache.cassandra.locator.SimpleStrategy", "replication_factor": "1"},
		s2.Replication(t, ks2))
}

func TestSetupNeedsRegistry(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	line := requireError(t, f.run(t, "setup", "--replication", "3"))
	assert.True(t, strings.Contains(line, "--cassandra"), line)
}

// A setup whose nodes do not agree on the schema in time says what it
// created (on stdout, as a setup that succeeds does), that the nodes did
// not agree within --timeout, and that it can be run again; it exits 2
// and does not claim that nothing happened. Run again, it says what it
// created then.
func TestSetupSchemaAgreementNotReached(t *testing.T) {
	t.Parallel()
	notAgreed := fmt.Errorf("snapid: %w: %w within 30s: %w", registry.ErrRegistry, cassandra.ErrSchemaAgreement, context.DeadlineExceeded)
	created := cassandra.SchemaReport{Keyspace: "ks", Table: "node_names", KeyspaceCreated: true,
		Replication: map[string]string{"class": "NetworkTopologyStrategy", "dc1": "3", "dc2": "3"}, TablesCreated: []string{"node_names"}}
	for _, tc := range []struct {
		name   string
		rep    cassandra.SchemaReport
		err    error
		stdout string
		want   []string
	}{
		{"after the keyspace and a table", created, notAgreed, "keyspace ks created (replication dc1:3,dc2:3)\ntables created: node_names\n",
			[]string{"the cluster's nodes did not agree on the schema within 30s", "--timeout 30s bounds the wait",
				"keyspace ks and table node_names were created, and stay", "run 'snapctl setup' again: it is safe"}},
		{"before anything", cassandra.SchemaReport{Keyspace: "ks", Table: "node_names"}, notAgreed, "",
			[]string{"did not agree", "nothing was created", "run 'snapctl setup' again: it is safe"}},
		{"another failure after a table", cassandra.SchemaReport{Keyspace: "ks", Table: "node_names", TablesCreated: []string{"node_names", "sequences"}},
			fmt.Errorf("snapid: %w: creating table ks.node_names_numbers: %w", registry.ErrRegistry, errors.New("no route to host")),
			"tables created: node_names, sequences\n",
			[]string{"creating table ks.node_names_numbers", "tables node_names, sequences were created, and stay", "run 'snapctl setup' again"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeEnv(t)
			f.vars["SNAPID_CASSANDRA"] = "127.0.0.1:1"
			f.setUpSchema = func(context.Context, cassandra.Config) (cassandra.SchemaReport, error) { return tc.rep, tc.err }
			r := f.run(t, "setup", "--replication", "dc1:3,dc2:3", "--timeout", "30s")
			line := requireError(t, r)
			for _, w := range tc.want {
				assert.Contains(t, line, w)
			}
			assert.NotContains(t, line, "nothing was issued")
			assert.Equal(t, tc.stdout, r.stdout)
		})
	}
	// Run again once the nodes agree: what was missing is created.
	f := newFakeEnv(t)
	f.vars["SNAPID_CASSANDRA"] = "127.0.0.1:1"
	f.setUpSchema = func(context.Context, cassandra.Config) (cassandra.SchemaReport, error) {
		return cassandra.SchemaReport{Keyspace: "ks", Table: "node_names", Replication: created.Replication,
			TablesCreated: []string{"sequences", "node_names_numbers"}}, nil
	}
	r := f.run(t, "setup", "--replication", "dc1:3,dc2:3")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "keyspace ks exists: left as it was (replication dc1:3,dc2:3)\ntables created: sequences, node_names_numbers\n", r.stdout)
}
