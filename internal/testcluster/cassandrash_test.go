package testcluster

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cassandraScript is scripts/cassandra.sh, from this package's directory.
var cassandraScript = filepath.Join("..", "..", "scripts", "cassandra.sh")

// fakeTools writes a java that says it is Java 17 and an mvn that fails
// as one without network does, and returns the directory to put first
// on PATH.
func fakeTools(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	for name, body := range map[string]string{
		"java": "echo '    java.specification.version = 17' >&2\n",
		"mvn":  "echo '[ERROR] Could not transfer artifact org.apache.cassandra:cassandra-all from/to central: Network is unreachable' >&2\nexit 1\n",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body), 0o755))
	}
	return bin
}

// runScript runs scripts/cassandra.sh with args, HOME set to home (so
// that its default directories are there), env added, and the fake tools
// first on PATH. It returns the output and the exit status.
func runScript(t *testing.T, home string, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{cassandraScript}, args...)...)
	cmd.Env = append([]string{"HOME=" + home, "PATH=" + fakeTools(t) + ":" + os.Getenv("PATH")}, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), ee.ExitCode()
	}
	require.NoError(t, err, "running %s: %s", cassandraScript, out.String())
	return out.String(), 0
}

// A fetch that cannot reach Maven Central says where the cache goes
// (SNAPID_CACHE) and how to fill it beforehand (make prefetch).
func TestCassandraFetchWithoutNetworkSaysHowToPrefetch(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	cache := filepath.Join(t.TempDir(), "cache")
	out, code := runScript(t, home, []string{"SNAPID_CACHE=" + cache}, "fetch")
	assert.NotZero(t, code, "the fetch failed: %s", out)
	for _, want := range []string{"SNAPID_CACHE", cache, "make prefetch", "scripts/cassandra.sh fetch"} {
		assert.Contains(t, out, want)
	}
	assert.NoDirExists(t, filepath.Join(cache, "cassandra-5.0.9", "lib"), "a failed fetch never looks complete")
}

// stop stops the cluster recorded in the cluster directory only when that
// directory belongs with the node's: both given, or both defaults. A node
// directory given alone leaves the default cluster directory's nodes (a
// run with the default directories) running.
func TestCassandraStopStopsOnlyItsOwnCluster(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		env     func(home string) []string
		stopped bool
	}{
		{"the defaults", func(string) []string { return nil }, true},
		{"both directories given", func(home string) []string {
			return []string{"SNAPID_CASSANDRA_DIR=" + filepath.Join(home, "run-mine"), "SNAPID_CLUSTER_DIR=" + defaultClusterDir(home)}
		}, true},
		{"a node directory alone", func(home string) []string {
			return []string{"SNAPID_CASSANDRA_DIR=" + filepath.Join(home, "run-mine")}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			home := t.TempDir()
			ended := fakeClusterNode(t, defaultClusterDir(home))
			out, code := runScript(t, home, tc.env(home), "stop")
			require.Zero(t, code, out)
			if !tc.stopped {
				select {
				case err := <-ended:
					t.Errorf("the other cluster's node was stopped (%v): %s", err, out)
				default:
				}
				assert.FileExists(t, filepath.Join(defaultClusterDir(home), "nodes"))
				assert.Contains(t, out, "leaving the cluster recorded in "+defaultClusterDir(home)+" alone")
				return
			}
			assert.Contains(t, out, "cluster of 1 nodes stopped")
			assert.Contains(t, out, "not running", "and the node of SNAPID_CASSANDRA_DIR, which is not running")
			assert.NoFileExists(t, filepath.Join(defaultClusterDir(home), "nodes"))
			select {
			case err := <-ended:
				assert.Error(t, err, "the cluster's node ended by a signal")
			case <-time.After(10 * time.Second):
				t.Errorf("the script said the cluster stopped, and its node still runs: %s", out)
			}
		})
	}
}

// defaultClusterDir is scripts/cassandra.sh's cluster directory for
// HOME=home without SNAPID_CACHE and SNAPID_CLUSTER_DIR.
func defaultClusterDir(home string) string {
	return filepath.Join(home, ".cache", "snapid", "cluster")
}

// fakeClusterNode records a cluster of one node in dir whose pid is a
// process that waits on its input and names the node's cassandra.yaml on
// its command line, as the script checks before it stops a node. It
// returns a channel that receives the process's end (it is reaped at
// once, so that the script's kill -0 sees it gone); the process is
// killed at the end of the test if the script did not end it.
func fakeClusterNode(t *testing.T, dir string) <-chan error {
	t.Helper()
	conf := filepath.Join(dir, "node1", "conf")
	require.NoError(t, os.MkdirAll(conf, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nodes"), []byte("1 1\n"), 0o644))
	cmd := exec.Command("sh", "-c", "read x", filepath.Join(conf, "cassandra.yaml"))
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = stdin.Close()
	})
	pid := []byte(strconv.Itoa(cmd.Process.Pid) + "\n")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "node1", "cassandra.pid"), pid, 0o644))
	return done
}
