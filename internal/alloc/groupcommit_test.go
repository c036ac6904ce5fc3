package alloc

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync"
	"testing"

	"github.com/snapid/snapid/internal/errs"
	"github.com/stretchr/testify/require"
)

// counter is an in-memory counter whose updates a test can hold back.
type counter struct {
	mu      sync.Mutex
	v       uint64
	limit   uint64 // 0: 2^64-1
	updates int
	fail    error
	gate    chan struct{} // when not nil, each update waits for a value
}

func (c *counter) flush(k uint64, gone func() bool) (uint64, error) {
	if c.gate != nil {
		<-c.gate
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if gone != nil && gone() {
		return 0, ErrCallersLeft
	}
	if c.fail != nil {
		return 0, c.fail
	}
	limit := c.limit
	if limit == 0 {
		limit = math.MaxUint64
	}
	if k > limit-c.v {
		return 0, errs.ErrExhausted
	}
	c.updates++
	first := c.v + 1
	c.v += k
	return first, nil
}

// Concurrent callers get disjoint numbers, every one of them, in fewer
// updates than callers once they queue behind an update in progress.
func TestGroupCommitDisjointAndShared(t *testing.T) {
	t.Parallel()
	c := &counter{gate: make(chan struct{})}
	gc := NewGroupCommit(c.flush)
	const n = 50
	var wg sync.WaitGroup
	got := make([]uint64, n)
	errc := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errc[i] = gc.Reserve(context.Background(), 1)
		}()
	}
	// The first update is held until the others queue behind it.
	for {
		callers, _ := gc.Waiting()
		if callers == n-1 {
			break
		}
		runtime.Gosched()
	}
	close(c.gate)
	wg.Wait()
	seen := map[uint64]bool{}
	for i := range n {
		require.NoError(t, errc[i])
		require.False(t, seen[got[i]], "number %d twice", got[i])
		seen[got[i]] = true
	}
	for v := uint64(1); v <= n; v++ {
		require.True(t, seen[v], "number %d missing", v)
	}
	require.Equal(t, 2, c.updates, "one update for the first caller, one for the group")
	require.Equal(t, uint64(n-2), gc.Members())
	require.False(t, gc.Flushing())
}

// A failed update fails every member of its group, and hands out nothing.
func TestGroupCommitFailureFailsTheGroup(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	c := &counter{fail: boom}
	gc := NewGroupCommit(c.flush)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := gc.Reserve(context.Background(), 3)
			if !errors.Is(err, boom) {
				t.Errorf("got %v, want the update's error", err)
			}
		}()
	}
	wg.Wait()
	require.Zero(t, c.v)
}

// A caller whose context has ended gets its error and takes nothing.
func TestGroupCommitEndedContext(t *testing.T) {
	t.Parallel()
	c := &counter{}
	gc := NewGroupCommit(c.flush)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := gc.Reserve(ctx, 1)
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, c.v)
	first, err := gc.Reserve(context.Background(), 2)
	require.NoError(t, err)
	require.Equal(t, uint64(1), first)
}

// Near the bound a group that does not fit is served one member at a
// time, so that each gets what is left; none is taken past the bound.
func TestGroupCommitExhaustedServedOneByOne(t *testing.T) {
	t.Parallel()
	c := &counter{limit: 5, gate: make(chan struct{})}
	gc := NewGroupCommit(c.flush)
	var wg sync.WaitGroup
	results := make(chan error, 3)
	wg.Add(1)
	go func() { defer wg.Done(); _, err := gc.Reserve(context.Background(), 1); results <- err }()
	for !gc.Flushing() {
		runtime.Gosched()
	}
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); _, err := gc.Reserve(context.Background(), 3); results <- err }()
	}
	for {
		if callers, _ := gc.Waiting(); callers == 2 {
			break
		}
		runtime.Gosched()
	}
	close(c.gate)
	wg.Wait()
	close(results)
	var ok, exhausted int
	for err := range results {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, errs.ErrExhausted):
			exhausted++
		default:
			t.Fatal(err)
		}
	}
	require.Equal(t, 2, ok, "the first caller and one of the 3s")
	require.Equal(t, 1, exhausted)
	require.Equal(t, uint64(4), c.v)
}

// A request that would make a group pass 2^64-1 is refused without
// joining it.
func TestGroupCommitRefusesAGroupPastTheMaximum(t *testing.T) {
	t.Parallel()
	c := &counter{gate: make(chan struct{})}
	gc := NewGroupCommit(c.flush)
	done := make(chan error, 2)
	go func() { _, err := gc.Reserve(context.Background(), 1); done <- err }()
	for !gc.Flushing() {
		runtime.Gosched()
	}
	go func() { _, err := gc.Reserve(context.Background(), 10); done <- err }()
	for {
		if _, k := gc.Waiting(); k == 10 {
			break
		}
		runtime.Gosched()
	}
	_, err := gc.Reserve(context.Background(), math.MaxUint64)
	require.ErrorIs(t, err, errs.ErrExhausted)
	close(c.gate)
	require.NoError(t, <-done)
	require.NoError(t, <-done)
}
