package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/snapid/snapid/internal/claim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A process whose heartbeat file was removed and made again by another
// process rejoins the file at the path: the role it held on the old file
// goes, and what the old record said for its session (times, "taken") is
// carried into the new one, so that a take-over written just before the
// file was replaced is not lost to the processes on the new file.
func TestRejoinHeartbeatCarriesRecordAndRole(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.u64")
	o := defaultOptions()
	a, err := claim.OpenFiles(path, o.claimFiles())
	require.NoError(t, err)
	defer a.Close()
	require.NoError(t, a.EnsureHeartbeat())
	require.True(t, a.TryHeartbeatRole())
	mine := claim.SessionHash("session-1")
	old := claim.Heartbeat{Session: mine, Last: 1_000, Tried: 2_000, Taken: true}
	require.NoError(t, a.WriteHeartbeat(old))
	replaced, err := a.RejoinHeartbeat(mine)
	require.NoError(t, err)
	require.False(t, replaced, "the file at the path is the one open")

	require.NoError(t, os.Remove(path+claim.HeartbeatSuffix))
	b, err := claim.OpenFiles(path, o.claimFiles())
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.EnsureHeartbeat()) // a new, empty file
	require.NoError(t, b.WriteHeartbeat(claim.Heartbeat{Session: mine, Last: 1_500, Tried: 1_500}))
	assert.True(t, b.TryHeartbeatRole(), "two holders: one per file")

	replaced, err = a.RejoinHeartbeat(mine)
	require.NoError(t, err)
	require.True(t, replaced)
	got, ok := b.ReadHeartbeat()
	require.True(t, ok)
	assert.Equal(t, claim.Heartbeat{Session: mine, Last: 1_500, Tried: 2_000, Taken: true}, got,
		"the later times of both records and the old record's take-over")
	mineNow, ok := a.ReadHeartbeat()
	require.True(t, ok)
	assert.Equal(t, got, mineNow, "both processes read one record")
	assert.False(t, a.TryHeartbeatRole(), "the role is the new file's holder's")
	b.DropHeartbeatRole()
	assert.True(t, a.TryHeartbeatRole(), "the process that rejoined can take the role on the new file")

	replaced, err = a.RejoinHeartbeat(mine)
	require.NoError(t, err)
	assert.False(t, replaced)
}
