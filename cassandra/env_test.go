package cassandra

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid"
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
		got, err := ParseReplication(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
	for _, bad := range []string{"", "0", "03", "100", "three", "-1", "dc1", "dc1:", "dc1:0", "dc1:x", ":3", "dc1:3,", "dc1:3,3",
		"dc1:3,dc1:3", "dc'1:3", "class:3", "replication_factor:3", "dc1:3:3"} {
		_, err := ParseReplication(bad)
		assert.Error(t, err, "%q", bad)
	}
}

// ConfigFromEnv reads every variable snapctl reads, in one place, and
// names the variable it cannot read.
func TestConfigFromEnv(t *testing.T) {
	full := map[string]string{
		EnvHosts: "db1, db2:9043", EnvKeyspace: "ks", EnvUsername: "u", EnvPassword: "p",
		EnvTLSCA: "/ca.pem", EnvTLSCert: "/c.pem", EnvTLSKey: "/k.pem", EnvLocalDC: "dc1",
		EnvConsistency: "local-quorum", EnvSerialConsistency: "serial", EnvReplication: "dc1:3,dc2:3",
	}
	cfg, ok, err := ConfigFromEnv(func(k string) string { return full[k] })
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, Config{
		Hosts: []string{"db1", "db2:9043"}, Keyspace: "ks", Username: "u", Password: "p",
		TLSCAFile: "/ca.pem", TLSCertFile: "/c.pem", TLSKeyFile: "/k.pem", LocalDC: "dc1",
		Consistency: gocql.LocalQuorum, SerialConsistency: gocql.Serial,
		Replication: map[string]string{"class": "NetworkTopologyStrategy", "dc1": "3", "dc2": "3"},
	}, cfg)

	_, ok, err = ConfigFromEnv(func(string) string { return "" })
	require.NoError(t, err)
	assert.False(t, ok, "no hosts: no registry")

	for _, tc := range []struct {
		key, value string
	}{
		{EnvHosts, " "},        // blanks: a host list gone missing
		{EnvHosts, "db1,,db2"}, // an entry gone missing
		{EnvHosts, "db1,"},
		{EnvPassword, ""}, // a user without the password variable
		{EnvConsistency, "most"},
		{EnvConsistency, "any"}, // gocql.Any is Config's zero value: the word must not pass as QUORUM
		{EnvConsistency, "one"},
		{EnvConsistency, "all"},
		{EnvConsistency, "serial"}, // a serial consistency, not one of a commit
		{EnvConsistency, "local-serial"},
		{EnvSerialConsistency, "paxos"},
		{EnvReplication, "dc1:x"},
	} {
		vars := map[string]string{EnvHosts: "db1", EnvUsername: "u", EnvPassword: "p"}
		vars[tc.key] = tc.value
		_, _, err := ConfigFromEnv(func(k string) string { return vars[k] })
		var ee *EnvError
		require.True(t, errors.As(err, &ee), "%s=%q: %v", tc.key, tc.value, err)
		assert.Equal(t, tc.key, ee.Key)
		assert.ErrorIs(t, err, snapid.ErrInvalidOption)
		assert.Contains(t, err.Error(), tc.key)
	}
}

// WarnUnknownEnv warns of each SNAPID_ variable no snapid program reads,
// with the one it likely misspells, never with its value.
func TestWarnUnknownEnv(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	// Built, not written whole: the repository's names are all known.
	misspelt := "SNAPID_" + "CASANDRA"
	names := WarnUnknownEnv(log, []string{"HOME=/root", EnvHosts + "=db1", misspelt + "=secret-value", "SNAPID_SIM_SEED=4"})
	assert.Equal(t, []string{misspelt}, names)
	assert.Contains(t, buf.String(), "level=WARN")
	assert.Contains(t, buf.String(), "ignoring "+misspelt+": no snapid program reads it; did you mean SNAPID_CASSANDRA?")
	assert.NotContains(t, buf.String(), "secret-value")
	assert.Equal(t, 1, strings.Count(buf.String(), "\n"), "one record")
	assert.Empty(t, WarnUnknownEnv(nil, []string{EnvKeyspace + "=ks"}))
}

// ParseConsistency accepts only the commit consistencies the registry can
// honour, and refuses every other level's name saying why; ANY, whose
// gocql value is Config's zero value (the default, QUORUM), included.
func TestParseConsistency(t *testing.T) {
	for in, want := range map[string]gocql.Consistency{"": 0, "quorum": gocql.Quorum, " Local-Quorum ": gocql.LocalQuorum, "EACH_QUORUM": gocql.EachQuorum} {
		got, err := ParseConsistency(in)
		require.NoError(t, err, "%q", in)
		assert.Equal(t, want, got, "%q", in)
	}
	for in, why := range map[string]string{
		"any":       "any is refused (a commit at ANY is acknowledged once a node keeps a hint of it, on no replica at all",
		"ANY":       "any is refused",
		"one":       "one is refused (fewer replicas than a quorum would let check-names miss acknowledged changes): want quorum (the default), local_quorum or each_quorum",
		"local-one": "local_one is refused",
		"two":       "two is refused",
		"three":     "three is refused",
		"all":       "all is refused (every claim, extension and release would fail while any one replica is down)",
		"serial":    "want quorum (the default), local_quorum or each_quorum",
		"most":      "want quorum (the default), local_quorum or each_quorum",
	} {
		_, err := ParseConsistency(in)
		require.Error(t, err, "%q", in)
		assert.Contains(t, err.Error(), why, "%q", in)
	}
}
