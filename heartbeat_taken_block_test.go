package snapid_test

import (
	"path/filepath"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A process in block mode that learns its name was taken (from the
// registry, or from the host's heartbeat record) hands out no more ids,
// not even from the block it took from the counter before.
func TestHeartbeatTakenStopsBlockIDs(t *testing.T) {
	const interval = 10 * time.Second
	reg := registrytest.NewRegistry()
	fh := newFakeHost(t, reg)
	dir, path := ctPath(t)
	opts := []Option{WithHeartbeat(interval), WithCloneWindow(0), WithBlock(1000)}
	a := fh.open(path, "web_1", reg, opts...)
	defer a.Close()
	b := fh.open(path, "web_1", reg, opts...)
	defer b.Close()
	for _, g := range []*Generator{a, b} {
		_, err := g.Next() // each takes a block of 1000 from the counter
		require.NoError(t, err)
	}
	taker, err := Open(filepath.Join(dir, "other.u64"), "web_1", WithRegistry(reg),
		WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}), WithBindingDir(t.TempDir()), WithTakeover(0), WithSync(false), WithCloneWindow(0))
	require.NoError(t, err)
	defer taker.Close()
	fh.until(interval/4, 40, func() bool { return !a.ExportHeartbeatRunning() && !b.ExportHeartbeatRunning() },
		"both processes learn of the take-over at their polls")
	for _, g := range []*Generator{a, b} {
		_, err := g.Next()
		assert.ErrorIs(t, err, ErrNameTaken, "an id from the block taken before the take-over was learned")
	}
}
