package engine_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// NextN asking for more numbers than are left, while some are: the error
// matches ErrSequenceShort and says how many are left, not ErrExhausted
// (every number up to max handed out); the numbers left are then issued,
// and only after them is the sequence ErrExhausted.
func TestSequenceNextNShortIsNotExhausted(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, 10)
	h := newSeqHost(t, "web_1")
	g := h.open(t, reg)
	defer g.Close()
	s := openSeq(t, g, "orders", SequenceBlock(1), SequenceLeaseSize(8))
	defer s.Close()
	first, err := s.NextN(8)
	require.NoError(t, err)
	require.Equal(t, uint64(1), first)
	_, err = s.NextN(5)
	require.ErrorIs(t, err, ErrSequenceShort)
	require.False(t, errors.Is(err, ErrExhausted), "9 and 10 were never handed out: %v", err)
	var e *SequenceExhaustedError
	require.ErrorAs(t, err, &e)
	require.Equal(t, uint64(2), e.Largest)
	require.Contains(t, err.Error(), "ask for at most 2")
	v, err := s.NextN(2)
	require.NoError(t, err)
	require.Equal(t, uint64(9), v)
	_, err = s.NextN(1)
	require.ErrorIs(t, err, ErrExhausted)
	require.False(t, errors.Is(err, ErrSequenceShort))
}

// With sync on, no number of a lease is handed out before a sync of the
// lease file covering it returned (the sequence twin of
// TestNoNumberBeforeSync): two processes of a host, goroutines calling
// Next and NextN at once, small blocks and leases so that blocks, NextN
// and refills all write the file many times.
func TestSequenceNoNumberBeforeSync(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, registry.MaxSequence)
	h := newSeqHost(t, "web_1")
	x := &ExportLeaseSyncs{}
	var violations atomic.Int64
	var firstViolation atomic.Value
	var mu sync.Mutex
	var all []uint64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for p := range 2 {
		g := h.open(t, reg, WithSync(true), ExportWithLeaseSyncs(x))
		s := openSeq(t, g, "orders", SequenceBlock(2), SequenceLeaseSize(20))
		t.Cleanup(func() { s.Close(); g.Close() })
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []uint64
				for i := range 150 {
					k := uint64(1)
					var first uint64
					var err error
					if (p+w+i)%7 == 0 {
						k = 3
						first, err = s.NextN(k)
					} else {
						first, err = s.Next()
					}
					if err != nil {
						errs <- err
						return
					}
					if !x.Covered(first, first+k-1) {
						violations.Add(1)
						firstViolation.CompareAndSwap(nil, fmt.Sprintf("numbers [%d, %d] returned before a sync covered them", first, first+k-1))
					}
					for n := first; n < first+k; n++ {
						mine = append(mine, n)
					}
				}
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Zero(t, violations.Load(), "%v", firstViolation.Load())
	requireUnique(t, all, 1, registry.MaxSequence)
	assert.Positive(t, x.Syncs())

	t.Run("sync off never syncs a lease file", func(t *testing.T) {
		reg := registrytest.NewRegistry()
		createSeq(t, reg, "orders", 1, registry.MaxSequence)
		h := newSeqHost(t, "web_2")
		x := &ExportLeaseSyncs{}
		g := h.open(t, reg, ExportWithLeaseSyncs(x))
		defer g.Close()
		s := openSeq(t, g, "orders", SequenceBlock(1), SequenceLeaseSize(5))
		defer s.Close()
		drawSeq(t, s, 20)
		assert.Zero(t, x.Syncs())
	})
}

// A caller whose context ends while the lease file is locked by another
// process returns the context's error; after the lock is let go, numbers
// flow again and none is handed out twice.
func TestSequenceNextContextLeavesWhileLeaseFileLocked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		call func(s *Sequence, ctx context.Context) (uint64, error)
	}{
		{"NextContext", (*Sequence).NextContext},
		{"NextNContext", func(s *Sequence, ctx context.Context) (uint64, error) { return s.NextNContext(ctx, 3) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := registrytest.NewRegistry()
			createSeq(t, reg, "orders", 1, 1_000_000)
			h := newSeqHost(t, "web_1")
			g := h.open(t, reg)
			t.Cleanup(func() { g.Close() })
			s := openSeq(t, g, "orders", SequenceBlock(4), SequenceLeaseSize(100))
			t.Cleanup(func() { s.Close() })
			seen := map[uint64]bool{}
			n, err := s.Next()
			require.NoError(t, err)
			seen[n] = true
			unlock := lockCounterExternally(t, h.path+".seq.orders") // the lease file, as another process
			// Numbers already in the process's blocks still flow; the first
			// call that needs the file leaves at its deadline.
			for i := 0; ; i++ {
				require.Less(t, i, 1000, "no call ever waited for the lease file")
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				n, err := callWithin(t, func() (uint64, error) { return tc.call(s, ctx) })
				cancel()
				if err != nil {
					require.ErrorIs(t, err, context.DeadlineExceeded)
					break
				}
				require.False(t, seen[n], "number %d handed out twice", n)
				seen[n] = true
			}
			unlock()
			for range 20 {
				n, err := s.Next()
				require.NoError(t, err)
				require.False(t, seen[n], "number %d handed out twice", n)
				seen[n] = true
			}
		})
	}
}

// A caller whose context ends while the host's lease is being asked for
// leaves at once, not at the registry timeout, and its context goes with
// the registry call: the call ends too, and the lease is not made for
// nobody.
func TestSequenceNextNContextWhileRegistryFrozen(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, 1_000_000)
	h := newSeqHost(t, "web_1")
	g := h.open(t, reg, WithRegistryTimeout(time.Minute))
	defer g.Close()
	s := openSeq(t, g, "orders", SequenceLeaseSize(10))
	defer s.Close()
	entered := make(chan struct{}, 1)
	ended := make(chan error, 1)
	var held atomic.Bool
	reg.SetHook(func(ctx context.Context, op, name string) error {
		if op != "lease" || !held.CompareAndSwap(false, true) {
			return nil // the first lease call only is held
		}
		entered <- struct{}{}
		select {
		case <-ctx.Done():
			ended <- ctx.Err()
			return ctx.Err()
		case <-time.After(30 * time.Second):
			ended <- nil
			return nil
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() {
		_, err := s.NextNContext(ctx, 5)
		result <- err
	}()
	<-entered // the lease call is held in the registry
	cancel()
	select {
	case err := <-result:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("the caller did not leave when its context ended")
	}
	select {
	case err := <-ended:
		require.ErrorIs(t, err, context.Canceled, "the registry call saw the caller's context end")
	case <-time.After(10 * time.Second):
		t.Fatal("the registry call went on after its caller left")
	}
	first, err := s.NextN(5)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), first, "the caller who left leased nothing")
	st, err := reg.SequenceStatus(context.Background(), "orders")
	require.NoError(t, err)
	require.Len(t, st.Leases, 1)
	assert.Equal(t, uint64(1), st.Leases[0].First)
}

// An ended context takes nothing: not a number of the process's block,
// not from the lease file.
func TestSequenceNextContextEndedTakesNothing(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, 1_000_000)
	h := newSeqHost(t, "web_1")
	g := h.open(t, reg)
	defer g.Close()
	s := openSeq(t, g, "orders", SequenceBlock(4), SequenceLeaseSize(100))
	first, err := s.NextN(2)
	require.NoError(t, err)
	require.Equal(t, uint64(1), first)
	n, err := s.Next() // the process's block: 3..6
	require.NoError(t, err)
	require.Equal(t, uint64(3), n)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = s.NextContext(ctx)
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.NextNContext(ctx, 3)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, uint64(3), s.Stats().NumbersIssued)
	// Give work an ended call might have started time to reach the file,
	// then close (which waits for the Sequence's background work).
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, s.Close())
	s = openSeq(t, g, "orders", SequenceBlock(4), SequenceLeaseSize(100))
	defer s.Close()
	l, err := s.Lease()
	require.NoError(t, err)
	assert.Equal(t, uint64(7), l.Next, "nothing taken from the file after the block 3..6")
	n, err = s.Next()
	require.NoError(t, err)
	assert.Equal(t, uint64(7), n)
}

// Goroutines of one process that need the host's next lease at once take
// it one at a time: each lease is installed, none is dropped or
// overwritten, so concurrent NextN calls leave no gap.
func TestSequenceConcurrentLeasesInOneProcess(t *testing.T) {
	t.Parallel()
	for round := range 5 {
		reg := registrytest.NewRegistry()
		createSeq(t, reg, "orders", 1, 1_000_000)
		h := newSeqHost(t, "web_1")
		g := h.open(t, reg)
		s := openSeq(t, g, "orders", SequenceLeaseSize(10))
		const callers = 8
		firsts := make([]uint64, callers)
		errs := make([]error, callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() { firsts[i], errs[i] = s.NextN(10) })
		}
		wg.Wait()
		require.NoError(t, s.Close())
		require.NoError(t, g.Close())
		for _, err := range errs {
			require.NoError(t, err)
		}
		slices.Sort(firsts)
		want := make([]uint64, callers)
		for i := range want {
			want[i] = uint64(1 + 10*i)
		}
		require.Equal(t, want, firsts, "round %d: NextN(10) by %d goroutines: 1..%d without a gap", round, callers, 10*callers)
	}
}

// A NextNContext caller that left while the lease file was locked by
// another process takes nothing once the lock is free: its call ends
// without numbers instead of taking them for nobody.
func TestSequenceNextNContextLeftTakesNothingLater(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, 1_000_000)
	h := newSeqHost(t, "web_1")
	g := h.open(t, reg)
	defer g.Close()
	s := openSeq(t, g, "orders", SequenceLeaseSize(100))
	first, err := s.NextN(2)
	require.NoError(t, err)
	require.Equal(t, uint64(1), first)
	unlock := lockCounterExternally(t, h.path+".seq.orders")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = callWithin(t, func() (uint64, error) { return s.NextNContext(ctx, 3) })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	unlock()
	require.NoError(t, s.Close()) // waits for the call the caller left
	s = openSeq(t, g, "orders", SequenceLeaseSize(100))
	defer s.Close()
	l, err := s.Lease()
	require.NoError(t, err)
	assert.Equal(t, uint64(3), l.Next, "the call its caller left took nothing")
}

func TestSequenceBoundedWhenLeaseFileLocked(t *testing.T) {
	t.Parallel()
	skipShort(t)
	counter := filepath.Join(lockDir(t), "c")
	reg := registrytest.NewRegistry()
	ctx := context.Background()
	_, err := CreateSequence(ctx, reg, "orders", 1, 1000000)
	require.NoError(t, err)
	opts := []Option{WithRegistry(reg), WithFileMode(0o644), WithRegistryTimeout(time.Second)}
	g, err := Open(counter, "vm", opts...)
	require.NoError(t, err)
	s, err := g.Sequence("orders")
	require.NoError(t, err)
	_, err = s.Next()
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, g.Close())

	testfs.HoldFlock(t, counter+".seq.orders")
	g, err = Open(counter, "vm", opts...)
	require.NoError(t, err)
	defer g.Close()
	// Sequence: bounded by the registry timeout (1s).
	requireLockedWithin(t, 4*time.Second, func() error {
		s, err := g.Sequence("orders")
		if err == nil {
			s.Close()
		}
		return err
	})
	// SequenceContext: bounded by ctx.
	requireLockedWithin(t, 4*time.Second, func() error {
		sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		s, err := g.SequenceContext(sctx, "orders")
		if err == nil {
			s.Close()
		}
		return err
	})
}
