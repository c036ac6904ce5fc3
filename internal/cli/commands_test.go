package cli

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"time"

	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A server with its own counter issues under "vm"; then snapctl under
// that name with its per-user default counter must not print vm-1 again.
// It is refused with an error that names the server's counter and what
// to do, issues nothing and creates nothing.
func TestNextRefusesNameBoundToAnotherCounter(t *testing.T) {
	t.Parallel()
	bind := t.TempDir() // the host's binding directory
	serverDir := t.TempDir()
	serverCounter := filepath.Join(serverDir, "counter.u64")
	server, err := engine.Open(serverCounter, "vm", engine.WithBindingDir(bind))
	require.NoError(t, err)
	defer server.Close()
	id, err := server.UniqueID()
	require.NoError(t, err)
	require.Equal(t, "vm-1", id)

	f := newFakeEnv(t)
	f.host = "vm"
	f.vars["SNAPID_BINDING_DIR"] = bind
	beforeHome, beforeBind := testfs.Snapshot(t, f.home), testfs.Snapshot(t, bind)
	r := f.run(t, "next", "--name", "vm")
	assert.Empty(t, r.stdout, "no id printed")
	line := requireError(t, r)
	for _, want := range []string{`"vm"`, serverCounter, filepath.Join(bind, "vm"), "nothing was issued", "--counter", "--name"} {
		assert.Contains(t, line, want)
	}
	testfs.RequireUnchanged(t, f.home, beforeHome)
	testfs.RequireUnchanged(t, bind, beforeBind)
	ents, err := os.ReadDir(f.home)
	require.NoError(t, err)
	assert.Empty(t, ents, "not even the per-user state directory is created")

	// The server goes on from its counter; snapctl with that counter
	// continues it.
	id, err = server.UniqueID()
	require.NoError(t, err)
	assert.Equal(t, "vm-2", id)
	r = f.run(t, "next", "--counter", serverCounter)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "vm-3\n", r.stdout)
}

// The README's first command, run before a service is set up (as root or
// any user: snapctl's own counter, no name given), takes a name of the
// user's own, so that it stops no configured program from using the host
// name; and a default counter that already issued under a name goes on
// under it.
func TestTrialLeavesTheHostName(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	f.host = "vm"
	r := f.run(t, "next", "-n", "3")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "vm_tester-1\nvm_tester-2\nvm_tester-3\n", r.stdout)
	assert.Contains(t, r.stderr, `"vm_tester"`)

	server, err := engine.Open(filepath.Join(t.TempDir(), "counter.u64"), "vm", engine.WithBindingDir(f.vars["SNAPID_BINDING_DIR"]))
	require.NoError(t, err, "the host name is free for a configured program")
	id, err := server.UniqueID()
	require.NoError(t, err)
	assert.Equal(t, "vm-1", id)
	require.NoError(t, server.Close())

	// A default counter recorded under the host name (made before the
	// user's name was added) keeps it.
	g := newFakeEnv(t)
	g.host = "db"
	r = g.run(t, "next", "--name", "db")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = g.run(t, "next")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "db-2\n", r.stdout)
	assert.Contains(t, r.stderr, "the name the host's record gives")
}

func TestCLIShowAndInitTimeoutOnLockedCounter(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "snapctl-lockwait-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	path := filepath.Join(dir, "counter.u64")
	f := newFakeEnv(t)
	r := f.run(t, "init", "--counter", path, "--start", "10", "--mode", "0644")
	require.Equal(t, exitOK, r.code, r.stderr)
	testfs.HoldFlock(t, path)
	for _, args := range [][]string{
		{"show", "--counter", path, "--timeout", "300ms"},
		{"status", "--counter", path, "--name", "vm", "--timeout", "300ms"},
		{"init", "--counter", path, "--start", "20", "--timeout", "300ms"},
		{"init", "--counter", path, "--start", "30", "--force", "--timeout", "300ms"},
	} {
		done := make(chan result, 1)
		go func() { done <- f.run(t, args...) }()
		select {
		case r := <-done:
			line := requireError(t, r)
			assert.Contains(t, line, "held by pid", args)
			// Each thing said once: the path, that it is locked, and
			// what to do.
			assert.Equal(t, 1, strings.Count(line, path), "%v: %s", args, line)
			assert.Equal(t, 1, strings.Count(line, "locked by another process"), "%v: %s", args, line)
			assert.Contains(t, line, "--timeout", args)
		case <-time.After(4 * time.Second):
			t.Fatalf("snapctl %v still waiting 4s later for another process's lock", args)
		}
	}
	assert.Equal(t, uint64(9), counterValue(t, path))
}

// show (and every command) names a missing counter once: "open P: no
// such file or directory", not "open P: open P: …".
func TestCLIMissingCounterSaidOnce(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	path := filepath.Join(t.TempDir(), "none.u64")
	for _, args := range [][]string{{"show", "--counter", path}} {
		r := f.run(t, args...)
		line := requireError(t, r)
		assert.Equal(t, 1, strings.Count(line, args[2]), "%v: %s", args, line)
		assert.Contains(t, line, "no such file or directory")
	}
}

// withoutNoRegistryNotice requires stderr to hold next's notice that
// name was checked on this host only, once, and returns stderr without
// it.
func withoutNoRegistryNotice(t *testing.T, stderr, name string) string {
	t.Helper()
	var rest []string
	notices := 0
	for _, l := range strings.SplitAfter(stderr, "\n") {
		if strings.HasPrefix(l, "snapctl: notice: without a registry, ") {
			notices++
			assert.Contains(t, l, fmt.Sprintf("%q is checked on this host only", name))
			assert.Contains(t, l, "set SNAPID_CASSANDRA or give --cassandra")
			continue
		}
		rest = append(rest, l)
	}
	assert.Equal(t, 1, notices, "one notice that the name is checked on this host only: %q", stderr)
	return strings.Join(rest, "")
}

// next without a registry says once that the name is checked on this
// host only; not when a registry proved the name unique (a registered
// counter through an outage, --no-registry), nor when nothing was issued.
func TestNextWithoutRegistrySaysSoOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		vars map[string]string
		args []string
	}{
		{"no registry configured", nil, nil},
		{"SNAPID_CASSANDRA set to nothing", map[string]string{"SNAPID_CASSANDRA": ""}, nil},
		{"--cassandra ''", nil, []string{"--cassandra", ""}},
		{"--no-registry on a counter never registered", nil, []string{"--no-registry"}},
		{"-n 3", nil, []string{"-n", "3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeEnv(t)
			maps.Copy(f.vars, tc.vars)
			path := filepath.Join(t.TempDir(), "counter.u64")
			r := f.run(t, append([]string{"next", "--name", "web_1", "--counter", path}, tc.args...)...)
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Empty(t, withoutNoRegistryNotice(t, r.stderr, "web_1"))
		})
	}
	t.Run("registered counter, --no-registry", func(t *testing.T) {
		t.Parallel()
		f := newFakeEnv(t)
		f.inproc = &InProcess{Registry: registrytest.NewRegistry()}
		path := filepath.Join(t.TempDir(), "counter.u64")
		r := f.run(t, "register", "--name", "web_1", "--counter", path)
		require.Equal(t, exitOK, r.code, r.stderr)
		r = f.run(t, "next", "--no-registry", "--name", "web_1", "--counter", path)
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.Equal(t, "web_1-1\n", r.stdout)
		assert.NotContains(t, r.stderr, "checked on this host only", "the registry proved the name unique when it was claimed")
	})
	t.Run("nothing issued", func(t *testing.T) {
		t.Parallel()
		f := newFakeEnv(t)
		path := filepath.Join(t.TempDir(), "counter.u64")
		r := f.run(t, "next", "--name", "web_1", "--counter", path, "--format", "decimal", "--node-number", "1", "--max-id", "2", "-n", "5")
		requireError(t, r)
		assert.NotContains(t, r.stderr, "checked on this host only", "the error alone")
	})
}

// Flags a command would take and then ignore are refused, naming the
// flag, before anything is made or changed.
func TestFlagsThatDoNothingRefused(t *testing.T) {
	t.Parallel()
	inventory := filepath.Join(t.TempDir(), "planned.txt")
	require.NoError(t, os.WriteFile(inventory, []byte("web_3\n"), 0o600))
	for _, tc := range []struct {
		name  string
		setup []string // run first, must succeed
		args  []string
		want  []string
	}{
		{"init always syncs", nil, []string{"init", "--sync=false"}, []string{"init has no flag --sync"}},
		{"init --mode on a counter that exists", []string{"init"}, []string{"init", "--start", "5", "--mode", "0640"},
			[]string{"--mode sets the permissions of a counter init creates", "exists (mode 0600)"}},
		{"init --force --mode", []string{"init"}, []string{"init", "--force", "--start", "5", "--mode", "0640"},
			[]string{"--mode", "--force rewrites an existing one in place"}},
		{"seq create --name", nil, []string{"seq", "create", "s1", "--name", "web_1"}, []string{"seq create has no flag --name"}},
		{"seq create --sync", nil, []string{"seq", "create", "s1", "--sync=false"}, []string{"seq create has no flag --sync"}},
		{"seq show --name", nil, []string{"seq", "show", "s1", "--name", "web_1"}, []string{"seq show has no flag --name"}},
		{"next --keyspace without a registry", nil, []string{"next", "--keyspace", "ks"},
			[]string{"--keyspace applies only with a registry", "none is configured"}},
		{"next --cassandra '' --consistency", nil, []string{"next", "--cassandra", "", "--consistency", "quorum"},
			[]string{"--consistency applies only with a registry"}},
		{"next --no-registry --tls-ca", nil, []string{"next", "--no-registry", "--tls-ca", "/ca.pem"},
			[]string{"--tls-ca applies only with a registry", "--no-registry turns it off"}},
		{"next --no-registry --replication", nil, []string{"next", "--no-registry", "--replication", "3"},
			[]string{"--replication applies only with a registry"}},
		{"status --local-dc without a registry", nil, []string{"status", "--local-dc", "dc1"},
			[]string{"--local-dc applies only with a registry"}},
		{"check-names --names --stale without a registry", nil, []string{"check-names", "--names", inventory, "--stale", "1h"},
			[]string{"--stale applies only with a registry", "only the --names file is checked"}},
		{"check-names --names --name without a registry", nil, []string{"check-names", "--names", inventory, "--name", "web_1"},
			[]string{"--name applies only with a registry"}},
		{"check-names --names --timeout without a registry", nil, []string{"check-names", "--names", inventory, "--timeout", "5s"},
			[]string{"--timeout applies only with a registry"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeEnv(t)
			f.vars["SNAPID_NAME"] = "web_1"
			if tc.setup != nil {
				r := f.run(t, tc.setup...)
				require.Equal(t, exitOK, r.code, r.stderr)
			}
			home, bind := testfs.Snapshot(t, f.home), testfs.Snapshot(t, f.vars["SNAPID_BINDING_DIR"])
			r := f.run(t, tc.args...)
			line := requireError(t, r)
			for _, w := range tc.want {
				assert.Contains(t, line, w)
			}
			assert.Empty(t, r.stdout)
			testfs.RequireUnchanged(t, f.home, home)
			testfs.RequireUnchanged(t, f.vars["SNAPID_BINDING_DIR"], bind)
		})
	}
	// A flag that applies is taken: --timeout also bounds the wait for the
	// counter's lock, without a registry too.
	f := newFakeEnv(t)
	f.vars["SNAPID_NAME"] = "web_1"
	r := f.run(t, "next", "--no-registry", "--timeout", "5s")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = f.run(t, "status", "--timeout", "5s")
	require.Equal(t, exitOK, r.code, r.stderr)
}

// release --force releases the name given whoever holds it: with --name,
// a --counter would do nothing and is refused; without --name, the
// counter says which name.
func TestReleaseForceCounter(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	reg := registrytest.NewRegistry()
	f.inproc = &InProcess{Registry: reg}
	path := filepath.Join(t.TempDir(), "counter.u64")
	r := f.run(t, "register", "--name", "web_1", "--counter", path)
	require.Equal(t, exitOK, r.code, r.stderr)
	line := requireError(t, f.run(t, "release", "--force", "--start", "10", "--name", "web_1", "--counter", path))
	assert.Contains(t, line, "--counter does nothing with --force and --name")
	row, _ := reg.Row("web_1")
	assert.Equal(t, registry.StateActive, row.State, "nothing released")
	r = f.run(t, "release", "--force", "--start", "10", "--counter", path)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "released web_1 (last number 9)\n", r.stdout)
}
