package snapid_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/snapidtest"
	"github.com/stretchr/testify/require"
)

// reviewTouchReg makes one process's (Generator's) heartbeat calls fail or
// stall on demand; the others reach the registry.
type reviewTouchReg struct {
	Registry
	mode atomic.Int32 // 0 pass, 1 fail, 2 stall until the call's deadline
}

func (r *reviewTouchReg) Touch(ctx context.Context, name, owner, session string) error {
	switch r.mode.Load() {
	case 1:
		return errors.New("review: connection refused")
	case 2:
		<-ctx.Done()
		return ctx.Err()
	}
	return r.Registry.Touch(ctx, name, owner, session)
}

// Review (holds here): at the smallest clone window Open accepts (twice
// the heartbeat plus the timeout), the registry's last-seen of a host
// whose heartbeat holder fails alone, or stalls in every call, must never
// be older than the window. Three Generators on one counter (each its own
// descriptor of .heartbeat, as three processes); the holder's calls fail
// or stall from some point on; last-seen is sampled in the registry.
func TestReviewHeartbeatSmallestWindow(t *testing.T) {
	const hb, to = 800 * time.Millisecond, 200 * time.Millisecond
	const window = 2*hb + to
	for _, mode := range []int32{1, 2} {
		t.Run(map[int32]string{1: "holder fails alone", 2: "holder stalls"}[mode], func(t *testing.T) {
			reg := snapidtest.NewRegistry()
			_, path := ctPath(t)
			var wraps []*reviewTouchReg
			var gens []*Generator
			for range 3 {
				w := &reviewTouchReg{Registry: reg}
				g := openReg(t, path, "vm", w, WithHeartbeat(hb), WithRegistryTimeout(to), WithCloneWindow(window))
				t.Cleanup(func() { _ = g.Close() })
				wraps, gens = append(wraps, w), append(gens, g)
			}
			holder := -1
			deadline := time.Now().Add(10 * time.Second)
			for holder < 0 && time.Now().Before(deadline) {
				for i, g := range gens {
					if g.ExportHeartbeatHolder() {
						holder = i
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
			require.GreaterOrEqual(t, holder, 0, "no process took the heartbeat role")
			wraps[holder].mode.Store(mode)
			var worst time.Duration
			end := time.Now().Add(6 * hb)
			for time.Now().Before(end) {
				h, err := reg.Get(context.Background(), "vm")
				require.NoError(t, err)
				worst = max(worst, time.Since(h.LastSeen))
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("oldest last-seen seen: %v (window %v)", worst, window)
			require.Less(t, worst, window, "last-seen older than the smallest clone window: a clone could take the live host's name")
		})
	}
}
