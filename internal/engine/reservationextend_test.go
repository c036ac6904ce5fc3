package engine_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A burst far above the step (one NextN of 600,000 numbers on a host
// whose step is 1,000) grows the next step at most 16-fold (the cap on
// growth per extension), not to the burst's count: the host's mark is
// then at most 16 steps ahead of what it issued, and a crash right after
// the burst skips at most that many numbers, not about 600,000. The rate
// is driven by a fake clock: the burst and the draws after it are one
// minute apart, well within the outage horizon (2 h).
func TestReservationStepGrowthCappedAfterBurst(t *testing.T) {
	t.Parallel()
	const step = 1_000
	reg := registrytest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	g := openReg(t, path, "web_1", reg, WithReserveStep(step), WithSync(false), ExportWithNow(clock))
	draw(t, g, 1)

	advance(time.Minute)
	first, err := g.NextN(600_000) // past the mark: an extension sized before the burst
	require.NoError(t, err)
	last := first + 600_000 - 1
	h, _ := reg.Row("web_1")
	afterBurst := h.Reserved
	require.LessOrEqual(t, afterBurst-last, uint64(step), "the burst's own extension is one step")

	// Past half of that step: the next extension is sized with the burst
	// in the last horizon.
	advance(time.Minute)
	for _, v := range draw(t, g, step/2+1) {
		last = max(last, v)
	}
	require.NoError(t, g.ExportExtend(context.Background(), 0)) // or the background one did it
	h, _ = reg.Row("web_1")
	require.Greater(t, h.Reserved, afterBurst, "an extension after the burst")
	ahead := h.Reserved - last
	assert.Greater(t, ahead, uint64(step), "the step grew with the burst (the rate counts)")
	assert.LessOrEqual(t, ahead, uint64(16*step), "the mark is at most 16 steps ahead of what was issued")

	require.NoError(t, Crash(g))
	g = openReg(t, path, "web_1", reg, WithReserveStep(step), WithSync(false), ExportWithNow(clock))
	defer g.Close()
	next := draw(t, g, 1)[0]
	require.Greater(t, next, last)
	assert.LessOrEqual(t, next-last-1, uint64(16*step), "the crash skipped %d numbers after a burst", next-last-1)
}
