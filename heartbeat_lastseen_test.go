package snapid_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/clock"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
)

// flakyTouch is a registry whose Touch alternates: odd calls are applied at
// once and answered just before the caller's deadline (a slow reply), even
// calls time out without being applied.
type flakyTouch struct {
	*registrytest.Registry
	clk    *clock.Fake // the host's: replies come late on it
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
			f.clk.Sleep(f.clk.Until(d) - 10*time.Millisecond)
		}
		return err
	}
	// Until the call's deadline, on the clock (a goroutine waiting for
	// its context would not show the fake host it waits on the clock).
	if d, ok := ctx.Deadline(); ok {
		f.clk.Sleep(f.clk.Until(d))
	}
	return fmt.Errorf("%w: touch timed out", ErrRegistry)
}

// One process, a configuration checkCloneWindow accepts (window = 2 x
// heartbeat + timeout): last-seen stays within the clone window while the
// process runs, with one slow reply followed by one timed-out Touch ("a
// live holder that misses one heartbeat, the next one late by up to a
// registry timeout").
func TestHeartbeatSlowAndLostRefreshesInsideCloneWindow(t *testing.T) {
	const (
		hb     = 20 * time.Second
		to     = 30 * time.Second
		window = 2*hb + to
	)
	mem := registrytest.NewRegistry()
	fh := newFakeHost(t, mem)
	reg := &flakyTouch{Registry: mem, clk: fh.clk}
	_, path := ctPath(t)
	g := fh.open(path, "web_1", reg, WithHeartbeat(hb), WithRegistryTimeout(to), WithCloneWindow(window))
	defer fh.close(g)
	reg.active.Store(true)
	worst, _ := watchLastSeen(t, fh, mem, 0, 15*hb, hb/40)
	assert.LessOrEqual(t, worst, window, "last-seen reached %v while the process ran (clone window %v, heartbeat %v, timeout %v)", worst, window, hb, to)
}

// Same, and the consequence: a copy of the host (same owner token, another
// machine) claiming with the same clone window while the original runs is
// refused.
func TestHeartbeatCloneRefusedWhileHostRuns(t *testing.T) {
	const (
		hb     = 20 * time.Second
		to     = 30 * time.Second
		window = 2*hb + to
	)
	mem := registrytest.NewRegistry()
	fh := newFakeHost(t, mem)
	reg := &flakyTouch{Registry: mem, clk: fh.clk}
	_, path := ctPath(t)
	g := fh.open(path, "web_1", reg, WithHeartbeat(hb), WithRegistryTimeout(to), WithCloneWindow(window))
	defer fh.close(g)
	reg.active.Store(true)
	_, claimed := watchLastSeen(t, fh, mem, window, 15*hb, hb/40)
	assert.False(t, claimed, "a clone's claim with the same clone window succeeded while the original host ran")
	if claimed {
		fh.until(hb/4, 12, func() bool { _, err := g.Next(); return err != nil }, "the original host never learned of the clone")
		_, err := g.Next()
		t.Logf("original host now: %v", err)
	}
}
