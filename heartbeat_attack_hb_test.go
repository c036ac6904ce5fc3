package snapid_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/snapidtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flakyTouch is a registry whose Touch alternates: odd calls are applied at
// once and answered just before the caller's deadline (a slow reply), even
// calls time out without being applied.
type flakyTouch struct {
	*snapidtest.Registry
	n      atomic.Int64
	active atomic.Bool
}

func (f *flakyTouch) Touch(ctx context.Context, name, owner, session string) error {
	if !f.active.Load() {
		return f.Registry.Touch(ctx, name, owner, session)
	}
	if f.n.Add(1)%2 == 1 {
		err := f.Registry.Touch(ctx, name, owner, session)
		if d, ok := ctx.Deadline(); ok {
			time.Sleep(time.Until(d) - 10*time.Millisecond)
		}
		return err
	}
	<-ctx.Done()
	return fmt.Errorf("%w: touch timed out", ErrRegistry)
}

// One process, a configuration checkCloneWindow accepts (window = 2 x
// heartbeat + timeout): last-seen must stay within the clone window while
// the process runs, with one slow reply followed by one timed-out Touch
// ("a live holder that misses one heartbeat, the next one late by up to a
// registry timeout").
func TestHeartbeatAttackLastSeenOutlivesCloneWindow(t *testing.T) {
	const (
		hb     = 200 * time.Millisecond
		to     = 300 * time.Millisecond
		window = 2*hb + to
	)
	reg := &flakyTouch{Registry: snapidtest.NewRegistry()}
	_, path := ctPath(t)
	g := openReg(t, path, "web_1", reg, WithHeartbeat(hb), WithRegistryTimeout(to), WithCloneWindow(window))
	defer g.Close()
	reg.active.Store(true)
	var worst time.Duration
	var mu sync.Mutex
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		row, ok := reg.Row("web_1")
		require.True(t, ok)
		mu.Lock()
		worst = max(worst, time.Since(row.LastSeen))
		mu.Unlock()
	}
	assert.LessOrEqual(t, worst, window, "last-seen reached %v while the process ran (clone window %v, heartbeat %v, timeout %v)", worst, window, hb, to)
}

// Same, and the consequence: a copy of the host (same owner token, another
// machine) claims with the same clone window while the original runs, and
// the original is stopped.
func TestHeartbeatAttackCloneClaimsLiveHost(t *testing.T) {
	const (
		hb     = 200 * time.Millisecond
		to     = 300 * time.Millisecond
		window = 2*hb + to
	)
	reg := &flakyTouch{Registry: snapidtest.NewRegistry()}
	_, path := ctPath(t)
	g := openReg(t, path, "web_1", reg, WithHeartbeat(hb), WithRegistryTimeout(to), WithCloneWindow(window))
	defer g.Close()
	reg.active.Store(true)
	row, _ := reg.Row("web_1")
	var claimed bool
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end) && !claimed; time.Sleep(2 * time.Millisecond) {
		_, err := reg.Registry.Claim(context.Background(), Claim{Name: "web_1", Owner: row.Owner, Hostname: "h2", MachineID: "m2", CloneWindow: window})
		claimed = err == nil
	}
	assert.False(t, claimed, "a clone's claim with the same clone window succeeded while the original host ran")
	if claimed {
		require.Eventually(t, func() bool { _, err := g.Next(); return err != nil }, 3*time.Second, 10*time.Millisecond)
		_, err := g.Next()
		t.Logf("original host now: %v", err)
	}
}
