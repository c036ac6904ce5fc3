package snapid_test

import (
	"os"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// A lease file restored in place TOGETHER WITH ITS FLOOR (a backup of the
// state directory put back over the files while the host runs): the floor
// then holds the restored record too, so it cannot raise the lease file.
// What is left must: the position and ranges the process itself saw, and
// at open, the registry's record of the host's lease. No number is handed
// out twice:
//
//   - within the current range, by the process that used it: raised to the
//     highest position it saw;
//   - to an earlier lease, by the process that used it: raised to the range
//     and position it last saw;
//   - to an earlier lease, by a process that joins the host's claim after
//     the restore and never saw the file before: the registry's record of
//     the host's lease is a later range, so the file's ranges are dropped
//     at open (a gap);
//   - by a process that joined the host's claim before the restore and
//     took nothing yet: raised to the generation, ranges and position its
//     open saw (and checked against the registry).
func TestSequenceLeaseAndFloorRestoredTogether(t *testing.T) {
	const (
		same   = iota // the process that used the file takes after the restore
		before        // a process that joined the host's claim before the restore, and took nothing
		after         // a process that joins the host's claim after the restore
	)
	for _, tc := range []struct {
		name  string
		lease uint64 // SequenceLeaseSize: 1000 stays in one range, 10 moves on
		taker int    // who takes the numbers after the restore
	}{
		{"within the current range, the same process", 1000, same},
		{"to an earlier lease, the same process", 10, same},
		{"to an earlier lease, a process joining after the restore", 10, after},
		{"within the current range, a process that joined before the restore", 1000, before},
		{"to an earlier lease, a process that joined before the restore", 10, before},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := registrytest.NewRegistry()
			createSeq(t, reg, "orders", 1, registry.MaxSequence)
			h := newSeqHost(t, "web_1")
			lease := h.path + ".seq.orders"
			floor := lease + ".floor"
			var issued []uint64
			g1 := h.open(t, reg)
			defer g1.Close()
			s1 := openSeq(t, g1, "orders", SequenceBlock(1), SequenceLeaseSize(tc.lease))
			defer s1.Close()
			takeEach(t, s1, 5, &issued) // 1..5
			backupLease, err := os.ReadFile(lease)
			require.NoError(t, err)
			backupFloor, err := os.ReadFile(floor)
			require.NoError(t, err)
			cur, _, pos, _, err := ReadLeaseFile(h.path, "orders")
			require.NoError(t, err)
			require.Equal(t, uint64(6), pos, "the copy's position")
			takeEach(t, s1, 25, &issued) // 6..30: within [1, 1000], or three leases of 10 on
			if tc.lease == 10 {
				now, _, _, _, err := ReadLeaseFile(h.path, "orders")
				require.NoError(t, err)
				require.Greater(t, now.First, cur.Last, "the host's lease moved past the copy's")
			}

			s := s1
			if tc.taker == before {
				g2 := h.open(t, reg) // joins the host's claim
				defer g2.Close()
				s = openSeq(t, g2, "orders", SequenceBlock(1), SequenceLeaseSize(tc.lease))
				defer s.Close()
			}
			writeInPlace(t, floor, backupFloor)
			writeInPlace(t, lease, backupLease)
			restored, _, pos, _, err := ReadLeaseFile(h.path, "orders")
			require.NoError(t, err)
			require.Equal(t, cur, restored, "restored: the copy's range")
			require.Equal(t, uint64(6), pos, "restored: the copy's position")

			if tc.taker == after {
				g2 := h.open(t, reg) // joins the host's claim
				defer g2.Close()
				s = openSeq(t, g2, "orders", SequenceBlock(1), SequenceLeaseSize(tc.lease))
				defer s.Close()
			}
			takeEach(t, s, 10, &issued)
			issued = append(issued, drawSeq(t, s, 10)...)
			takeEach(t, s1, 5, &issued)
			requireUnique(t, issued, 1, registry.MaxSequence)
		})
	}
}

// A lease file restored in place together with its floor, then the
// host's processes closed cleanly: the last one records where the file
// stands in the registry, and the host's next start carries the lease
// over from there. What a process saw is raised into the file before it
// closes, so the position recorded is not the copy's, and the next start
// repeats nothing. The process that saw the later position closes last,
// or first; with its Sequence closed before its Generator, or left open.
func TestSequenceLeaseAndFloorRestoredThenClosed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sawLast   bool // the process that saw the later position closes last
		closeSeqs bool // Sequences are closed before their Generators
	}{
		{"closed last, Sequence closed first", true, true},
		{"closed first, Sequence closed first", false, true},
		{"closed last, Sequence left open", true, false},
		{"closed first, Sequence left open", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := registrytest.NewRegistry()
			createSeq(t, reg, "orders", 1, registry.MaxSequence)
			h := newSeqHost(t, "web_1")
			lease := h.path + ".seq.orders"
			var issued []uint64
			g1 := h.open(t, reg)
			s1 := openSeq(t, g1, "orders", SequenceBlock(1), SequenceLeaseSize(1000))
			g2 := h.open(t, reg) // another process of the host, which never takes
			takeEach(t, s1, 5, &issued)
			backupLease, err := os.ReadFile(lease)
			require.NoError(t, err)
			backupFloor, err := os.ReadFile(lease + ".floor")
			require.NoError(t, err)
			takeEach(t, s1, 10, &issued)
			writeInPlace(t, lease+".floor", backupFloor)
			writeInPlace(t, lease, backupLease)

			closeProc := func(g *Generator, s *Sequence) {
				if s != nil && tc.closeSeqs {
					require.NoError(t, s.Close())
				}
				require.NoError(t, g.Close())
				if s != nil {
					s.Close()
				}
			}
			if tc.sawLast {
				closeProc(g2, nil)
				closeProc(g1, s1)
			} else {
				closeProc(g1, s1)
				closeProc(g2, nil)
			}

			g := h.open(t, reg) // the host's next start
			defer g.Close()
			s := openSeq(t, g, "orders", SequenceBlock(1), SequenceLeaseSize(1000))
			defer s.Close()
			takeEach(t, s, 10, &issued)
			requireUnique(t, issued, 1, registry.MaxSequence)
		})
	}
}
