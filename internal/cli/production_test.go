package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gocql/gocql"
	"github.com/snapid/snapid/cassandra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each registry setting from its flag, else its variable; flags win.
func TestRegistryConfigFlagsAndEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		vars  map[string]string
		check func(t *testing.T, cfg cassandra.Config)
	}{
		{"defaults", nil, nil, func(t *testing.T, cfg cassandra.Config) {
			assert.Equal(t, gocql.Consistency(0), cfg.Consistency)
			assert.Equal(t, gocql.SerialConsistency(0), cfg.SerialConsistency)
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
		{"--serial-consistency", "local"}, {"--replication", "dc1:0"}, {"--username", "u"}} {
		_, _, err := parsedConfig(t, map[string]string{"SNAPID_CASSANDRA": "db1"}, bad...)
		var ue usageError
		assert.ErrorAs(t, err, &ue, "%v", bad)
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
	line := requireOneErrorLine(t, f.run(t, "next", "--name", "web_1", "--no-registry", "--cassandra", "db1"))
	assert.Contains(t, line, "--no-registry and --cassandra")
}

// Bad settings on every command that talks to the registry: exit 2 with
// one line that says why, and nothing is created, in Cassandra or on disk.
func TestRegistrySettingsRefusedChangeNothing(t *testing.T) {
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
				line := requireOneErrorLine(t, f.run(t, args...))
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
	for _, cmd := range []string{"next", "register", "setup"} {
		t.Run(cmd, func(t *testing.T) {
			f, s, ks := registryEnvBare(t, nil)
			dc := s.LocalDC(t)
			f.vars["SNAPID_NAME"] = "web_1"
			if cmd != "setup" {
				f.vars["SNAPID_REPLICATION"] = dc + ":1"
				line := requireOneErrorLine(t, f.run(t, cmd))
				assert.Contains(t, line, "keyspace "+ks+" does not exist")
				assert.Contains(t, line, "snapctl setup")
				assert.Nil(t, s.Replication(t, ks))
				assert.NoDirExists(t, filepath.Join(f.home, ".local", "state", "snapid"))
				return
			}
			line := requireOneErrorLine(t, f.run(t, cmd, "--replication", dc+":3"))
			assert.Contains(t, line, "cannot survive the loss of one node")
			assert.Contains(t, line, "check --replication")
			assert.Nil(t, s.Replication(t, ks))
			f.vars["SNAPID_REPLICATION"] = "3"
			line = requireOneErrorLine(t, f.run(t, cmd))
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
	} `json:"replication"`
}

func TestCheckNamesReportsReplication(t *testing.T) {
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
	line := requireOneErrorLine(t, g.run(t, "check-names"))
	assert.Contains(t, line, "Cannot achieve consistency level QUORUM")
	assert.Contains(t, line, "cannot survive the loss of one node")
	assert.Contains(t, line, "add nodes")

	// The one-replica keyspace as a cluster of three nodes sees it: a
	// problem (exit 1) that says how to fix it, in the table and in JSON.
	defer func(orig func(*cassandra.Registry, context.Context) (cassandra.ReplicationReport, error)) {
		checkReplication = orig
	}(checkReplication)
	checkReplication = func(reg *cassandra.Registry, ctx context.Context) (cassandra.ReplicationReport, error) {
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

	// Without a registry there is no replication to report.
	h := newFakeEnv(t)
	inv := filepath.Join(t.TempDir(), "names")
	require.NoError(t, os.WriteFile(inv, []byte("web_9\n"), 0o600))
	r = h.run(t, "check-names", "--json", "--names", inv)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.NotContains(t, r.stdout, "replication")
}

func TestHelpListsProductionSettings(t *testing.T) {
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
