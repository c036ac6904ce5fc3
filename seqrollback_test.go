package snapid_test

import (
	"os"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/snapidtest"
	"github.com/stretchr/testify/require"
)

// A lease file restored in place from a backup within its current range
// while a process uses it (the sequence twin of
// TestReservationRollbackWhileRunning): the process raises it back to the
// highest position it saw, and no number is handed out twice. The registry
// cannot see this (its record is the range, not the position), so only the
// running process can.
func TestSequenceLeaseRollbackWhileRunning(t *testing.T) {
	reg := snapidtest.NewRegistry()
	createSeq(t, reg, "orders", 1, MaxSequence)
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
	requireUnique(t, issued, 1, MaxSequence)
}

// A lease file restored in place to an EARLIER lease (the host's lease has
// moved on since the backup) while a process uses it: the process does not
// hand out the numbers of the earlier lease again.
func TestSequenceLeaseRollbackToEarlierRange(t *testing.T) {
	reg := snapidtest.NewRegistry()
	createSeq(t, reg, "orders", 1, MaxSequence)
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
	requireUnique(t, issued, 1, MaxSequence)
}
