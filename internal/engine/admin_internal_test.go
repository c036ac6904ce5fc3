package engine

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// An operator's raise is durable whatever sync the programs run with: a
// power cut taking it would bring back what it raised the counter past.
func TestInitRaiseIsSyncedWithSyncOff(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "counter.u64")
	_, err := Init(path, 1)
	require.NoError(t, err)
	x := &ctFaultIO{}
	before, err := Init(path, 1000, WithSync(false), withIO(x))
	require.NoError(t, err)
	require.Zero(t, before)
	require.Equal(t, uint64(999), x.durable.Load(), "the raise was synced")
}
