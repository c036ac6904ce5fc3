package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCLIShowAndInitTimeoutOnLockedCounter(t *testing.T) {
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
			line := requireOneErrorLine(t, r)
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
	f := newFakeEnv(t)
	path := filepath.Join(t.TempDir(), "none.u64")
	for _, args := range [][]string{{"show", "--counter", path}} {
		r := f.run(t, args...)
		line := requireOneErrorLine(t, r)
		assert.Equal(t, 1, strings.Count(line, args[2]), "%v: %s", args, line)
		assert.Contains(t, line, "no such file or directory")
	}
}
