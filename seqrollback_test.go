package snapid_test

import (
	"os"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// A lease file restored in place from a backup within its current range
// while a process uses it (the sequence twin of
// TestReservationRollbackWhileRunning): the process raises it back to the
// highest position it saw, and no number is handed out twice. The registry
// cannot see this (its record is the range, not the position), so only the
// running process can.
func TestSequenceLeaseRollbackWhileRunning(t *testing.T) {
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, registry.MaxSequence)
	h := newSeqHost(t, "web_1")
	g := h.open(t, reg)
	defer g.Close()
	s := openSeq(t, g, "orders", SequenceBlock(1), SequenceLeaseSize(1000))
	defer s.Close()
	lease := h.path + ".seq.orders"

	next1 := func(n int) []uint64 { // straight from the file, past the block
		var out []uint64
		for range n {
			v, err := s.NextN(1)
			require.NoError(t, err)
			out = append(out, v)
		}
		return out
	}
	issued := next1(5)
	backup, err := os.ReadFile(lease)
	require.NoError(t, err)
	before, _, posBefore, ok, err := ReadLeaseFile(h.path, "orders")
	require.NoError(t, err)
	require.True(t, ok)
	issued = append(issued, next1(10)...)
	issued = append(issued, drawSeq(t, s, 10)...)

	f, err := os.OpenFile(lease, os.O_WRONLY, 0) // in place, as cp does
	require.NoError(t, err)
	_, err = f.WriteAt(backup, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	after, _, posAfter, ok, err := ReadLeaseFile(h.path, "orders")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, before, after, "rolled back within the current range")
	require.Equal(t, posBefore, posAfter)

	issued = append(issued, next1(10)...)
	issued = append(issued, drawSeq(t, s, 30)...)
	requireUnique(t, issued, 1, registry.MaxSequence)
}

// A lease file restored in place to an EARLIER lease (the host's lease has
// moved on since the backup) while a process uses it: the process does not
// hand out the numbers of the earlier lease again.
func TestSequenceLeaseRollbackToEarlierRange(t *testing.T) {
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, registry.MaxSequence)
	h := newSeqHost(t, "web_1")
	g := h.open(t, reg)
	defer g.Close()
	s := openSeq(t, g, "orders", SequenceBlock(1), SequenceLeaseSize(10))
	defer s.Close()
	lease := h.path + ".seq.orders"

	var issued []uint64
	take := func(n int) {
		for range n {
			v, err := s.NextN(1)
			require.NoError(t, err)
			issued = append(issued, v)
		}
	}
	take(2)
	backup, err := os.ReadFile(lease)
	require.NoError(t, err)
	take(40) // several leases later

	f, err := os.OpenFile(lease, os.O_WRONLY, 0) // in place, as cp does
	require.NoError(t, err)
	_, err = f.WriteAt(backup, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	take(30)
	requireUnique(t, issued, 1, registry.MaxSequence)
}

// A lease file restored in place while the host's processes run, and
// read first by a process that had not taken from it before (it opened
// the sequence after the restore): it cannot know the position from
// memory, and the registry records the range, not the position. The
// floor file beside the lease file, which every update writes, tells it;
// no number is handed out twice. Within the current range and to an
// earlier lease; the sequence opened by the second process after the
// restore (the registry's check of the file at open sees an earlier
// lease, not an earlier position) or before it (only the floor knows).
func TestSequenceLeaseRollbackSeenByAnotherProcess(t *testing.T) {
	for _, tc := range []struct {
		name       string
		lease      uint64 // SequenceLeaseSize: 1000 stays in one range, 10 moves on
		openBefore bool   // the second process opens the sequence before the restore
	}{
		{"within the current range", 1000, false},
		{"to an earlier lease", 10, false},
		{"within the current range, opened before", 1000, true},
		{"to an earlier lease, opened before", 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := registrytest.NewRegistry()
			createSeq(t, reg, "orders", 1, registry.MaxSequence)
			h := newSeqHost(t, "web_1")
			g1 := h.open(t, reg)
			defer g1.Close()
			s1 := openSeq(t, g1, "orders", SequenceBlock(1), SequenceLeaseSize(tc.lease))
			defer s1.Close()
			lease := h.path + ".seq.orders"
			var issued []uint64
			take := func(s *Sequence, n int) {
				for range n {
					v, err := s.NextN(1)
					require.NoError(t, err)
					issued = append(issued, v)
				}
			}
			take(s1, 5)
			backup, err := os.ReadFile(lease)
			require.NoError(t, err)
			take(s1, 25)

			g2 := h.open(t, reg) // joins the host's claim
			defer g2.Close()
			var s2 *Sequence
			if tc.openBefore {
				s2 = openSeq(t, g2, "orders", SequenceBlock(1), SequenceLeaseSize(tc.lease))
				defer s2.Close()
			}
			f, err := os.OpenFile(lease, os.O_WRONLY, 0) // in place, as cp does
			require.NoError(t, err)
			_, err = f.WriteAt(backup, 0)
			require.NoError(t, err)
			require.NoError(t, f.Close())

			if !tc.openBefore {
				s2 = openSeq(t, g2, "orders", SequenceBlock(1), SequenceLeaseSize(tc.lease))
				defer s2.Close()
			}
			take(s2, 30)
			take(s1, 10)
			requireUnique(t, issued, 1, registry.MaxSequence)
		})
	}
}

// The floor file is checked as the lease file is: one that is not a
// record of this lease file is refused (ErrCorrupt, naming the lease file) and nothing is
// handed out; a lease file without a floor (written before floors
// existed) is used and gets one.
func TestSequenceLeaseFloorChecked(t *testing.T) {
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, registry.MaxSequence)
	h := newSeqHost(t, "web_1")
	g := h.open(t, reg)
	defer g.Close()
	s := openSeq(t, g, "orders", SequenceBlock(1), SequenceLeaseSize(100))
	first, err := s.Next()
	require.NoError(t, err)
	require.NoError(t, s.Close())
	floor := h.path + ".seq.orders.floor"
	b, err := os.ReadFile(floor)
	require.NoError(t, err)
	require.Len(t, b, 512, "the floor holds the lease file's record")

	require.NoError(t, os.Remove(floor)) // as before floors existed
	s = openSeq(t, g, "orders", SequenceBlock(1), SequenceLeaseSize(100))
	v, err := s.Next()
	require.NoError(t, err)
	require.Greater(t, v, first)
	require.NoError(t, s.Close())
	b, err = os.ReadFile(floor)
	require.NoError(t, err)
	require.Len(t, b, 512, "a floor made again")

	// All zeros (a first write a power cut lost on a file system that
	// shows an unsynced extension as zeros): no floor, not damage.
	require.NoError(t, os.WriteFile(floor, make([]byte, 512), 0o600))
	s = openSeq(t, g, "orders", SequenceBlock(1), SequenceLeaseSize(100))
	w, err := s.Next()
	require.NoError(t, err)
	require.Greater(t, w, v)
	require.NoError(t, s.Close())
	b, err = os.ReadFile(floor)
	require.NoError(t, err)
	require.Equal(t, "snapseq2", string(b[:8]), "a floor written again")

	b[100] ^= 0xff
	require.NoError(t, os.WriteFile(floor, b, 0o600))
	lease, err := os.ReadFile(h.path + ".seq.orders")
	require.NoError(t, err)
	_, err = g.Sequence("orders")
	requireCorruptFile(t, err, ".seq.")
	require.Contains(t, err.Error(), ".floor")
	after, err := os.ReadFile(h.path + ".seq.orders")
	require.NoError(t, err)
	require.Equal(t, lease, after, "a refused floor changed the lease file")
}
