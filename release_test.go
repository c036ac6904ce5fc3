package snapid_test

import (
	"path/filepath"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/snapidtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// releaseRegistries are the registries the release tests run on here:
// the in-memory one (snapid/cassandra runs them on the real Cassandra).
func releaseRegistries(*testing.T) map[string]func(t *testing.T) Registry {
	return map[string]func(t *testing.T) Registry{
		"memory": func(*testing.T) Registry { return snapidtest.NewRegistry() },
	}
}

// After a crash the counter is below the mark the host reserved (and
// another process of the host may have reserved further in the registry,
// dying before it wrote the mark file): Release records a final value at
// or above the registry's mark, so the next holder starts above anything
// this host may have issued.
func TestReleaseAfterCrashCoversTheMark(t *testing.T) {
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
			assert.Equal(t, StateReleased, got.State)
			assert.Equal(t, final, got.Reserved)
		})
	}
}

// A forced release on behalf of a holder that crashed records at least the
// holder's mark, whatever next is given.
func TestForceReleaseKeepsTheHoldersMark(t *testing.T) {
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
			assert.Equal(t, StateReleased, got.State)
			assert.Equal(t, final, got.Reserved)

			// The next holder starts above the crashed holder's mark.
			b := openReg(t, filepath.Join(dir, "b.u64"), "web_1", reg, WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}))
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
