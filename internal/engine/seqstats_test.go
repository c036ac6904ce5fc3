package engine_test

import (
	"context"
	"testing"
	"time"

	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Lease reports the host's lease file; Stats counts what this process
// handed out and leased; Space is what no host leased yet; Sequences lists
// the open ones.
func TestSequenceLeaseStatsSpace(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, 50_000)
	createSeq(t, reg, "invoices", 1, 1000)
	h := newSeqHost(t, "web_1")
	g := h.open(t, reg)
	defer g.Close()
	assert.Empty(t, g.Sequences())
	s := openSeq(t, g, "orders", SequenceBlock(10), SequenceLeaseSize(100))
	inv := openSeq(t, g, "invoices")
	assert.Equal(t, []*Sequence{inv, s}, g.Sequences(), "by name")

	l, err := s.Lease()
	require.NoError(t, err)
	assert.Equal(t, SequenceLeaseState{Sequence: "orders"}, l, "nothing leased yet")
	sp, err := s.Space(context.Background())
	require.NoError(t, err)
	assert.Equal(t, registry.SequenceSpace{Sequence: "orders", Start: 1, Max: 50_000, LeftNumbers: 50_000, LeftRatio: 1}, sp)

	// Three numbers: one lease of 100, a block of 10 taken from it.
	for range 3 {
		_, err := s.Next()
		require.NoError(t, err)
	}
	first, err := s.NextN(5)
	require.NoError(t, err)
	assert.Equal(t, SequenceStats{Sequence: "orders", NumbersIssued: 8, Leases: 1}, s.Stats())
	l, err = s.Lease()
	require.NoError(t, err)
	assert.Equal(t, SequenceLeaseState{Sequence: "orders", CurrentFirst: 1, CurrentLast: 100, Next: first + 5, LeftNumbers: 100 - (first + 4)}, l)
	assert.Equal(t, uint64(11), first, "NextN after the process's block of 10")
	sp, err = s.Space(context.Background())
	require.NoError(t, err)
	assert.Equal(t, uint64(50_000-100), sp.LeftNumbers, "the host leased 100")
	assert.InDelta(t, 0.998, sp.LeftRatio, 1e-12)

	// Past half the lease, the next one is taken ahead: NextN leaves 35,
	// and the process's next block (its first is used up) starts it.
	_, err = s.NextN(50)
	require.NoError(t, err)
	for range 8 {
		_, err := s.Next()
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { l, err = s.Lease(); return err == nil && l.AheadFirst != 0 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, uint64(1), l.CurrentFirst)
	assert.Equal(t, uint64(100), l.CurrentLast)
	assert.Equal(t, uint64(101), l.AheadFirst)
	require.Greater(t, l.Next, uint64(66), "a block was taken after NextN's numbers")
	assert.Equal(t, 100-l.Next+1+l.AheadLast-100, l.LeftNumbers)
	assert.Equal(t, uint64(2), s.Stats().Leases)
	assert.Equal(t, uint64(66), s.Stats().NumbersIssued)
	sp, err = s.Space(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 50_000-l.AheadLast, sp.LeftNumbers)

	// The registry unreachable: Space says so; Lease, from the file, works.
	reg.SetDown(true)
	_, err = s.Space(context.Background())
	require.ErrorIs(t, err, ErrRegistry)
	_, err = s.Lease()
	require.NoError(t, err)
	reg.SetDown(false)

	require.NoError(t, inv.Close())
	assert.Equal(t, []*Sequence{s}, g.Sequences())
	require.NoError(t, s.Close())
	assert.Empty(t, g.Sequences())
	_, err = s.Lease()
	require.ErrorIs(t, err, ErrClosed)
	assert.Equal(t, uint64(66), s.Stats().NumbersIssued, "counts stay after Close")
}

// Lease (what a metrics scrape calls) waits for the lease file's lock
// no longer than the registry timeout, whoever holds it.
func TestSequenceLeaseWhileAnotherUserHoldsTheLeaseFile(t *testing.T) {
	t.Parallel()
	skipShort(t)
	g, s, _, release := openSeqLockedByAnother(t)
	defer g.Close()
	defer s.Close()
	err := returnsWithin(t, 10*time.Second, release, "Sequence.Lease", func() error { _, err := s.Lease(); return err })
	require.ErrorIs(t, err, ErrLocked)
}

// Lease's bound holds also while a take left behind by a NextNContext
// whose deadline passed holds the Sequence's mutex, waiting for another
// user's lock on the lease file: a metrics scrape is answered within the
// registry timeout.
func TestSequenceLeaseAfterACallerLeftAtItsDeadline(t *testing.T) {
	t.Parallel()
	g, s, _, release := openSeqLockedByAnother(t) // registry timeout 1 s
	defer g.Close()
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := s.NextNContext(ctx, 1)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	err = returnsWithin(t, 5*time.Second, release, "Sequence.Lease after a NextNContext left at its deadline", func() error {
		_, err := s.Lease()
		return err
	})
	require.ErrorIs(t, err, ErrLocked)
}
