package snapid_test

import (
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/snapidtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Something planted at <counter>.heartbeat: Open refuses promptly.
func TestHeartbeatAttackHeartbeatPlanted(t *testing.T) {
	for _, what := range []string{"fifo", "symlink", "dir"} {
		t.Run(what, func(t *testing.T) {
			reg := snapidtest.NewRegistry()
			dir, path := ctPath(t)
			g := openReg(t, path, "web_1", reg, WithCloneWindow(0))
			require.NoError(t, g.Close())
			hb := path + ".heartbeat"
			require.NoError(t, os.Remove(hb))
			switch what {
			case "fifo":
				require.NoError(t, syscall.Mkfifo(hb, 0o600))
			case "symlink":
				require.NoError(t, os.WriteFile(dir+"/elsewhere", nil, 0o600))
				require.NoError(t, os.Symlink(dir+"/elsewhere", hb))
			case "dir":
				require.NoError(t, os.Mkdir(hb, 0o700))
			}
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
				assert.Error(t, err)
				t.Logf("%s: %v", what, err)
			case <-time.After(5 * time.Second):
				t.Fatal("Open hangs")
			}
		})
	}
}

// Stats racing Close, and after it.
func TestHeartbeatAttackStatsAfterClose(t *testing.T) {
	reg := snapidtest.NewRegistry()
	_, path := ctPath(t)
	for range 20 {
		g := openReg(t, path, "web_1", reg, WithCloneWindow(0), WithHeartbeat(5*time.Millisecond))
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				_ = g.Stats()
			}
		}()
		require.NoError(t, g.Close())
		wg.Wait()
		st := g.Stats()
		if st.Registry != nil {
			_ = st.Registry.LastHeartbeat
		}
	}
}

func TestHeartbeatAttackNoGoroutineLeak(t *testing.T) {
	reg := snapidtest.NewRegistry()
	_, path := ctPath(t)
	time.Sleep(50 * time.Millisecond)
	before := runtimeNumGoroutine()
	for i := range 30 {
		g := openReg(t, path, "web_1", reg, WithCloneWindow(0), WithHeartbeat(4*time.Millisecond))
		time.Sleep(3 * time.Millisecond)
		if i%2 == 0 {
			require.NoError(t, g.Close())
		} else {
			crash(t, g)
		}
	}
	// Closed and crashed Generators' goroutines end promptly; a bound of
	// seconds for a busy machine.
	assert.Eventually(t, func() bool { return runtimeNumGoroutine() <= before+1 }, 10*time.Second, 10*time.Millisecond,
		"goroutines: %d before, %d after", before, runtimeNumGoroutine())
}

var runtimeNumGoroutine = runtime.NumGoroutine

// A process that holds the heartbeat record's byte lock and does not let
// go (stopped by SIGSTOP mid-update, a write hung on the disk) does not
// stop the host's refreshes of last-seen: updates of the record give up
// after a bound, and the refresh is sent without them.
func TestHeartbeatAttackRecordLockHeld(t *testing.T) {
	const interval = 10 * time.Second
	reg := snapidtest.NewRegistry()
	fh := newFakeHost(t, nil)
	_, path := ctPath(t)
	g := fh.open(path, "web_1", reg, WithCloneWindow(0), WithHeartbeat(interval))
	defer g.Close()
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
