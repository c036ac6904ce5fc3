package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/internal/testcluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The server reads the registry variables snapctl reads (local data
// centre, user and password variable, TLS, consistency…), from the same
// place, not only SNAPID_CASSANDRA and SNAPID_KEYSPACE.
func TestRegistryConfigFromSnapctlVariables(t *testing.T) {
	vars := map[string]string{
		"SNAPID_CASSANDRA": "db1,db2", "SNAPID_KEYSPACE": "ks", "SNAPID_LOCAL_DC": "dc1",
		"SNAPID_CASSANDRA_USERNAME": "cms", "SNAPID_CASSANDRA_PASSWORD": "secret",
		"SNAPID_CASSANDRA_TLS_CA": "/ca.pem", "SNAPID_CASSANDRA_TLS_CERT": "/c.pem", "SNAPID_CASSANDRA_TLS_KEY": "/k.pem",
		"SNAPID_CONSISTENCY": "local_quorum",
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg, ok, err := registryConfig(func(k string) string { return vars[k] }, log)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, []string{"db1", "db2"}, cfg.Hosts)
	assert.Equal(t, "ks", cfg.Keyspace)
	assert.Equal(t, "dc1", cfg.LocalDC)
	assert.Equal(t, "cms", cfg.Username)
	assert.Equal(t, "secret", cfg.Password)
	assert.Equal(t, "/ca.pem", cfg.TLSCAFile)
	assert.Equal(t, "/c.pem", cfg.TLSCertFile)
	assert.Equal(t, "/k.pem", cfg.TLSKeyFile)
	assert.Equal(t, gocql.LocalQuorum, cfg.Consistency)
	assert.Same(t, log, cfg.Logger)

	delete(vars, "SNAPID_CASSANDRA_PASSWORD")
	_, _, err = registryConfig(func(k string) string { return vars[k] }, log)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "SNAPID_CASSANDRA_PASSWORD")
}

// A local data centre the cluster does not have stops the server before
// it serves, as snapctl refuses it: the variable reaches the registry.
func TestRunHonoursLocalDC(t *testing.T) {
	k := testcluster.NewKeyspace(t)
	vars := map[string]string{
		"SNAPID_COUNTER": filepath.Join(t.TempDir(), "counter.u64"), "SNAPID_NAME": "web_1",
		"SNAPID_CASSANDRA": strings.Join(k.Hosts, ","), "SNAPID_KEYSPACE": k.Name, "SNAPID_LOCAL_DC": "nowhere",
	}
	// Bounded: a server that ignored the variable would serve until then.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := run(ctx, "127.0.0.1:0", func(key string) string { return vars[key] }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `local data centre "nowhere" is not one of the cluster's data centres`)
}
