package alloc

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"

	"github.com/snapid/snapid/internal/errs"
	"github.com/stretchr/testify/require"
)

// blocks reserves blocks from an in-memory counter, failing while fail
// is set.
type blocks struct {
	mu    sync.Mutex
	v     uint64
	calls int
	fail  error
}

func (b *blocks) reserve(_ context.Context, k uint64) (uint64, uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	if b.fail != nil {
		return 0, 0, b.fail
	}
	first := b.v + 1
	b.v += k
	return first, k, nil
}

// Numbers come from blocks in order, the next block is reserved ahead,
// and what is left unused is counted.
func TestBlockServesInOrder(t *testing.T) {
	t.Parallel()
	r := &blocks{}
	a := NewBlock(10, r.reserve)
	defer a.Close()
	for want := uint64(1); want <= 25; want++ {
		n, err := a.Next(context.Background())
		require.NoError(t, err)
		require.Equal(t, want, n)
	}
	for a.Busy() {
		runtime.Gosched()
	}
	// 30 reserved, 25 handed out, and the block ahead (31–40) once taken.
	r.mu.Lock()
	reserved := r.v
	r.mu.Unlock()
	require.Equal(t, reserved-25, a.Unused())
}

// Take returns consecutive numbers from one block: fewer than asked at
// the end of a block.
func TestBlockTakeStaysInOneBlock(t *testing.T) {
	t.Parallel()
	r := &blocks{}
	a := NewBlock(10, r.reserve)
	defer a.Close()
	first, count, err := a.Take(context.Background(), 7)
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 7}, []uint64{first, count})
	first, count, err = a.Take(context.Background(), 7)
	require.NoError(t, err)
	require.Equal(t, []uint64{8, 3}, []uint64{first, count})
}

// A reservation that failed is tried again for the caller that needs it,
// and its error is returned when it fails again; after Close, ErrClosed.
func TestBlockRefillFailureAndClose(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	r := &blocks{fail: boom}
	a := NewBlock(4, r.reserve)
	_, err := a.Next(context.Background())
	require.ErrorIs(t, err, boom)
	r.mu.Lock()
	r.fail = nil
	r.mu.Unlock()
	n, err := a.Next(context.Background())
	require.NoError(t, err)
	require.Equal(t, uint64(1), n)
	for range 3 {
		_, err = a.Next(context.Background())
		require.NoError(t, err)
	}
	for a.Busy() {
		runtime.Gosched()
	}
	a.Close()
	// The block ahead, if reserved before Close, is still served; then
	// nothing more.
	for {
		_, err = a.Next(context.Background())
		if err != nil {
			break
		}
	}
	require.ErrorIs(t, err, errs.ErrClosed)
}

// Shards hand out unique numbers from runs of the block.
func TestShardsUnique(t *testing.T) {
	t.Parallel()
	r := &blocks{}
	s := NewShards(NewBlock(64, r.reserve), 8)
	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				n, err := s.Next(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[n] {
					t.Errorf("number %d twice", n)
				}
				seen[n] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, seen, 400)
}
