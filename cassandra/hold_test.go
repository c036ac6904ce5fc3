package cassandra

import (
	"path/filepath"
	"testing"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// admin.Release and admin.ForceRelease on the real Cassandra, after a
// holder killed with SIGKILL (a child process) while it held a reservation.

// After a crash the counter is below the mark the host reserved (and
// another process of the host may have reserved further in the registry,
// dying before it wrote the mark file): Release records a final value at
// or above the registry's mark, so the next holder starts above anything
// this host may have issued.
func TestReleaseAfterCrashCoversTheMark(t *testing.T) {
	ks, ctx, reg := oneRegistry(t)
	path := filepath.Join(t.TempDir(), "counter.u64")
	crashedHost(t, ks, path, "web_1", 100, 7, "m1")

	h, err := reg.Get(ctx, "web_1")
	require.NoError(t, err)
	require.Greater(t, h.Reserved, uint64(7), "the registry's mark is above the counter")
	h, err = reg.Extend(ctx, "web_1", h.Owner, h.Session, h.Reserved, h.Reserved+200)
	require.NoError(t, err)
	mark := h.Reserved
	require.Less(t, ctValue(t, path), mark)

	final, err := admin.Release(ctx, reg, path, "web_1", admin.WithBindingDir(hostRecords(t, "m1"))) // the crashed host's
	require.NoError(t, err)
	assert.GreaterOrEqual(t, final, mark)
	got, err := reg.Get(ctx, "web_1")
	require.NoError(t, err)
	assert.Equal(t, registry.StateReleased, got.State)
	assert.Equal(t, final, got.Reserved)
}

// A forced release on behalf of a holder that crashed records at least the
// holder's mark, whatever next is given.
func TestForceReleaseKeepsTheHoldersMark(t *testing.T) {
	ks, ctx, reg := oneRegistry(t)
	dir := t.TempDir()
	crashedHost(t, ks, filepath.Join(dir, "a.u64"), "web_1", 100, 3, "m1")
	h, err := reg.Get(ctx, "web_1")
	require.NoError(t, err)
	require.GreaterOrEqual(t, h.Reserved, uint64(100), "the holder reserved up to 100")

	final, err := admin.ForceRelease(ctx, reg, "web_1", 3)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, final, h.Reserved)
	got, err := reg.Get(ctx, "web_1")
	require.NoError(t, err)
	assert.Equal(t, registry.StateReleased, got.State)
	assert.Equal(t, final, got.Reserved)

	// The next holder starts above the crashed holder's mark.
	b, err := snapid.Open(filepath.Join(dir, "b.u64"), "web_1", snapid.Config{
		Registry:   &snapid.RegistryConfig{Registry: reg, Host: snapid.HostInfo{Hostname: "h2", MachineID: "m2"}},
		BindingDir: hostRecords(t, "m2"),
	})
	require.NoError(t, err)
	defer b.Close()
	v, err := b.Next()
	require.NoError(t, err)
	assert.Greater(t, v, h.Reserved)

	// A larger next wins over the mark.
	require.NoError(t, b.Close())
	final, err = admin.ForceRelease(ctx, reg, "web_1", h.Reserved+1000)
	require.NoError(t, err)
	assert.Equal(t, h.Reserved+999, final)
}
