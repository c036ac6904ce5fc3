package powerfs_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One heartbeat per host, across real processes: children of this test
// binary open one counter (one host, one name) on the parent's registry
// over net/rpc, with a short heartbeat interval, and idle until their
// standard input closes (then Close and exit) or they are killed.
const (
	roleHeartbeat = "heartbeat"
	envInterval   = "POWERFS_TEST_HEARTBEAT" // the heartbeat interval, a time.Duration
)

func init() {
	// Before TestMain, which runs the counter's children for any role.
	if os.Getenv(envRole) == roleHeartbeat {
		os.Exit(heartbeatChild())
	}
}

// heartbeatChild opens the Generator, takes one id, says READY, and waits
// for its standard input to close.
func heartbeatChild() int {
	say("START")
	interval, err := time.ParseDuration(os.Getenv(envInterval))
	if err != nil {
		say("E interval: %v", err)
		return 3
	}
	reg, err := dialRegistry(os.Getenv(envSock))
	if err != nil {
		say("E registry: %v", err)
		return 3
	}
	defer reg.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rc := registryConfig(reg, 0)
	rc.Heartbeat = interval
	g, err := snapid.Open(os.Getenv(envPath), os.Getenv(envName), snapid.Config{
		Registry:   rc,
		Logger:     quiet,
		BindingDir: os.Getenv(envRecords),
	})
	if err != nil {
		say("E open: %v", err)
		return 3
	}
	if _, err := g.Next(); err != nil {
		say("E next: %v", err)
		return 3
	}
	say("READY")
	io.Copy(io.Discard, os.Stdin)
	if err := g.Close(); err != nil {
		say("E close: %v", err)
		return 3
	}
	return 0
}

// hbProc is a running heartbeat child.
type hbProc struct {
	*proc
	stdin io.WriteCloser
}

func startHeartbeatChild(t *testing.T, path, sock, records string, interval time.Duration) *hbProc {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), envRole+"="+roleHeartbeat, envPath+"="+path, envName+"=web_1",
		envSock+"="+sock, envInterval+"="+interval.String(), envRecords+"="+records)
	p := &proc{cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = &p.stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	go p.read(out)
	return &hbProc{proc: p, stdin: in}
}

// waitReady waits until the child said READY (or failed).
func (p *hbProc) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		ready, errs := p.ready, append([]string(nil), p.errs...)
		p.mu.Unlock()
		require.Empty(t, errs, "child %d", p.cmd.Process.Pid)
		if ready {
			return
		}
		select {
		case <-p.done:
			p.cmd.Wait() // stderr is complete (and no longer written) after Wait
			t.Fatalf("child %d exited before READY: %s", p.cmd.Process.Pid, p.stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	t.Fatalf("child %d not READY after 30 s", p.cmd.Process.Pid)
}

// flockHolder returns the pid that holds a flock on the file at path, 0
// if none, from /proc/locks (the heartbeat role is that flock).
func flockHolder(t *testing.T, path string) int {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(path, &st))
	f, err := os.Open("/proc/locks")
	require.NoError(t, err)
	defer f.Close()
	ino := ":" + strconv.FormatUint(st.Ino, 10)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 4242 00:2e:1234567 0 EOF"
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[1] != "FLOCK" || !strings.HasSuffix(fs[5], ino) {
			continue
		}
		pid, err := strconv.Atoi(fs[4])
		require.NoError(t, err, sc.Text())
		return pid
	}
	require.NoError(t, sc.Err())
	return 0
}

// TestHeartbeatProcesses: a host of four processes sends one heartbeat per
// interval between them; the process holding the heartbeat is stopped
// (SIGSTOP) for eight intervals, while the others refresh without the
// role, and continued; then the process holding it is killed
// (SIGKILL), then the next one exits cleanly, then the next is killed
// again: each time another live process holds the role within an
// interval, and last-seen is never left without a refresh for longer
// than an interval and a half (the non-holders' fallback), so the claim
// never looks gone.
func TestHeartbeatProcesses(t *testing.T) {
	const (
		interval = 200 * time.Millisecond
		procs    = 4
	)
	dir := t.TempDir()
	path := filepath.Join(dir, "counter")
	reg := registrytest.NewRegistry()
	var mu sync.Mutex
	var touches []time.Time
	reg.SetHook(func(_ context.Context, op, _ string) error {
		if op == "touch" {
			mu.Lock()
			touches = append(touches, time.Now())
			mu.Unlock()
		}
		return nil
	})
	sock := filepath.Join(dir, "registry.sock")
	serveRegistry(t, reg, sock)

	children := make([]*hbProc, procs)
	defer func() {
		for _, c := range children {
			if c != nil {
				c.kill()
			}
		}
	}()
	records := filepath.Join(dir, "records") // the children are one host
	for i := range children {
		children[i] = startHeartbeatChild(t, path, sock, records, interval)
		children[i].waitReady(t) // one at a time: the first claims, the others join
	}
	hbPath := path + ".heartbeat"
	live := func() map[int]int {
		m := map[int]int{}
		for i, c := range children {
			if c != nil {
				m[c.cmd.Process.Pid] = i
			}
		}
		return m
	}
	holder := func() (int, bool) {
		i, ok := live()[flockHolder(t, hbPath)]
		return i, ok
	}
	since := func(from time.Time) []time.Time {
		mu.Lock()
		defer mu.Unlock()
		var out []time.Time
		for _, c := range touches {
			if !c.Before(from) {
				out = append(out, c)
			}
		}
		return out
	}

	// Steady state: one refresh per interval for the host.
	start := time.Now()
	time.Sleep(20 * interval)
	n, elapsed := len(since(start)), time.Since(start)
	per := float64(elapsed) / float64(interval)
	assert.LessOrEqual(t, float64(n), 1.1*per+1, "%d processes sent %d heartbeats in %v (interval %v): want one per interval for the host", procs, n, elapsed, interval)
	assert.GreaterOrEqual(t, float64(n), per/2, "the host's heartbeat runs: %d in %v", n, elapsed)

	// The holder stops without exiting (SIGSTOP): it keeps the role, and
	// the others refresh last-seen by the fallback until it continues.
	h, ok := holder()
	require.True(t, ok, "no live child holds the heartbeat role (holder pid %d)", flockHolder(t, hbPath))
	require.NoError(t, children[h].cmd.Process.Signal(syscall.SIGSTOP))
	stopped := time.Now()
	time.Sleep(8 * interval)
	n = len(since(stopped))
	require.NoError(t, children[h].cmd.Process.Signal(syscall.SIGCONT))
	assert.GreaterOrEqual(t, n, 3, "while the holder was stopped for 8 intervals, the host refreshed %d times", n)
	time.Sleep(2 * interval)

	for round, how := range []string{"kill", "exit", "kill"} {
		h, ok := holder()
		require.True(t, ok, "round %d: no live child holds the heartbeat role (holder pid %d)", round, flockHolder(t, hbPath))
		if how == "kill" {
			children[h].kill()
		} else {
			require.NoError(t, children[h].stdin.Close())
			<-children[h].done
			err := children[h].cmd.Wait()
			require.NoError(t, err, "round %d: the child's Close: %s", round, children[h].stderr.String())
		}
		// From the moment the holder is gone (a Close may take a while
		// on a loaded machine: it returns the reservation first).
		gone := time.Now()
		children[h] = nil
		var next int
		for time.Since(gone) < 30*time.Second {
			if next, ok = holder(); ok {
				break
			}
			time.Sleep(time.Millisecond)
		}
		took := time.Since(gone)
		require.True(t, ok, "round %d: no process took the heartbeat after the holder's %s", round, how)
		assert.NotEqual(t, h, next)
		assert.LessOrEqual(t, took, interval, "round %d: the role was taken %v after the holder's %s (interval %v)", round, took, how, interval)
		require.Eventually(t, func() bool { return len(since(gone)) > 0 }, 30*time.Second, time.Millisecond,
			"round %d: last-seen not refreshed after the holder's %s", round, how)
		time.Sleep(5 * interval)
	}

	// Over the whole run, no gap between refreshes reached what makes a
	// claim look gone; the fallback bounds it at an interval and a half
	// plus a poll. Slack for a loaded machine: one more interval.
	all := since(start)
	for i := 1; i < len(all); i++ {
		assert.Less(t, all[i].Sub(all[i-1]), 2*interval+interval/2, "refreshes %d and %d were %v apart", i-1, i, all[i].Sub(all[i-1]))
	}
	row, ok := reg.Row("web_1")
	require.True(t, ok)
	assert.Equal(t, registry.StateActive, row.State, fmt.Sprintf("%+v", row))
}
