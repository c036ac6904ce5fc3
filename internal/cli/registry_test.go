package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/internal/testcluster"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of the registry commands against the real Cassandra started by
// scripts/test.sh (or SNAPID_TEST_CASSANDRA). Without one they fail in CI
// and are skipped elsewhere.

// registryEnv returns a fake environment using a fresh keyspace (dropped at
// cleanup), the keyspace with its direct session to plant rows, and its
// name.
func registryEnv(t *testing.T) (*fakeEnv, *testcluster.Keyspace, string) {
	t.Helper()
	return registryEnvAs(t, nil)
}

// registryEnvAs is registryEnv with the direct session authenticated by
// auth (nil: none). With auth it waits for the role to exist: a node makes
// its default superuser shortly after it starts.
func registryEnvAs(t *testing.T, auth gocql.Authenticator) (*fakeEnv, *testcluster.Keyspace, string) {
	t.Helper()
	f, k, ks := registryEnvBare(t, auth)
	// A keyspace named explicitly is made by setup (the commands that
	// issue ids create only the default one).
	cfg := cassandra.Config{Hosts: k.Hosts, Keyspace: ks, AllowFragileReplication: true}
	if pa, ok := auth.(gocql.PasswordAuthenticator); ok {
		cfg.Username, cfg.Password = pa.Username, pa.Password
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := cassandra.CreateSchema(ctx, cfg)
	require.NoError(t, err)
	return f, k, ks
}

// registryEnvBare is registryEnvAs without the set-up: the keyspace does
// not exist.
func registryEnvBare(t *testing.T, auth gocql.Authenticator) (*fakeEnv, *testcluster.Keyspace, string) {
	t.Helper()
	k := testcluster.NewKeyspaceAs(t, auth)
	f := newFakeEnv(t)
	f.vars["SNAPID_CASSANDRA"] = strings.Join(k.Hosts, ",")
	f.vars["SNAPID_KEYSPACE"] = k.Name
	return f, k, k.Name
}

func TestRegistryCommandsTwoHosts(t *testing.T) {
	t.Parallel()
	a, _, ks := registryEnv(t)
	a.vars["SNAPID_NAME"] = "web_1"
	r := a.run(t, "next", "-n", "3")
	require.Equal(t, exitOK, r.code, r.stderr)
	requireIDs(t, r.stdout, "web_1", 3)
	// Without the registry, a registered counter is refused unless asked.
	unreg := newFakeEnv(t)
	unreg.home = a.home
	unreg.vars = map[string]string{"SNAPID_NAME": "web_1", "SNAPID_BINDING_DIR": a.vars["SNAPID_BINDING_DIR"]} // host a, its counter
	line := requireError(t, unreg.run(t, "next"))
	assert.Contains(t, line, "registered")
	r = unreg.run(t, "next", "--no-registry")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "web_1-4\n", r.stdout)

	r = a.run(t, "show", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"last_issued":"4","cached_reserved_up_to":"3"`,
		"the process returned the unused reservation when it closed")

	// A second host (its own counter, so its own owner token) is refused,
	// with the holder named, and issues nothing.
	b := newFakeEnv(t)
	b.vars = map[string]string{"SNAPID_BINDING_DIR": b.vars["SNAPID_BINDING_DIR"], "SNAPID_CASSANDRA": a.vars["SNAPID_CASSANDRA"], "SNAPID_KEYSPACE": ks, "SNAPID_NAME": "web_1"}
	line = requireError(t, b.run(t, "next"))
	assert.Contains(t, line, "node name taken")
	assert.Contains(t, line, "since")
	bCounter := filepath.Join(b.home, ".local", "state", "snapid", "counter.u64")
	// The refused first Open leaves the disk as it found it: the counter
	// it created is gone, so nothing was issued.
	assert.NoFileExists(t, bCounter, "the refused host's new counter is removed")

	// Release on host a, then b takes over above a's last number.
	r = a.run(t, "release")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "released web_1 (last number 4)")
	// The release is final on a: a routine next there does not claim the
	// name back (b's register would then fail); only 'register' would.
	line = requireError(t, a.run(t, "next"))
	assert.Contains(t, line, "released on this host")
	assert.Contains(t, line, "snapctl register")
	r = b.run(t, "next")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "web_1-5\n", r.stdout)

	// a cannot come back; after b's holder is declared gone, a forced
	// register takes it above the floor.
	requireError(t, a.run(t, "register"))
	requireError(t, a.run(t, "register", "--force"))
	r = a.run(t, "register", "--force", "--start", "100")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stderr, "WARNING")
	r = a.run(t, "next")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "web_1-100\n", r.stdout)

	// Forced release on behalf of a gone holder records the floor.
	r = b.run(t, "release", "--force", "--start", "500")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = b.run(t, "next")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "web_1-500\n", r.stdout)
}

func TestRegistryCommandsCassandraDown(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	f.vars["SNAPID_CASSANDRA"] = "127.0.0.1:1"
	f.vars["SNAPID_NAME"] = "web_1"
	line := requireError(t, f.run(t, "next", "--timeout", "5s"))
	assert.Contains(t, line, "Cassandra")
	assert.NoDirExists(t, filepath.Join(f.home, ".local", "state", "snapid"), "nothing created on disk")
}

type checkReport struct {
	Rows     int `json:"rows"`
	Problems []struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
	} `json:"problems"`
}

func TestCheckNamesFindsPlantedProblems(t *testing.T) {
	t.Parallel()
	f, s, ks := registryEnv(t)
	f.vars["SNAPID_NAME"] = "web_1"
	r := f.run(t, "register")
	require.Equal(t, exitOK, r.code, r.stderr)

	r = f.run(t, "check-names")
	require.Equal(t, exitOK, r.code, "a clean registry is clean: %s %s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "no problems")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old := time.Now().Add(-72 * time.Hour)
	plant := func(stmt string, args ...any) {
		require.NoError(t, s.Admin.Query(fmt.Sprintf(stmt, ks), args...).ExecContext(ctx))
	}
	plant(`INSERT INTO %s.node_names (name, owner, hostname, state, last_seen, registered_at, reserved) VALUES ('Bad-Name', 'o1', 'h1', 'active', toTimestamp(now()), toTimestamp(now()), 0)`)
	plant(`INSERT INTO %s.node_names (name, owner, hostname, state, last_seen, registered_at, reserved) VALUES ('web-1', 'o2', 'h2', 'active', toTimestamp(now()), toTimestamp(now()), 0)`)
	plant(`INSERT INTO %s.node_names (name, last_seen) VALUES ('partial', toTimestamp(now()))`)
	plant(`INSERT INTO %s.node_names (name, owner, hostname, state, last_seen, registered_at, reserved) VALUES ('old_host', 'o3', 'h3', 'active', ?, ?, 0)`, old, old)
	future := time.Now().Add(time.Hour)
	plant(`INSERT INTO %s.node_names (name, owner, hostname, state, last_seen, registered_at, reserved) VALUES ('fast_clock', 'o4', 'h4', 'active', ?, ?, 0)`, future, future)

	inv := filepath.Join(t.TempDir(), "planned.txt")
	require.NoError(t, os.WriteFile(inv, []byte("# planned\nnew_a\nnew_a\nold_host\n"), 0o600))
	f.vars["SNAPID_NAME"] = "ghost"
	r = f.run(t, "check-names", "--json", "--names", inv)
	require.Equal(t, exitProblems, r.code, "stdout %s stderr %s", r.stdout, r.stderr)
	var rep checkReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	kinds := map[string]bool{}
	for _, p := range rep.Problems {
		kinds[p.Kind+":"+p.Name] = true
	}
	for _, want := range []string{
		admin.ProblemInvalidName + ":Bad-Name",
		admin.ProblemNormalisedCollision + ":web_1",
		admin.ProblemMissingOwner + ":partial",
		admin.ProblemStale + ":old_host",
		admin.ProblemClockAhead + ":fast_clock",
		admin.ProblemNotRegistered + ":ghost",
		admin.ProblemInventoryDuplicate + ":new_a",
		admin.ProblemInventoryTaken + ":old_host",
	} {
		assert.True(t, kinds[want], "want %s in %v", want, kinds)
	}
	assert.Equal(t, 6, rep.Rows)

	// The table form says the same, with exit status 1.
	r = f.run(t, "check-names", "--stale", "1h")
	require.Equal(t, exitProblems, r.code)
	assert.Contains(t, r.stdout, "stale")

	// Held by another owner: this host's name, registered by someone else.
	g := newFakeEnv(t)
	g.vars = map[string]string{"SNAPID_BINDING_DIR": g.vars["SNAPID_BINDING_DIR"], "SNAPID_CASSANDRA": f.vars["SNAPID_CASSANDRA"], "SNAPID_KEYSPACE": ks, "SNAPID_NAME": "web_9"}
	r = g.run(t, "register") // gives g's counter an owner token of its own
	require.Equal(t, exitOK, r.code, r.stderr)
	r = g.run(t, "check-names", "--json", "--name", "web_1")
	require.Equal(t, exitProblems, r.code)
	assert.Contains(t, r.stdout, admin.ProblemHeldByOther)
}

func TestCheckNamesInventoryWithoutCassandra(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	inv := filepath.Join(t.TempDir(), "planned.txt")
	require.NoError(t, os.WriteFile(inv, []byte("a_1\nb_2\n"), 0o600))
	r := f.run(t, "check-names", "--names", inv)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NoError(t, os.WriteFile(inv, []byte("a_1\na-1\nBad\n"), 0o600))
	r = f.run(t, "check-names", "--names", inv)
	require.Equal(t, exitProblems, r.code, r.stderr)
	assert.Contains(t, r.stdout, admin.ProblemInventoryDuplicate)
	assert.Contains(t, r.stdout, admin.ProblemInventoryInvalid)
	requireError(t, f.run(t, "check-names"))
	for _, bad := range [][]string{{"--clock-skew", "0"}, {"--clock-skew", "-1s"}} {
		r = f.run(t, append([]string{"check-names", "--names", inv}, bad...)...)
		assert.Equal(t, exitFailure, r.code, "%v", bad)
		assert.Contains(t, requireError(t, r), strings.TrimPrefix(bad[0], "--")+" must be positive")
	}
}

// The TLS flags and environment variables reach the registry: mutual TLS
// works from either, and a client certificate without its key is refused
// before anything is done.
func TestRegistryCommandsTLS(t *testing.T) {
	t.Parallel()
	f, _, _ := registryEnv(t)
	tf := testcluster.RequireTLS(t)
	f.vars["SNAPID_NAME"] = "tls_1"
	f.vars["SNAPID_CASSANDRA_TLS_CA"] = tf.CA
	f.vars["SNAPID_CASSANDRA_TLS_CERT"] = tf.Cert
	f.vars["SNAPID_CASSANDRA_TLS_KEY"] = tf.Key
	r := f.run(t, "register")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = f.run(t, "next", "-n", "2")
	require.Equal(t, exitOK, r.code, r.stderr)
	requireIDs(t, r.stdout, "tls_1", 2)

	g := newFakeEnv(t)
	g.home = f.home
	g.vars = map[string]string{"SNAPID_NAME": "tls_1", "SNAPID_CASSANDRA": f.vars["SNAPID_CASSANDRA"], "SNAPID_KEYSPACE": f.vars["SNAPID_KEYSPACE"],
		"SNAPID_BINDING_DIR": f.vars["SNAPID_BINDING_DIR"]} // host f, its counter
	tlsFlags := []string{"--tls-ca", tf.CA, "--tls-cert", tf.Cert, "--tls-key", tf.Key}
	r = g.run(t, append([]string{"check-names"}, tlsFlags...)...)
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)

	// The node also takes plain clients, so refusals show that TLS is on.
	// Only the CA, by flag or by variable: the node requires a client
	// certificate. A certificate without its key: refused as bad input.
	// Nothing changes on disk.
	stateDir := filepath.Join(f.home, ".local", "state", "snapid")
	before := dirSnapshot(t, stateDir)
	// (With TLS 1.3 the driver reports the server's alert, or a start-up
	// without response when its request lost the race with the alert.)
	noCert := func(line string) {
		t.Helper()
		if strings.Contains(line, "certificate required") {
			assert.Contains(t, line, "--tls-ca", "the hint points at the TLS settings")
		} else {
			assert.Contains(t, line, "no response to connection startup")
		}
	}
	noCert(requireError(t, g.run(t, "next", "--tls-ca", tf.CA)))
	g.vars["SNAPID_CASSANDRA_TLS_CA"] = tf.CA
	noCert(requireError(t, g.run(t, "next")))
	delete(g.vars, "SNAPID_CASSANDRA_TLS_CA")
	r = g.run(t, "next", "--tls-ca", tf.CA, "--tls-cert", tf.Cert)
	assert.Equal(t, exitFailure, r.code)
	assert.Contains(t, requireError(t, r), "give both files or neither")
	assert.Equal(t, before, dirSnapshot(t, stateDir))
}

// dirSnapshot returns the names and contents of the files in dir.
func dirSnapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		out[e.Name()] = string(b)
	}
	return out
}

// A read-only command never creates the registry: a mistyped keyspace is
// reported, not made.
func TestCheckNamesNeverCreates(t *testing.T) {
	t.Parallel()
	f, s, ks := registryEnvBare(t, nil)
	line := requireError(t, f.run(t, "check-names"))
	assert.Contains(t, line, "does not exist")
	assert.Contains(t, line, "--keyspace")
	var n int
	require.NoError(t, s.Admin.Query(`SELECT COUNT(*) FROM system_schema.keyspaces WHERE keyspace_name = ?`, ks).Scan(&n))
	assert.Zero(t, n, "check-names created the keyspace")
}

// With a Cassandra that requires passwords (scripts/test.sh runs this in a
// step of its own, SNAPID_AUTH_TEST=1), the user name comes from the flag or
// the environment and the password from the environment only; a missing or
// wrong password is one clear error line, and nothing is created on disk.
func TestRegistryCommandsPasswordAuth(t *testing.T) {
	t.Parallel()
	if os.Getenv("SNAPID_AUTH_TEST") != "1" {
		t.Skip("needs a Cassandra that requires passwords; scripts/test.sh runs it in its own step (SNAPID_AUTH_TEST=1)")
	}
	f, _, _ := registryEnvAs(t, gocql.PasswordAuthenticator{Username: "cassandra", Password: "cassandra"})
	f.vars["SNAPID_NAME"] = "auth_1"
	stateDir := filepath.Join(f.home, ".local", "state", "snapid")

	line := requireError(t, f.run(t, "next"))
	assert.Contains(t, line, "authentication")
	f.vars["SNAPID_CASSANDRA_USERNAME"] = "cassandra"
	f.vars["SNAPID_CASSANDRA_PASSWORD"] = "wrong"
	line = requireError(t, f.run(t, "register"))
	assert.Contains(t, line, "incorrect")
	assert.NoDirExists(t, stateDir, "nothing created on disk")

	f.vars["SNAPID_CASSANDRA_PASSWORD"] = "cassandra"
	r := f.run(t, "next", "-n", "2")
	require.Equal(t, exitOK, r.code, r.stderr)
	requireIDs(t, r.stdout, "auth_1", 2)
	delete(f.vars, "SNAPID_CASSANDRA_USERNAME")
	r = f.run(t, "check-names", "--username", "cassandra")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
}

// At 2^64-1 with a registry, next says the counter is used up, not that
// ids flow again once the registry extends the range.
func TestRegistryNextAtLastNumber(t *testing.T) {
	t.Parallel()
	a, _, _ := registryEnv(t)
	a.vars["SNAPID_NAME"] = "web_1"
	r := a.run(t, "init", "--start", "18446744073709551615")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = a.run(t, "next")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "web_1-18446744073709551615\n", r.stdout)
	line := requireError(t, a.run(t, "next"))
	assert.Contains(t, line, "exhausted")
	assert.Contains(t, line, "never passes 2^64-1")
	assert.NotContains(t, line, "flow again")
}

// Marks are unsigned 64-bit numbers: a forced release with a start above
// 2^63 records it, and the next holder starts there.
func TestRegistryForceReleaseAbove2p63(t *testing.T) {
	t.Parallel()
	a, _, ks := registryEnv(t)
	a.vars["SNAPID_NAME"] = "web_1"
	r := a.run(t, "register")
	require.Equal(t, exitOK, r.code, r.stderr)

	b := newFakeEnv(t)
	b.vars = map[string]string{"SNAPID_BINDING_DIR": b.vars["SNAPID_BINDING_DIR"], "SNAPID_CASSANDRA": a.vars["SNAPID_CASSANDRA"], "SNAPID_KEYSPACE": ks, "SNAPID_NAME": "web_1"}
	r = b.run(t, "release", "--force", "--start", "9300000000000000000")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "released web_1 (last number 9299999999999999999)")
	r = b.run(t, "next")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "web_1-9300000000000000000\n", r.stdout)

	// A forced release with a lower start keeps the higher mark.
	r = a.run(t, "release", "--force", "--start", "5")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "last number 9300000000000000000")
}

// A misspelt --keyspace (or SNAPID_KEYSPACE) on a command that issues or
// claims is refused, naming the registries that exist and pointing at
// setup; no keyspace is created and nothing is written on disk.
func TestIssuingCommandsNeverCreateANamedKeyspace(t *testing.T) {
	t.Parallel()
	f, s, ks := registryEnv(t)
	f.vars["SNAPID_NAME"] = "web_1"
	typo := ks + "x"
	for _, args := range [][]string{
		{"next", "--keyspace", typo},
		{"register", "--keyspace", typo},
		{"release", "--keyspace", typo},
		{"seq", "next", "articles", "--keyspace", typo},
	} {
		t.Run(strings.Join(args[:len(args)-1], " "), func(t *testing.T) {
			line := requireError(t, f.run(t, args...))
			assert.Contains(t, line, "keyspace "+typo+" does not exist (the registries are in keyspace "+ks)
			assert.Contains(t, line, "snapctl setup --keyspace NAME")
			assert.Nil(t, s.Replication(t, typo), "the misspelt keyspace was created")
			assert.NoDirExists(t, filepath.Join(f.home, ".local", "state", "snapid"), "something was created on disk")
		})
	}
	// The keyspace setup made works.
	r := f.run(t, "next")
	require.Equal(t, exitOK, r.code, r.stderr)
}

// Only the default keyspace may be created by a command other than setup:
// the trial with no configuration (the README's quick start) keeps
// working; a keyspace named explicitly is setup's.
func TestOnlyTheDefaultKeyspaceIsCreatedOnFirstClaim(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		vars   map[string]string
		args   []string
		refuse bool
	}{
		{nil, nil, false},
		{map[string]string{"SNAPID_KEYSPACE": "snapid"}, nil, false},
		{nil, []string{"--keyspace", "snapid"}, false},
		{map[string]string{"SNAPID_KEYSPACE": "snapid_typo"}, nil, true},
		{nil, []string{"--keyspace", "registry"}, true},
		{map[string]string{"SNAPID_KEYSPACE": "other"}, []string{"--keyspace", ""}, false},
	} {
		vars := map[string]string{"SNAPID_CASSANDRA": "db1"}
		for k, v := range tc.vars {
			vars[k] = v
		}
		cfg, ok, err := parsedConfig(t, vars, tc.args...)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, tc.refuse, refuseNewKeyspace(cfg), "%v %v", tc.vars, tc.args)
	}
}

// Each registry setting from its flag, else its variable; flags win.
func TestRegistryConfigFlagsAndEnvironment(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		args  []string
		vars  map[string]string
		check func(t *testing.T, cfg cassandra.Config)
	}{
		{"defaults", nil, nil, func(t *testing.T, cfg cassandra.Config) {
			assert.Equal(t, gocql.Consistency(0), cfg.Consistency)
			assert.Equal(t, gocql.Consistency(0), cfg.SerialConsistency)
			assert.Empty(t, cfg.LocalDC)
			assert.Nil(t, cfg.Replication)
			assert.False(t, cfg.AllowFragileReplication)
		}},
		{"local dc flag", []string{"--local-dc", "dc1"}, map[string]string{"SNAPID_LOCAL_DC": "dc2"}, func(t *testing.T, cfg cassandra.Config) {
			assert.Equal(t, "dc1", cfg.LocalDC)
		}},
		{"local dc env", nil, map[string]string{"SNAPID_LOCAL_DC": "dc2"}, func(t *testing.T, cfg cassandra.Config) {
			assert.Equal(t, "dc2", cfg.LocalDC)
		}},
		{"consistency flag", []string{"--consistency", "local_quorum"}, map[string]string{"SNAPID_CONSISTENCY": "each_quorum"}, func(t *testing.T, cfg cassandra.Config) {
			assert.Equal(t, gocql.LocalQuorum, cfg.Consistency)
		}},
		{"consistency env, any case, hyphen", nil, map[string]string{"SNAPID_CONSISTENCY": "Each-Quorum"}, func(t *testing.T, cfg cassandra.Config) {
			assert.Equal(t, gocql.EachQuorum, cfg.Consistency)
		}},
		{"consistency quorum", []string{"--consistency", "QUORUM"}, nil, func(t *testing.T, cfg cassandra.Config) {
			assert.Equal(t, gocql.Quorum, cfg.Consistency)
		}},
		{"serial flag", []string{"--serial-consistency", "serial"}, map[string]string{"SNAPID_SERIAL_CONSISTENCY": "local_serial"}, func(t *testing.T, cfg cassandra.Config) {
			assert.Equal(t, gocql.Serial, cfg.SerialConsistency)
		}},
		{"serial env", nil, map[string]string{"SNAPID_SERIAL_CONSISTENCY": "local_serial"}, func(t *testing.T, cfg cassandra.Config) {
			assert.Equal(t, gocql.LocalSerial, cfg.SerialConsistency) // refused by Validate, with the reason
		}},
		{"replication flag", []string{"--replication", "dc1:3,dc2:3"}, map[string]string{"SNAPID_REPLICATION": "1"}, func(t *testing.T, cfg cassandra.Config) {
			assert.Equal(t, map[string]string{"class": "NetworkTopologyStrategy", "dc1": "3", "dc2": "3"}, cfg.Replication)
		}},
		{"replication env", nil, map[string]string{"SNAPID_REPLICATION": "3"}, func(t *testing.T, cfg cassandra.Config) {
			assert.Equal(t, map[string]string{"class": "SimpleStrategy", "replication_factor": "3"}, cfg.Replication)
		}},
		{"allow fragile", []string{"--allow-fragile-replication"}, nil, func(t *testing.T, cfg cassandra.Config) {
			assert.True(t, cfg.AllowFragileReplication)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]string{"SNAPID_CASSANDRA": "db1,db2"}
			for k, v := range tc.vars {
				vars[k] = v
			}
			cfg, ok, err := parsedConfig(t, vars, tc.args...)
			require.NoError(t, err)
			require.True(t, ok)
			assert.Equal(t, []string{"db1", "db2"}, cfg.Hosts)
			tc.check(t, cfg)
		})
	}
	for _, bad := range [][]string{{"--consistency", "serial"}, {"--consistency", "most"}, {"--serial-consistency", "quorum"},
		{"--serial-consistency", "local"}, {"--replication", "dc1:0"}, {"--username", "u"},
		{"--consistency", "any"}, {"--consistency", "one"}, {"--consistency", "local-one"}, {"--consistency", "All"}} {
		_, _, err := parsedConfig(t, map[string]string{"SNAPID_CASSANDRA": "db1"}, bad...)
		var ue usageError
		assert.ErrorAs(t, err, &ue, "%v", bad)
	}
}

// A commit consistency the registry cannot honour, ANY above all (the
// zero value of cassandra.Config's field, which means QUORUM), is refused
// when the command line is read, saying why, before anything connects:
// exit 2, one line, nothing created on disk.
func TestConsistencyAnyRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		vars map[string]string
		want string
	}{
		{[]string{"--consistency", "any"}, nil, `--consistency "any" (or SNAPID_CONSISTENCY): any is refused (a commit at ANY is acknowledged once a node keeps a hint of it`},
		{[]string{"--consistency", "ANY"}, map[string]string{"SNAPID_CONSISTENCY": "quorum"}, "any is refused"},
		{nil, map[string]string{"SNAPID_CONSISTENCY": "any"}, `--consistency "any" (or SNAPID_CONSISTENCY): any is refused`},
		{[]string{"--consistency", "local_one"}, nil, "local_one is refused (fewer replicas than a quorum would let check-names miss acknowledged changes): want quorum (the default), local_quorum or each_quorum"},
	} {
		for _, cmd := range []string{"next", "names", "seq"} {
			f := newFakeEnv(t)
			f.vars["SNAPID_NAME"] = "web_1"
			f.vars["SNAPID_CASSANDRA"] = "127.0.0.1:1" // nothing listens there: refused before connecting
			for k, v := range tc.vars {
				f.vars[k] = v
			}
			args := append([]string{cmd}, tc.args...)
			if cmd == "seq" {
				args = append([]string{"seq", "create", "articles"}, tc.args...)
			}
			line := requireError(t, f.run(t, args...))
			assert.Contains(t, line, tc.want, "%v %v", args, tc.vars)
			assert.NotContains(t, line, "reachable", "refused before connecting")
			assert.NoDirExists(t, filepath.Join(f.home, ".local", "state", "snapid"), "nothing is created on disk")
		}
	}
}

// parsedConfig is the registry configuration of a command line of next
// (args: its flags) in an environment of vars.
func parsedConfig(t *testing.T, vars map[string]string, args ...string) (cassandra.Config, bool, error) {
	t.Helper()
	c := &cli{env: env{getenv: func(k string) string { return vars[k] }}}
	var rf registryFlags
	c.newFlags("next")
	c.addRegistryFlags(&rf)
	c.addCreateFlags(&rf)
	require.NoError(t, c.parse(args))
	return c.registryConfig(&rf)
}

// A flag beats the environment, even empty: --cassandra ” means no
// registry whatever SNAPID_CASSANDRA says, --keyspace ” the default one.
func TestRegistryFlagBeatsEnvironment(t *testing.T) {
	t.Parallel()
	env := map[string]string{"SNAPID_CASSANDRA": "db1", "SNAPID_KEYSPACE": "other", "SNAPID_LOCAL_DC": "dc9"}
	for _, tc := range []struct {
		name   string
		args   []string
		ok     bool
		ks, dc string
	}{
		{"environment", nil, true, "other", "dc9"},
		{"empty cassandra", []string{"--cassandra", ""}, false, "", ""},
		{"empty cassandra, = form", []string{"--cassandra="}, false, "", ""},
		{"empty keyspace", []string{"--keyspace", ""}, true, "", "dc9"},
		{"empty local dc", []string{"--local-dc="}, true, "other", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, ok, err := parsedConfig(t, env, tc.args...)
			require.NoError(t, err)
			require.Equal(t, tc.ok, ok)
			if ok {
				assert.Equal(t, tc.ks, cfg.Keyspace)
				assert.Equal(t, tc.dc, cfg.LocalDC)
			}
		})
	}
}

// next --no-registry and --cassandra ” issue without the registry while
// SNAPID_CASSANDRA names one (here one that cannot answer): the
// documented fallback of an outage.
func TestNextNoRegistryBeatsEnvironment(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--no-registry"}, {"--cassandra", ""}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			f := newFakeEnv(t)
			f.vars["SNAPID_NAME"] = "web_1"
			f.vars["SNAPID_CASSANDRA"] = "127.0.0.1:1" // nothing listens there
			r := f.run(t, append([]string{"next", "--timeout", "3s"}, args...)...)
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Equal(t, "web_1-1\n", r.stdout)
		})
	}
	f := newFakeEnv(t)
	line := requireError(t, f.run(t, "next", "--name", "web_1", "--no-registry", "--cassandra", "db1"))
	assert.Contains(t, line, "--no-registry and --cassandra")
}

// Bad settings on every command that talks to the registry: exit 2 with
// one line that says why, and nothing is created, in Cassandra or on disk.
func TestRegistrySettingsRefusedChangeNothing(t *testing.T) {
	t.Parallel()
	f, s, ks := registryEnvBare(t, nil)
	dc := s.LocalDC(t)
	f.vars["SNAPID_NAME"] = "web_1"
	counterDir := filepath.Join(f.home, ".local", "state", "snapid")
	for _, tc := range []struct {
		name string
		args []string
		vars map[string]string
		want string
	}{
		{"consistency word", []string{"--consistency", "most"}, nil, "want quorum (the default), local_quorum or each_quorum"},
		{"consistency env", nil, map[string]string{"SNAPID_CONSISTENCY": "bogus"}, "SNAPID_CONSISTENCY"},
		{"consistency one", []string{"--consistency", "one"}, nil, "miss acknowledged changes"},
		{"consistency all", nil, map[string]string{"SNAPID_CONSISTENCY": "all"}, "while any one replica is down"},
		{"consistency any", []string{"--consistency", "any"}, nil, "any is refused"},
		{"local quorum without dc", []string{"--consistency", "local_quorum"}, nil, "needs LocalDC"},
		{"local serial flag", []string{"--serial-consistency", "local_serial"}, nil, "two data centres cut off from each other could both win the same name"},
		{"local serial env", nil, map[string]string{"SNAPID_SERIAL_CONSISTENCY": "LOCAL_SERIAL", "SNAPID_LOCAL_DC": dc}, "could both win the same name"},
		{"serial word", []string{"--serial-consistency", "quorum"}, nil, "the only one is serial"},
		{"local dc unknown", []string{"--local-dc", "nowhere"}, nil, `local data centre "nowhere" is not one of the cluster's data centres (` + dc + ")"},
		{"local dc env invalid", nil, map[string]string{"SNAPID_LOCAL_DC": "dc'1"}, "not a valid data-centre name"},
	} {
		for _, cmd := range []string{"next", "register", "release", "check-names", "setup"} {
			t.Run(tc.name+"/"+cmd, func(t *testing.T) {
				for k, v := range tc.vars {
					f.vars[k] = v
				}
				defer func() {
					for k := range tc.vars {
						delete(f.vars, k)
					}
				}()
				args := append([]string{cmd}, tc.args...)
				if cmd == "setup" {
					args = append(args, "--replication", "1")
				}
				line := requireError(t, f.run(t, args...))
				assert.Contains(t, line, tc.want)
				if strings.HasPrefix(tc.name, "local serial") {
					assert.Contains(t, line, "drop --serial-consistency (SNAPID_SERIAL_CONSISTENCY) or set it to serial")
				}
				assert.Nil(t, s.Replication(t, ks), "the keyspace was created")
				assert.NoDirExists(t, counterDir, "something was created on disk")
			})
		}
	}
}

// --replication (and SNAPID_REPLICATION) on setup; a replication the
// cluster's nodes can never serve is refused (on this one-node cluster: 3
// replicas), before anything is created. The commands that issue ids
// never create a keyspace named explicitly (a misspelt --keyspace): they
// refuse it, pointing at setup, and create nothing.
func TestRegistryReplicationWhereverCreated(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"next", "register", "setup"} {
		t.Run(cmd, func(t *testing.T) {
			f, s, ks := registryEnvBare(t, nil)
			dc := s.LocalDC(t)
			f.vars["SNAPID_NAME"] = "web_1"
			if cmd != "setup" {
				f.vars["SNAPID_REPLICATION"] = dc + ":1"
				line := requireError(t, f.run(t, cmd))
				assert.Contains(t, line, "keyspace "+ks+" does not exist")
				assert.Contains(t, line, "snapctl setup")
				assert.Nil(t, s.Replication(t, ks))
				assert.NoDirExists(t, filepath.Join(f.home, ".local", "state", "snapid"))
				return
			}
			line := requireError(t, f.run(t, cmd, "--replication", dc+":3"))
			assert.Contains(t, line, "cannot survive the loss of one node")
			assert.Contains(t, line, "check --replication")
			assert.Nil(t, s.Replication(t, ks))
			f.vars["SNAPID_REPLICATION"] = "3"
			line = requireError(t, f.run(t, cmd))
			assert.Contains(t, line, "only 1 exist")
			assert.Nil(t, s.Replication(t, ks))
			assert.NoDirExists(t, filepath.Join(f.home, ".local", "state", "snapid"))

			// The environment's replication, and the consistency and data
			// centre, on a command that creates the keyspace.
			f.vars["SNAPID_REPLICATION"] = dc + ":1"
			r := f.run(t, cmd, "--consistency", "each_quorum", "--local-dc", dc)
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Equal(t, map[string]string{"class": "org.apache.cassandra.locator.NetworkTopologyStrategy", dc: "1"}, s.Replication(t, ks))
			r = f.run(t, "register", "--consistency", "local_quorum", "--local-dc", dc, "--serial-consistency", "serial")
			require.Equal(t, exitOK, r.code, r.stderr)
		})
	}
	// Asked for explicitly, a fragile keyspace is created.
	f, s, ks := registryEnvBare(t, nil)
	dc := s.LocalDC(t)
	r := f.run(t, "setup", "--replication", dc+":3", "--allow-fragile-replication")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "3", s.Replication(t, ks)[dc])
}

type replicationJSON struct {
	Problems []struct {
		Kind   string `json:"kind"`
		Detail string `json:"detail"`
	} `json:"problems"`
	Replication *struct {
		Keyspace string         `json:"keyspace"`
		Nodes    map[string]int `json:"nodes_per_dc"`
		Replicas int            `json:"replicas"`
		Quorum   int            `json:"quorum"`
		Status   string         `json:"status"`
		Detail   string         `json:"detail"`
		Fix      string         `json:"fix"`
		// The JSON names a user's scripts read.
		Sequences []struct {
			DC           string `json:"dc"`
			Replicas     int    `json:"replicas"`
			Paxos        string `json:"paxos"`
			LeasesCutOff bool   `json:"leases_while_cut_off"`
		} `json:"sequences"`
	} `json:"replication"`
}

func TestCheckNamesReportsReplication(t *testing.T) {
	t.Parallel()
	// One replica on the one-node cluster: a warning, exit 0.
	f, s, ks := registryEnv(t)
	dc := s.LocalDC(t)
	f.vars["SNAPID_NAME"] = "web_1"
	r := f.run(t, "register")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = f.run(t, "check-names")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stdout, "check-names: warning: keyspace "+ks+" has 1 replica(s) on a one-node cluster")
	assert.Contains(t, r.stdout, "no problems in 1 registry row\n")
	r = f.run(t, "check-names", "--json")
	require.Equal(t, exitOK, r.code, r.stdout+r.stderr)
	var out replicationJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	require.NotNil(t, out.Replication, r.stdout)
	assert.Equal(t, "warning", out.Replication.Status)
	assert.Equal(t, ks, out.Replication.Keyspace)
	assert.Equal(t, map[string]int{dc: 1}, out.Replication.Nodes)
	assert.Empty(t, out.Problems)

	// A keyspace made with two replicas on the one node: its quorum
	// cannot be reached, so its rows cannot be listed; the one line says
	// why and how to fix it.
	g, s2, ks2 := registryEnvBare(t, nil)
	s2.Exec(t, `CREATE KEYSPACE "`+ks2+`" WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 2}`)
	r = g.run(t, "setup", "--replication", "1") // makes the table; the keyspace keeps its replication
	require.Equal(t, exitOK, r.code, r.stderr)
	line := requireError(t, g.run(t, "check-names"))
	assert.Contains(t, line, "Cannot achieve consistency level QUORUM")
	assert.Contains(t, line, "cannot survive the loss of one node")
	assert.Contains(t, line, "add nodes")

	// The one-replica keyspace as a cluster of three nodes sees it: a
	// problem (exit 1) that says how to fix it, in the table and in JSON.
	f.checkReplication = func(reg *cassandra.Registry, ctx context.Context) (cassandra.ReplicationReport, error) {
		rep, err := reg.CheckReplication(ctx)
		rep.Nodes[dc] = 3
		rep.Status, rep.Detail, rep.Fix = cassandra.ReplicationAttention, "keyspace "+ks+" cannot survive the loss of one node", "ALTER KEYSPACE x"
		return rep, err
	}
	r = f.run(t, "check-names")
	require.Equal(t, exitProblems, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stdout, "fragile_replication")
	assert.Contains(t, r.stdout, "cannot survive the loss of one node; to fix: ALTER KEYSPACE x")
	assert.NotContains(t, r.stdout, "warning")
	r = f.run(t, "check-names", "--json")
	require.Equal(t, exitProblems, r.code, r.stdout+r.stderr)
	out = replicationJSON{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	require.NotNil(t, out.Replication)
	assert.Equal(t, "attention", out.Replication.Status)
	assert.Equal(t, map[string]int{dc: 3}, out.Replication.Nodes)
	assert.Equal(t, "ALTER KEYSPACE x", out.Replication.Fix)
	require.Len(t, out.Problems, 1)
	assert.Equal(t, "fragile_replication", out.Problems[0].Kind)

	// On two data centres, each says how it keeps sequences: one of 3
	// replicas leases while cut off, one of a single replica does not.
	f.checkReplication = func(reg *cassandra.Registry, ctx context.Context) (cassandra.ReplicationReport, error) {
		rep, err := reg.CheckReplication(ctx)
		rep.Sequences = []cassandra.SequenceDC{
			{DC: "dc1", Replicas: 3, Paxos: "LOCAL_SERIAL", LeasesCutOff: true, Detail: "kept at LOCAL_SERIAL among its 3 replicas"},
			{DC: "dc2", Replicas: 1, Paxos: "SERIAL", Detail: "kept at SERIAL among all 4 replicas"},
		}
		return rep, err
	}
	r = f.run(t, "check-names")
	assert.Contains(t, r.stdout, "check-names: sequences in data centre dc1 (3 replicas): kept at LOCAL_SERIAL among its 3 replicas\n")
	assert.Contains(t, r.stdout, "check-names: sequences in data centre dc2 (1 replica): kept at SERIAL among all 4 replicas\n")
	r = f.run(t, "check-names", "--json")
	out = replicationJSON{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	require.Len(t, out.Replication.Sequences, 2)
	assert.Equal(t, "SERIAL", out.Replication.Sequences[1].Paxos)
	assert.False(t, out.Replication.Sequences[1].LeasesCutOff)

	// Without a registry there is no replication to report.
	h := newFakeEnv(t)
	inv := filepath.Join(t.TempDir(), "names")
	require.NoError(t, os.WriteFile(inv, []byte("web_9\n"), 0o600))
	r = h.run(t, "check-names", "--json", "--names", inv)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.NotContains(t, r.stdout, "replication")
}

func TestHelpListsProductionSettings(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	r := f.run(t, "help")
	require.Equal(t, exitOK, r.code)
	for _, s := range []string{"--local-dc", "--consistency", "--serial-consistency", "--replication", "--allow-fragile-replication",
		"SNAPID_LOCAL_DC", "SNAPID_CONSISTENCY", "SNAPID_SERIAL_CONSISTENCY", "SNAPID_REPLICATION", "--replication dc1:3,dc2:3"} {
		assert.Contains(t, r.stdout, s)
	}
	for cmd, creates := range map[string]bool{"next": true, "register": true, "release": true, "setup": true, "check-names": false} {
		r := f.run(t, "help", cmd)
		require.Equal(t, exitOK, r.code)
		_, flags, _ := strings.Cut(r.stdout, "flags:")
		for _, fl := range []string{"-local-dc", "-consistency", "-serial-consistency"} {
			assert.Contains(t, flags, fl, cmd)
		}
		if creates {
			assert.Contains(t, flags, "-replication", cmd)
			assert.Contains(t, flags, "-allow-fragile-replication", cmd)
		} else {
			assert.NotContains(t, flags, "-replication", cmd)
		}
	}
}

// A host list of blanks, or with an empty entry, is refused by every
// command that reads it, from the variable or the flag, before anything
// is made: it is not "no registry" (a host meant to use one would run
// without it).
func TestBlankRegistryHostsRefused(t *testing.T) {
	t.Parallel()
	commands := [][]string{{"next"}, {"register"}, {"release"}, {"status"}, {"names"}, {"check-names"},
		{"setup", "--replication", "1"}, {"seq", "next", "s1"}, {"seq", "create", "s1"}, {"seq", "show", "s1"}}
	for _, hosts := range []string{" ", "\t", "db1,,db2", "db1,", ",db1", " , "} {
		for _, viaFlag := range []bool{false, true} {
			for _, cmd := range commands {
				t.Run(fmt.Sprintf("%q flag=%v %s", hosts, viaFlag, cmd[0]), func(t *testing.T) {
					t.Parallel()
					f := newFakeEnv(t)
					f.vars["SNAPID_NAME"] = "web_1"
					args := append([]string{}, cmd...)
					if viaFlag {
						args = append(args, "--cassandra", hosts)
					} else {
						f.vars["SNAPID_CASSANDRA"] = hosts
					}
					home, bind := testfs.Snapshot(t, f.home), testfs.Snapshot(t, f.vars["SNAPID_BINDING_DIR"])
					line := requireError(t, f.run(t, args...))
					assert.Contains(t, line, "SNAPID_CASSANDRA")
					assert.Contains(t, line, "want host[:port]")
					assert.Equal(t, home, testfs.Snapshot(t, f.home), "nothing made")
					assert.Equal(t, bind, testfs.Snapshot(t, f.vars["SNAPID_BINDING_DIR"]), "nothing bound")
				})
			}
		}
	}
}
