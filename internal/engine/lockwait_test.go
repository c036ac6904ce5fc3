package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockDir is a directory the other user can reach.
func lockDir(t *testing.T) string {
	t.Helper()
	root, err := os.MkdirTemp("", "snapid-lockwait-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	require.NoError(t, os.Chmod(root, 0o755))
	// A level below: the test's own host for the records of names (see
	// export_test.go).
	host := filepath.Join(root, "host")
	require.NoError(t, os.Mkdir(host, 0o755))
	return host
}

// requireLockedWithin runs fn and checks that it returns, within limit,
// an ErrLocked naming the holder.
func requireLockedWithin(t *testing.T, limit time.Duration, fn func() error) {
	t.Helper()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- fn() }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrLocked)
		require.Contains(t, err.Error(), "held by pid")
		t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(limit):
		t.Fatalf("still waiting %v later for another process's flock", limit)
	}
}

func TestSequenceBoundedWhenLeaseFileLocked(t *testing.T) {
	skipShort(t)
	counter := filepath.Join(lockDir(t), "c")
	reg := registrytest.NewRegistry()
	ctx := context.Background()
	_, err := CreateSequence(ctx, reg, "orders", 1, 1000000)
	require.NoError(t, err)
	opts := []Option{WithRegistry(reg), WithFileMode(0o644), WithRegistryTimeout(time.Second)}
	g, err := Open(counter, "vm", opts...)
	require.NoError(t, err)
	s, err := g.Sequence("orders")
	require.NoError(t, err)
	_, err = s.Next()
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, g.Close())

	testfs.HoldFlock(t, counter+".seq.orders")
	g, err = Open(counter, "vm", opts...)
	require.NoError(t, err)
	defer g.Close()
	// Sequence: bounded by the registry timeout (1s).
	requireLockedWithin(t, 4*time.Second, func() error {
		s, err := g.Sequence("orders")
		if err == nil {
			s.Close()
		}
		return err
	})
	// SequenceContext: bounded by ctx.
	requireLockedWithin(t, 4*time.Second, func() error {
		sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		s, err := g.SequenceContext(sctx, "orders")
		if err == nil {
			s.Close()
		}
		return err
	})
}

func TestCloseBoundedWhenCounterLocked(t *testing.T) {
	skipShort(t)
	counter := filepath.Join(lockDir(t), "c")
	reg := registrytest.NewRegistry()
	g, err := Open(counter, "vm", WithRegistry(reg), WithFileMode(0o644), WithRegistryTimeout(time.Second))
	require.NoError(t, err)
	_, err = g.Next()
	require.NoError(t, err)
	testfs.HoldFlock(t, counter)
	requireLockedWithin(t, 4*time.Second, g.Close)
}

func TestReleaseBoundedWhenCounterLocked(t *testing.T) {
	skipShort(t)
	counter := filepath.Join(lockDir(t), "c")
	reg := registrytest.NewRegistry()
	opts := []Option{WithRegistry(reg), WithFileMode(0o644), WithRegistryTimeout(time.Second)}
	g, err := Open(counter, "vm", opts...)
	require.NoError(t, err)
	_, err = g.Next()
	require.NoError(t, err)
	require.NoError(t, g.Close())
	testfs.HoldFlock(t, counter)
	requireLockedWithin(t, 4*time.Second, func() error {
		_, err := Release(context.Background(), counter, "vm", opts...)
		return err
	})
}

func TestAdminCallsBoundedWhenCounterLocked(t *testing.T) {
	counter := filepath.Join(lockDir(t), "c")
	_, err := Init(counter, 10, WithFileMode(0o644))
	require.NoError(t, err)
	testfs.HoldFlock(t, counter)
	ctx := context.Background()
	requireLockedWithin(t, 4*time.Second, func() error {
		c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := ReadCounterContext(c, counter)
		return err
	})
	requireLockedWithin(t, 4*time.Second, func() error {
		c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := InitContext(c, counter, 20)
		return err
	})
	requireLockedWithin(t, 4*time.Second, func() error {
		c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := RepairContext(c, counter, 30)
		return err
	})
	// Nothing changed.
	b, err := os.ReadFile(counter)
	require.NoError(t, err)
	v, err := DecodeCounter(b)
	require.NoError(t, err)
	require.Equal(t, uint64(9), v)
}

func TestRepairBoundedWhenGateLocked(t *testing.T) {
	counter := filepath.Join(lockDir(t), "c")
	reg := registrytest.NewRegistry()
	g, err := Open(counter, "vm", WithRegistry(reg), WithFileMode(0o644))
	require.NoError(t, err)
	require.NoError(t, g.Close())
	gate := counter + ".owner"
	if _, err := os.Stat(counter + ".presence"); err != nil {
		t.Skip("no presence file beside the counter")
	}
	require.NoError(t, os.Chmod(gate, 0o644))
	testfs.HoldFlock(t, gate)
	requireLockedWithin(t, 4*time.Second, func() error {
		c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := RepairContext(c, counter, 30)
		return err
	})
}

// Another user holds the counter's flock (it can read the counter) while
// a caller's update waits for it: the caller leaves at its deadline, and
// Close then returns at once (the update waiting for the lock gives up
// when every caller has left or the Generator closes), without a registry
// and with one, in strict and block mode.
func TestUpdateWaitEndsWithCallersAndClose(t *testing.T) {
	skipShort(t)
	for _, tc := range []struct {
		name string
		reg  bool
		opts []Option
	}{
		{"strict", false, nil},
		{"block", false, []Option{WithBlock(4)}},
		{"strict with registry", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			counter := filepath.Join(lockDir(t), "c")
			opts := append([]Option{WithFileMode(0o644), WithBindingDir(filepath.Join(t.TempDir(), "names"))}, tc.opts...)
			if tc.reg {
				opts = append(opts, WithRegistry(registrytest.NewRegistry()), WithRegistryTimeout(time.Second))
			}
			g, err := Open(counter, "hangtest", opts...)
			require.NoError(t, err)
			testfs.HoldFlock(t, counter)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err = g.NextNContext(ctx, 5)
			require.ErrorIs(t, err, context.DeadlineExceeded)

			done := make(chan error, 1)
			go func() { done <- g.Close() }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Close still waits for an update stuck behind another process's flock")
			}
			// Nothing was taken by the update that gave up.
			b, err := os.ReadFile(counter)
			require.NoError(t, err)
			v, err := DecodeCounter(b)
			require.NoError(t, err)
			require.Zero(t, v)
		})
	}
}

// A caller without a context waits while the lock is held, but Close
// ends its wait: the call returns ErrClosed, and Close returns.
func TestCloseEndsUpdateWaitingForLock(t *testing.T) {
	counter := filepath.Join(lockDir(t), "c")
	g, err := Open(counter, "hangtest", WithFileMode(0o644), WithBindingDir(filepath.Join(t.TempDir(), "names")))
	require.NoError(t, err)
	testfs.HoldFlock(t, counter)
	got := make(chan error, 1)
	go func() { _, err := g.Next(); got <- err }()
	time.Sleep(100 * time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- g.Close() }()
	select {
	case err := <-got:
		require.ErrorIs(t, err, ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("Next still waits after Close")
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close still waits")
	}
}

// The host's start-up gate held by another process (here a lock of this
// test's own, as another process's would be): a registered Open waits at
// most as long as its context, and the error names the holder.
func TestGateWaitBoundedAndNamesHolder(t *testing.T) {
	requireRoot(t)
	// The gate held by another user's process, which could read it
	// (the state files 0644, in a directory it can reach).
	path := filepath.Join(testfs.SharedTempDir(t, "snapid-gate-"), "counter.u64")
	reg := registrytest.NewRegistry()
	opts := []Option{WithRegistry(reg), WithSync(false), WithFileMode(0o644), WithHostInfo(HostInfo{Hostname: "host1", MachineID: "m1"})}
	g, err := Open(path, "web_1", opts...)
	require.NoError(t, err)
	require.NoError(t, g.Close())
	testfs.HoldFlock(t, path+ExportOwnerSuffix)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = OpenContext(ctx, path, "web_1", opts...)
	assert.Less(t, time.Since(start), 3*time.Second)
	require.ErrorIs(t, err, ErrLocked)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "pid ")
	assert.Contains(t, err.Error(), "user nobody", "the holder, another user, is named")
}
