package snapid_test

import (
	"runtime"
	"sync"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Stats, with the heartbeat's last refresh, is safe racing Close and
// after it.
func TestHeartbeatStatsAfterClose(t *testing.T) {
	reg := registrytest.NewRegistry()
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

// The heartbeat's goroutines of closed and crashed Generators end.
func TestHeartbeatNoGoroutineLeak(t *testing.T) {
	reg := registrytest.NewRegistry()
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
