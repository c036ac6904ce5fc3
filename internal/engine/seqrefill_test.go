package engine_test

import (
	"os"
	"testing"

	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// A lease file older than the registry's record of the host's lease is
// dropped when the registry says so (ErrLeaseMoved), not kept beside the
// next lease: its ranges may hold numbers the host already handed out.
// Here the lease file and its floor are restored together from a copy
// and read by a Sequence opened while the registry is down, which uses the
// file unchecked (the documented limit: what it takes meanwhile can
// repeat). Once the registry is back, the lease taken in advance at half
// use is told the host's lease moved on: the file's ranges are dropped
// then, and no number of the copy's range is taken from the file again.
// (Kept, they would be: the file would hold the copy's range as its
// current one and the new lease as the next.)
func TestSequenceLeaseMovedDropsFileRanges(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, registry.MaxSequence)
	h := newSeqHost(t, "web_1")
	lease := h.path + ".seq.orders"
	g := h.open(t, reg)
	defer g.Close()
	s := openSeq(t, g, "orders", SequenceBlock(1), SequenceLeaseSize(10))
	var before []uint64
	takeEach(t, s, 3, &before) // 1..3 of [1, 10]
	backupLease, err := os.ReadFile(lease)
	require.NoError(t, err)
	backupFloor, err := os.ReadFile(lease + ".floor")
	require.NoError(t, err)
	stale, ahead, _, _, err := ReadLeaseFile(h.path, "orders")
	require.NoError(t, err)
	require.Zero(t, ahead.First, "the copy holds no lease taken in advance")
	takeEach(t, s, 27, &before) // the host's lease moves on
	require.NoError(t, s.Close())
	writeInPlace(t, lease+".floor", backupFloor)
	writeInPlace(t, lease, backupLease)

	reg.SetDown(true)
	s = openSeq(t, g, "orders", SequenceBlock(1), SequenceLeaseSize(10)) // the file unchecked
	defer s.Close()
	reg.SetDown(false)
	answered := false
	for range 10 {
		v, err := s.Next() // at half use, the next lease is asked for in the background
		require.NoError(t, err)
		require.True(t, v >= stale.First && v <= stale.Last, "before the registry answers, the copy's range is used: %d", v)
		g.ExportWaitSequences()
		cur, ahead, _, _, err := ReadLeaseFile(h.path, "orders")
		require.NoError(t, err)
		if cur.First != stale.First || ahead.First != 0 {
			answered = true
			break
		}
	}
	require.True(t, answered, "no lease was taken in advance at half use")
	issued := requireUnique(t, before, 1, registry.MaxSequence)
	cur, ahead, _, _, err := ReadLeaseFile(h.path, "orders")
	require.NoError(t, err)
	require.NotEqual(t, stale.First, cur.First, "the copy's range is still the file's current one (next lease %d-%d)", ahead.First, ahead.Last)
	var after []uint64
	takeEach(t, s, 25, &after) // straight from the file
	for _, v := range after {
		require.False(t, issued[v], "number %d handed out again after the registry said the host's lease moved on", v)
		require.False(t, v >= stale.First && v <= stale.Last, "number %d of the dropped range %d-%d", v, stale.First, stale.Last)
	}
	requireUnique(t, after, 1, registry.MaxSequence)
}
