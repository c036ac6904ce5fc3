package engine_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// releaseRegistries are the registries the release tests run on here:
// the in-memory one (snapid/cassandra runs them on the real Cassandra).
func releaseRegistries(*testing.T) map[string]func(t *testing.T) registry.Registry {
	return map[string]func(t *testing.T) registry.Registry{
		"memory": func(*testing.T) registry.Registry { return registrytest.NewRegistry() },
	}
}

// After a crash the counter is below the mark the host reserved (and
// another process of the host may have reserved further in the registry,
// dying before it wrote the mark file): Release records a final value at
// or above the registry's mark, so the next holder starts above anything
// this host may have issued.
func TestReleaseAfterCrashCoversTheMark(t *testing.T) {
	t.Parallel()
	for what, newReg := range releaseRegistries(t) {
		t.Run(what, func(t *testing.T) {
			reg := newReg(t)
			ctx := t.Context()
			path := filepath.Join(t.TempDir(), "counter.u64")
			g := openReg(t, path, "web_1", reg, WithReserveStep(100), WithOutageHorizon(0))
			draw(t, g, 7)
			crash(t, g) // gone without Close: the reservation is not returned

			h, err := reg.Get(ctx, "web_1")
			require.NoError(t, err)
			require.Greater(t, h.Reserved, uint64(7), "the registry's mark is above the counter")
			h, err = reg.Extend(ctx, "web_1", h.Owner, h.Session, h.Reserved, h.Reserved+200)
			require.NoError(t, err)
			mark := h.Reserved
			last, err := ReadCounter(path)
			require.NoError(t, err)
			require.Less(t, last, mark)

			final, err := Release(ctx, path, "web_1", WithRegistry(reg))
			require.NoError(t, err)
			assert.GreaterOrEqual(t, final, mark)
			got, err := reg.Get(ctx, "web_1")
			require.NoError(t, err)
			assert.Equal(t, registry.StateReleased, got.State)
			assert.Equal(t, final, got.Reserved)
		})
	}
}

// A forced release on behalf of a holder that crashed records at least the
// holder's mark, whatever next is given.
func TestForceReleaseKeepsTheHoldersMark(t *testing.T) {
	t.Parallel()
	for what, newReg := range releaseRegistries(t) {
		t.Run(what, func(t *testing.T) {
			reg := newReg(t)
			ctx := t.Context()
			dir := t.TempDir()
			g := openReg(t, filepath.Join(dir, "a.u64"), "web_1", reg, WithReserveStep(100), WithOutageHorizon(0))
			draw(t, g, 3)
			crash(t, g)
			h, err := reg.Get(ctx, "web_1")
			require.NoError(t, err)
			require.GreaterOrEqual(t, h.Reserved, uint64(100), "the holder reserved up to 100")

			final, err := ForceRelease(ctx, reg, "web_1", 3)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, final, h.Reserved)
			got, err := reg.Get(ctx, "web_1")
			require.NoError(t, err)
			assert.Equal(t, registry.StateReleased, got.State)
			assert.Equal(t, final, got.Reserved)

			// The next holder starts above the crashed holder's mark.
			b := openReg(t, filepath.Join(dir, "b.u64"), "web_1", reg, WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}), WithBindingDir(t.TempDir()))
			defer b.Close()
			v, err := b.Next()
			require.NoError(t, err)
			assert.Greater(t, v, h.Reserved)

			// A larger next wins over the mark.
			require.NoError(t, b.Close())
			final, err = ForceRelease(ctx, reg, "web_1", h.Reserved+1000)
			require.NoError(t, err)
			assert.Equal(t, h.Reserved+999, final)
		})
	}
}

// A release is final on the host: its processes refuse the name until it
// is claimed again on purpose (WithReclaim), so a routine restart cannot
// take back a name released for another host. Refused, nothing changes in
// the registry or in the counter.
func TestReleaseIsFinalOnTheHost(t *testing.T) {
	t.Parallel()
	for what, newReg := range releaseRegistries(t) {
		t.Run(what, func(t *testing.T) {
			reg := newReg(t)
			ctx := t.Context()
			path := filepath.Join(t.TempDir(), "counter.u64")
			g := openReg(t, path, "web_1", reg)
			draw(t, g, 4)
			require.NoError(t, g.Close())
			_, err := Release(ctx, path, "web_1", WithRegistry(reg))
			require.NoError(t, err)
			before, err := reg.Get(ctx, "web_1")
			require.NoError(t, err)
			require.Equal(t, registry.StateReleased, before.State)

			_, err = Open(path, "web_1", WithRegistry(reg), WithSync(false), WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"}))
			require.ErrorIs(t, err, ErrReleased)
			assert.Contains(t, err.Error(), "web_1")
			after, err := reg.Get(ctx, "web_1")
			require.NoError(t, err)
			assert.Equal(t, before, after, "the refused start changed nothing in the registry")
			assert.Equal(t, uint64(4), ctValue(t, path), "nor the counter")

			// Another host may now take it; or this host claims it back
			// on purpose, after which routine starts work again.
			g = openReg(t, path, "web_1", reg, WithReclaim())
			assert.Equal(t, []uint64{5}, draw(t, g, 1))
			require.NoError(t, g.Close())
			g = openReg(t, path, "web_1", reg)
			assert.Equal(t, []uint64{6}, draw(t, g, 1))
			require.NoError(t, g.Close())
		})
	}
}

// The host records the release before asking the registry, so a release
// whose outcome is not known (the registry failed) leaves the host
// refusing the name too.
func TestReleaseRecordedBeforeTheRegistry(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "counter.u64")
	g := openReg(t, path, "web_1", reg)
	draw(t, g, 1)
	require.NoError(t, g.Close())
	reg.SetHook(func(_ context.Context, op, _ string) error {
		if op == "release" {
			return ErrRegistry
		}
		return nil
	})
	_, err := Release(ctx, path, "web_1", WithRegistry(reg))
	require.ErrorIs(t, err, ErrRegistry)
	reg.SetHook(nil)
	_, err = Open(path, "web_1", WithRegistry(reg), WithSync(false))
	require.ErrorIs(t, err, ErrReleased)
}

// A program without the registry shows only in the host's record: Release
// waits for it to stop (ErrInUse), and then records a last number at or
// above everything it may have handed out, its record's mark included.
func TestReleaseRefusedWhileAProgramWithoutTheRegistryRuns(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "counter.u64")
	g := openReg(t, path, "web_1", reg)
	draw(t, g, 3)
	require.NoError(t, g.Close())
	plain, err := Open(path, "web_1")
	require.NoError(t, err)
	got := draw(t, plain, 2)
	_, err = Release(ctx, path, "web_1", WithRegistry(reg))
	require.ErrorIs(t, err, ErrInUse)
	row, err := reg.Get(ctx, "web_1")
	require.NoError(t, err)
	require.NotEqual(t, registry.StateReleased, row.State, "refused: nothing changed")
	crash(t, plain) // its record's mark stays a step ahead
	final, err := Release(ctx, path, "web_1", WithRegistry(reg))
	require.NoError(t, err)
	require.GreaterOrEqual(t, final, got[len(got)-1]+1000, "the mark of the crashed program is covered")
}

func TestReleaseBoundedWhenCounterLocked(t *testing.T) {
	t.Parallel()
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
