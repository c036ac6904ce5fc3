package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseReplication(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]string
	}{
		{"3", map[string]string{"class": "SimpleStrategy", "replication_factor": "3"}},
		{"dc1:3", map[string]string{"class": "NetworkTopologyStrategy", "dc1": "3"}},
		{" dc1:3, eu-west.2:5 ", map[string]string{"class": "NetworkTopologyStrategy", "dc1": "3", "eu-west.2": "5"}},
	} {
		got, err := parseReplication(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
	for _, bad := range []string{"", "0", "03", "100", "three", "-1", "dc1", "dc1:", "dc1:0", "dc1:x", ":3", "dc1:3,", "dc1:3,3",
		"dc1:3,dc1:3", "dc'1:3", "class:3", "replication_factor:3", "dc1:3:3"} {
		_, err := parseReplication(bad)
		assert.Error(t, err, "%q", bad)
	}
}

func TestSetupCreatesRegistryOnce(t *testing.T) {
	f, s, ks := registryEnv(t)
	dc := s.LocalDC(t)

	// Bad replication: one clear line, exit 2, nothing created.
	for _, bad := range [][]string{
		{"setup"},
		{"setup", "--replication", "0"},
		{"setup", "--replication", dc + ":three"},
		{"setup", "--replication", dc + ":1,"},
		{"setup", "--replication", "3," + dc + ":1"},
		{"setup", "--replication", dc + ":1," + dc + ":2"},
	} {
		line := requireOneErrorLine(t, f.run(t, bad...))
		assert.Contains(t, line, "replication", "%v", bad)
		assert.Nil(t, s.Replication(t, ks), "%v created the keyspace", bad)
	}
	// A data centre the cluster does not have: Cassandra refuses it, and
	// the hint points at --replication.
	line := requireOneErrorLine(t, f.run(t, "setup", "--replication", "no_such_dc:1"))
	assert.Contains(t, line, "check --replication")
	assert.Nil(t, s.Replication(t, ks))

	f.vars["SNAPID_REPLICATION"] = "x:y"
	requireOneErrorLine(t, f.run(t, "setup"))
	assert.Nil(t, s.Replication(t, ks))

	// The flag wins over the environment.
	r := f.run(t, "setup", "--replication", dc+":1")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "created")
	assert.Equal(t, map[string]string{"class": "org.apache.cassandra.locator.NetworkTopologyStrategy", dc: "1"},
		s.Replication(t, ks))
	var n int
	require.NoError(t, s.Admin.Query(`SELECT COUNT(*) FROM system_schema.tables WHERE keyspace_name = ? AND table_name = 'node_names'`, ks).Scan(&n))
	assert.Equal(t, 1, n, "the table is created")

	// Idempotent: a second run (here from the environment) changes nothing.
	f.vars["SNAPID_REPLICATION"] = "1"
	r = f.run(t, "setup")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "already exists")
	assert.Equal(t, map[string]string{"class": "org.apache.cassandra.locator.NetworkTopologyStrategy", dc: "1"},
		s.Replication(t, ks), "an existing keyspace keeps its replication")

	f.vars["SNAPID_NAME"] = "web_1"
	r = f.run(t, "register")
	require.Equal(t, exitOK, r.code, r.stderr)

	// A bare factor is SimpleStrategy.
	g, s2, ks2 := registryEnv(t)
	r = g.run(t, "setup", "--replication", "1")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, map[string]string{"class": "org.apache.cassandra.locator.SimpleStrategy", "replication_factor": "1"},
		s2.Replication(t, ks2))
}

func TestSetupNeedsRegistry(t *testing.T) {
	f := newFakeEnv(t)
	line := requireOneErrorLine(t, f.run(t, "setup", "--replication", "3"))
	assert.True(t, strings.Contains(line, "--cassandra"), line)
}
