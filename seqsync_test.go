package snapid_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With sync on, no number of a lease is handed out before a sync of the
// lease file covering it returned (the sequence twin of
// TestNoNumberBeforeSync): two processes of a host, goroutines calling
// Next and NextN at once, small blocks and leases so that blocks, NextN
// and refills all write the file many times.
func TestSequenceNoNumberBeforeSync(t *testing.T) {
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
