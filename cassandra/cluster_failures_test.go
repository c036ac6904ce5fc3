package cassandra

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClusterNodeFailures kills nodes of the three: with one
// replica of three down (and noticed by the others), claims, extensions, heartbeats and releases
// succeed; with two down (no quorum) they fail with snapid.ErrRegistry, a
// process that has not claimed issues nothing, and a running Generator
// goes on up to its mark, then stops with ErrReservationExhausted, and
// resumes above it, without a repeat, once the nodes are back.
func TestClusterNodeFailures(t *testing.T) {
	e := newClusterEnv(t)
	reg := e.registry(t)
	dir := t.TempDir()
	pathA, pathB, pathC := filepath.Join(dir, "a.u64"), filepath.Join(dir, "b.u64"), filepath.Join(dir, "c.u64")
	const step = 20

	// Calls with the quorum lost fail only at their deadline (an unknown
	// outcome is read at SERIAL until then): a short one keeps the test
	// short; with a node down, calls take well under it.
	const lostTimeout = 8 * time.Second
	gA, err := openGen(t, pathA, "fail_a", reg, step, registryTimeout(lostTimeout))
	require.NoError(t, err)
	defer gA.Close()
	issued := map[uint64]bool{}
	next := func() (uint64, error) {
		v, err := gA.Next()
		if err == nil {
			require.False(t, issued[v], "fail_a-%d issued twice", v)
			issued[v] = true
		}
		return v, err
	}
	for range 5 {
		_, err := next()
		require.NoError(t, err)
	}
	ctx := t.Context()
	timed := func(what string, f func() error) error {
		start := time.Now()
		err := f()
		t.Logf("%s: %v after %s", what, err, time.Since(start).Round(time.Millisecond))
		return err
	}

	// One node of three down. Right after the kill, until the failure
	// detectors of the others convict it (about 10 s here), a coordinator
	// may still wait for it: a statement then takes up to the server's
	// timeout and may fail ("received only 0 responses" from a serial
	// read), as any registry error (Generators try again). The guarantee
	// is for a node known to be down.
	e.c.Kill(t, 3)
	t.Logf("node 3 (%s) killed", e.c.Addr(3))
	e.c.WaitSeesDown(t, 1, 1, 2)

	var gB *snapid.Generator
	require.NoError(t, timed("one down: claim fail_b", func() (err error) {
		gB, err = openGen(t, pathB, "fail_b", reg, step)
		return err
	}))
	id, err := gB.UniqueID()
	require.NoError(t, err)
	assert.Equal(t, "fail_b-1", id)

	before, err := reg.Get(ctx, "fail_a")
	require.NoError(t, err)
	require.NoError(t, timed("one down: extensions past two steps of fail_a", func() error {
		for range 2 * step {
			if _, err := next(); err != nil {
				return err
			}
		}
		return nil
	}))
	after, err := reg.Get(ctx, "fail_a")
	require.NoError(t, err)
	assert.Greater(t, after.Reserved, before.Reserved, "the mark moved with a node down")
	assert.GreaterOrEqual(t, after.Reserved, uint64(5+2*step))

	require.NoError(t, timed("one down: heartbeat of fail_a", func() error {
		return reg.Touch(ctx, "fail_a", after.Owner, after.Session)
	}))
	touched, err := reg.Get(ctx, "fail_a")
	require.NoError(t, err)
	assert.True(t, touched.LastSeen.After(before.LastSeen), "last seen refreshed")

	require.NoError(t, gB.Close())
	require.NoError(t, timed("one down: release fail_b", func() error {
		_, err := admin.Release(ctx, reg, pathB, "fail_b", admin.WithBindingDir(hostRecords(t, pathB))) // openGen's host of pathB
		return err
	}))
	hB, err := reg.Get(ctx, "fail_b")
	require.NoError(t, err)
	assert.Equal(t, registry.StateReleased, hB.State)
	assert.Equal(t, uint64(1), hB.Reserved, "the final value recorded")

	// Two of three down: no quorum. Let any extension in flight settle,
	// then wait until node 1 has convicted both, so that every statement
	// fails at once (Unavailable) instead of after the server's timeout.
	settled := waitMarkSettled(t, reg, "fail_a")
	e.c.Kill(t, 2)
	t.Logf("node 2 (%s) killed too; fail_a's mark is %d", e.c.Addr(2), settled)
	e.c.WaitSeesDown(t, 2, 1)

	err = timed("quorum lost: claim fail_c", func() error {
		g, err := openGen(t, pathC, "fail_c", reg, step, registryTimeout(lostTimeout))
		if err == nil {
			g.Close()
		}
		return err
	})
	require.ErrorIs(t, err, snapid.ErrRegistry)
	assert.Zero(t, counterOf(t, pathC), "a process that has not claimed issues nothing")

	err = timed("quorum lost: heartbeat of fail_a", func() error {
		ctx, cancel := context.WithTimeout(ctx, lostTimeout)
		defer cancel()
		return reg.Touch(ctx, "fail_a", after.Owner, after.Session)
	})
	require.ErrorIs(t, err, snapid.ErrRegistry)
	err = timed("quorum lost: release fail_b again", func() error {
		ctx, cancel := context.WithTimeout(ctx, lostTimeout)
		defer cancel()
		return reg.Release(ctx, "fail_b", hB.Owner, 1)
	})
	require.ErrorIs(t, err, snapid.ErrRegistry)
	err = timed("quorum lost: extension of fail_a", func() error {
		ctx, cancel := context.WithTimeout(ctx, lostTimeout)
		defer cancel()
		_, err := reg.Extend(ctx, "fail_a", after.Owner, after.Session, settled, settled+step)
		return err
	})
	require.ErrorIs(t, err, snapid.ErrRegistry)

	// The running Generator issues every number up to its mark, then stops.
	last := uint64(0)
	for {
		v, err := next()
		if err != nil {
			t.Logf("quorum lost: fail_a stops after %d: %v", last, err)
			require.ErrorIs(t, err, snapid.ErrReservationExhausted)
			require.ErrorIs(t, err, snapid.ErrRegistry)
			break
		}
		require.LessOrEqual(t, v, settled, "nothing above the registry's mark")
		last = v
	}
	assert.Equal(t, settled, last, "it went on up to its mark")
	assert.Equal(t, settled, ctValue(t, pathA))

	// The nodes come back: issuance resumes above the mark, claims work.
	var wg sync.WaitGroup
	for _, i := range []int{2, 3} {
		wg.Add(1)
		go func() { defer wg.Done(); e.c.Start(t, i) }()
	}
	wg.Wait()
	require.False(t, t.Failed())
	e.c.WaitAllUp(t)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		v, err := next()
		if err == nil {
			assert.Equal(t, settled+1, v, "resumes where it stopped")
			break
		}
		require.ErrorIs(t, err, snapid.ErrReservationExhausted)
		require.True(t, time.Now().Before(deadline), "no ids two minutes after the nodes came back: %v", err)
		time.Sleep(500 * time.Millisecond)
	}
	gC, err := openGen(t, pathC, "fail_c", reg, step)
	require.NoError(t, err, "claims work again")
	id, err = gC.UniqueID()
	require.NoError(t, err)
	assert.Equal(t, "fail_c-1", id)
	require.NoError(t, gC.Close())
}

// waitMarkSettled returns name's mark once it has stayed the same for a
// second (a background extension may be in flight).
func waitMarkSettled(t *testing.T, reg *Registry, name string) uint64 {
	t.Helper()
	var prev uint64
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		h, err := reg.Get(ctx, name)
		cancel()
		require.NoError(t, err)
		if i > 0 && h.Reserved == prev {
			return prev
		}
		require.Less(t, i, 30, "the mark of %q keeps moving", name)
		prev = h.Reserved
		time.Sleep(time.Second)
	}
}
