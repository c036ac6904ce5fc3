package snapid_test

// Adversarial review of the one-heartbeat-per-host design (heartbeat.go).
// Each test states the guarantee it attacks; a failure is a finding.

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/snapidtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Guarantee 3 (as documented: "every process of the host stops issuing at
// its next poll"), when the take-over is learned by an extension rather
// than a refresh: it is not written to the record, and the process that
// learned it stops its heartbeat while keeping the role, so the others go
// on issuing for about an interval and a half.
func TestHeartbeatReviewTakeoverLearnedByExtendNotShared(t *testing.T) {
	const interval = 10 * time.Second
	reg := snapidtest.NewRegistry()
	fh := newFakeHost(t, nil)
	dir := t.TempDir()
	path := filepath.Join(dir, "a", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(path), 0o755))
	opts := []Option{WithHeartbeat(interval), WithCloneWindow(0), WithReserveStep(1 << 20)}
	A := fh.open(path, "web_1", reg, opts...)
	defer fh.close(A)
	fh.until(interval/4, 8, A.ExportHeartbeatHolder, "the first process never took the heartbeat role")
	B := fh.open(path, "web_1", reg, opts...)
	defer fh.close(B)
	other := filepath.Join(dir, "b", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(other), 0o755))
	// Take over just after the host's refresh: the test does not depend on
	// where in the interval it falls.
	calls := logCalls(reg)
	n := calls.count("touch")
	fh.until(interval/4, 12, func() bool { return calls.count("touch") > n }, "the host did not refresh")
	taker, err := Open(other, "web_1", WithRegistry(reg), WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}), WithTakeover(0), WithSync(false), WithCloneWindow(0))
	require.NoError(t, err)
	defer taker.Close()
	mark, _, err := ReadMark(path)
	require.NoError(t, err)
	require.ErrorIs(t, A.ExportExtend(context.Background(), mark+1), ErrNameTaken)
	_, err = A.Next()
	require.ErrorIs(t, err, ErrNameTaken)
	fh.step(interval / 4) // two of B's polls
	fh.step(interval / 4)
	_, err = B.Next()
	assert.ErrorIs(t, err, ErrNameTaken, "B still issues two polls after A learned of the take-over")
}

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
