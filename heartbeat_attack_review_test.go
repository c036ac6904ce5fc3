package snapid_test

// Adversarial review of the one-heartbeat-per-host design (heartbeat.go).
// Each test states the guarantee it attacks; a failure is a finding.

import (
	"os"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/snapidtest"
	"github.com/stretchr/testify/require"
)

// Guarantee 5 / the message "nothing was changed": a refused Open (a
// second name on a counter) creates <counter>.heartbeat when it is
// missing (a counter last used by an earlier version).
func TestHeartbeatReviewRefusedOpenCreatesHeartbeatFile(t *testing.T) {
	reg := snapidtest.NewRegistry()
	dir, path := ctPath(t)
	g := openReg(t, path, "web_a", reg, WithCloneWindow(0))
	require.NoError(t, g.Close())
	require.NoError(t, os.Remove(path+".heartbeat"))
	before := testfs.Snapshot(t, dir)
	_, err := Open(path, "web_b", WithRegistry(reg), WithSync(false), WithCloneWindow(0), WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"}))
	require.ErrorIs(t, err, ErrNameMismatch)
	t.Logf("%v", err)
	testfs.RequireUnchanged(t, dir, before)
}

// Held: a heartbeat file that belongs to another user is refused at Open,
// promptly, and nothing changes.
func TestHeartbeatReviewOtherUsersHeartbeatRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	reg := snapidtest.NewRegistry()
	dir, path := ctPath(t)
	g := openReg(t, path, "web_1", reg, WithCloneWindow(0))
	require.NoError(t, g.Close())
	require.NoError(t, os.Chown(path+".heartbeat", nobody, nobody))
	before := testfs.Snapshot(t, dir)
	done := make(chan error, 1)
	go func() {
		g, err := Open(path, "web_1", WithRegistry(reg), WithSync(false), WithCloneWindow(0), WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"}))
		if err == nil {
			g.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		require.Error(t, err)
		t.Log(err)
	case <-time.After(5 * time.Second):
		t.Fatal("Open hangs")
	}
	testfs.RequireUnchanged(t, dir, before)
}
