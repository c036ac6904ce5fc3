package snapid_test

// Adversarial review of the one-heartbeat-per-host design (heartbeat.go).
// Each test states the guarantee it attacks; a failure is a finding.

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/snapidtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Guarantee 2 ("about one refresh per interval"). A time in the future in
// the record's "last" is kept by max() on every success, so the holder
// finds the refresh always due and sends one at every poll: four per
// interval, for as long as the clock was set back (or forever, for a
// damaged record whose "last" is far in the future). On the host's fake
// clock, set back an hour for the first case.
func TestHeartbeatReviewFutureLastRefreshesEveryPoll(t *testing.T) {
	const interval = 10 * time.Second
	for _, how := range []string{"clock set back an hour", "record's last damaged into the future"} {
		t.Run(how, func(t *testing.T) {
			reg := snapidtest.NewRegistry()
			fh := newFakeHost(t, nil)
			_, path := ctPath(t)
			opts := []Option{WithHeartbeat(interval), WithCloneWindow(0), WithReserveStep(1 << 20)}
			for range 3 {
				g := fh.open(path, "web_1", reg, opts...)
				defer g.Close()
			}
			fh.run(3*interval, interval/4, nil)
			if how == "clock set back an hour" {
				fh.clk.Advance(-time.Hour)
			} else {
				b, err := os.ReadFile(path + ".heartbeat")
				require.NoError(t, err)
				require.Len(t, b, 40)
				binary.LittleEndian.PutUint64(b[16:], uint64(fh.clk.Now().AddDate(50, 0, 0).UnixNano()))
				require.NoError(t, os.WriteFile(path+".heartbeat", b, 0o600))
			}
			calls := logCalls(reg)
			fh.run(15*interval, interval/4, nil)
			per := float64(calls.count("touch")) / 15
			assert.LessOrEqual(t, per, 1.5, "%s: the host sends %.1f refreshes per interval", how, per)
		})
	}
}

// Guarantee 2 ("about one refresh per interval"), the case the 50 ms bound
// was made for: a process stopped while it holds the record's byte lock
// (here a read lock, which needs only read access to the file). No update
// lands any more, so "last" and "tried" stay old and every process refreshes
// at every poll it is not busy waiting for the lock.
func TestHeartbeatReviewRecordLockHeldStorm(t *testing.T) {
	const interval = 10 * time.Second
	reg := snapidtest.NewRegistry()
	fh := newFakeHost(t, nil)
	_, path := ctPath(t)
	for range 4 {
		g := fh.open(path, "web_1", reg, WithHeartbeat(interval), WithCloneWindow(0), WithReserveStep(1<<20))
		defer fh.close(g)
	}
	fh.run(interval, interval/4, nil)
	f, err := os.Open(path + ".heartbeat")
	require.NoError(t, err)
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: 0, Start: 0, Len: 40}
	// The processes hold the write lock for an update's length now and
	// then: try until it is free.
	require.Eventually(t, func() bool { return unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk) == nil }, 5*time.Second, time.Millisecond)
	calls := logCalls(reg)
	fh.run(8*interval, interval/4, nil)
	per := float64(calls.count("touch")) / 8
	assert.LessOrEqual(t, per, 1.5, "with the record's byte lock held, 4 processes send %.1f refreshes per interval", per)
}

// Guarantee 2 and the doc ("a damaged record reads as none, the next poll
// refreshes"): a record with trailing bytes is never repaired (updates
// write 40 bytes in place, never truncate), so it reads as none forever:
// every process refreshes at every poll, and every join reads the registry.
func TestHeartbeatReviewLongRecordNeverRepaired(t *testing.T) {
	const interval = 10 * time.Second
	reg := snapidtest.NewRegistry()
	fh := newFakeHost(t, nil)
	_, path := ctPath(t)
	for range 3 {
		g := fh.open(path, "web_1", reg, WithHeartbeat(interval), WithCloneWindow(0), WithReserveStep(1<<20))
		defer fh.close(g)
	}
	fh.run(2*interval, interval/4, nil)
	f, err := os.OpenFile(path+".heartbeat", os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write([]byte{0})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	calls := logCalls(reg)
	fh.run(15*interval, interval/4, nil)
	per := float64(calls.count("touch")) / 15
	st, err := os.Stat(path + ".heartbeat")
	require.NoError(t, err)
	assert.EqualValues(t, 40, st.Size(), "the damaged record was never repaired")
	assert.LessOrEqual(t, per, 1.5, "behind a 41-byte record, 3 processes send %.1f refreshes per interval", per)
}

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
