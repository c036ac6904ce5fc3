package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holdCounterLock has another process (as uid 65534 when run as root)
// hold a shared flock on path.
func holdCounterLock(t *testing.T, path string) {
	t.Helper()
	args := []string{"flock", "--shared", "--close", path, "sleep", "20"}
	if os.Geteuid() == 0 {
		args = append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}, args...)
	}
	if _, err := exec.LookPath(args[0]); err != nil {
		t.Skipf("%s not found", args[0])
	}
	holder := exec.Command(args[0], args[1:]...)
	require.NoError(t, holder.Start())
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	pid := strconv.Itoa(holder.Process.Pid)
	for i := 0; i < 200; i++ {
		b, _ := os.ReadFile("/proc/locks")
		for _, f := range strings.Fields(string(b)) {
			if f == pid {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the holder of %s never took its lock", path)
}

func TestCLIShowAndInitTimeoutOnLockedCounter(t *testing.T) {
	dir, err := os.MkdirTemp("", "snapctl-lockwait-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	path := filepath.Join(dir, "counter.u64")
	f := newFakeEnv(t)
	r := f.run(t, "init", "--counter", path, "--start", "10", "--mode", "0644")
	require.Equal(t, exitOK, r.code, r.stderr)
	holdCounterLock(t, path)
	for _, args := range [][]string{
		{"show", "--counter", path, "--timeout", "300ms"},
		{"init", "--counter", path, "--start", "20", "--timeout", "300ms"},
		{"init", "--counter", path, "--start", "30", "--force", "--timeout", "300ms"},
	} {
		done := make(chan result, 1)
		go func() { done <- f.run(t, args...) }()
		select {
		case r := <-done:
			line := requireOneErrorLine(t, r)
			assert.Contains(t, line, "held by pid", args)
		case <-time.After(4 * time.Second):
			t.Fatalf("snapctl %v still waiting 4s later for another process's lock", args)
		}
	}
	assert.Equal(t, uint64(9), counterValue(t, path))
}
