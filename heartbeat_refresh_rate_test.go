package snapid_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// While Touch fails (an overloaded or unreachable registry), one host of
// P processes sends about one Touch per interval, at most two, not one
// per process.
func TestHeartbeatNoTouchStormDuringOutage(t *testing.T) {
	const (
		interval = 10 * time.Second
		procs    = 8
	)
	reg := registrytest.NewRegistry()
	fh := newFakeHost(t, nil)
	_, path := ctPath(t)
	for range procs {
		g := fh.open(path, "web_1", reg, WithHeartbeat(interval), WithCloneWindow(0))
		defer fh.close(g)
	}
	var touches atomic.Int64
	reg.SetHook(func(_ context.Context, op, _ string) error {
		if op == "touch" {
			touches.Add(1)
			return fmt.Errorf("%w: overloaded", ErrRegistry)
		}
		return nil
	})
	fh.run(20*interval, interval/4, nil)
	per := float64(touches.Load()) / 20
	t.Logf("%d processes: %.1f Touch calls per interval while the registry fails them", procs, per)
	assert.LessOrEqual(t, per, float64(procs), "the host sends more Touches during an outage than one per process per interval")
	// The holder backs off to one try per interval, and the others step
	// in only half an interval after the last try (a try that has not
	// come back by then may be a stopped holder's): at most two per
	// interval for the host, whatever its processes.
	assert.LessOrEqual(t, per, 2.2, "the host sends more than about two Touches per interval during an outage")
}

// About one refresh per interval, even when the record's "last" is in the
// future: the clock set back an hour, or a damaged record whose "last" is
// far in the future, does not make the holder find the refresh always due
// (four per interval, one at every poll). On the host's fake clock, set
// back an hour for the first case.
func TestHeartbeatFutureLastOneRefreshPerInterval(t *testing.T) {
	const interval = 10 * time.Second
	for _, how := range []string{"clock set back an hour", "record's last damaged into the future"} {
		t.Run(how, func(t *testing.T) {
			reg := registrytest.NewRegistry()
			fh := newFakeHost(t, nil)
			_, path := ctPath(t)
			opts := []Option{WithHeartbeat(interval), WithCloneWindow(0), WithReserveStep(1 << 20)}
			for range 3 {
				g := fh.open(path, "web_1", reg, opts...)
				defer fh.close(g)
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

// About one refresh per interval while a process stopped holding the
// record's byte lock (here a read lock, which needs only read access to
// the file) keeps every update from landing: "last" and "tried" stay old,
// yet the host's processes do not all refresh at every poll.
func TestHeartbeatRecordLockHeldNoRefreshStorm(t *testing.T) {
	const interval = 10 * time.Second
	reg := registrytest.NewRegistry()
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

// A damaged record reads as none and the next poll refreshes: a record
// with trailing bytes is repaired back to its 40 bytes, so the host's
// processes go back to about one refresh per interval.
func TestHeartbeatLongRecordRepaired(t *testing.T) {
	const interval = 10 * time.Second
	reg := registrytest.NewRegistry()
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

// A process that holds the heartbeat record's byte lock and does not let
// go (stopped by SIGSTOP mid-update, a write hung on the disk) does not
// stop the host's refreshes of last-seen: updates of the record give up
// after a bound, and the refresh is sent without them.
func TestHeartbeatRecordLockHeldRefreshesGoOn(t *testing.T) {
	const interval = 10 * time.Second
	reg := registrytest.NewRegistry()
	fh := newFakeHost(t, nil)
	_, path := ctPath(t)
	g := fh.open(path, "web_1", reg, WithCloneWindow(0), WithHeartbeat(interval))
	defer fh.close(g)
	calls := logCalls(reg)
	fh.until(interval/4, 8, func() bool { return calls.count("touch") > 0 }, "the heartbeat runs")

	// Another open file description's lock on the record's bytes, as a
	// stopped process would hold it.
	f, err := os.OpenFile(path+".heartbeat", os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 40}
	require.NoError(t, unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk))
	before := calls.count("touch")
	fh.run(20*interval, interval/4, nil)
	n := calls.count("touch") - before
	assert.GreaterOrEqual(t, n, 5, "with the record's lock held for 20 intervals, the host refreshed %d times", n)
	_, err = g.Next()
	assert.NoError(t, err, "the process still issues")
	// The lock goes, and the clock moves on, so that an update waiting for
	// the lock ends and Close does not wait for it.
	require.NoError(t, f.Close())
	fh.step(interval / 4)
}
