package cassandra

import (
	"errors"
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
		{EnvPassword, ""}, // a user without the password variable
		{EnvConsistency, "most"},
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
