package engine_test

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// setLeaseGen sets the generation of the lease record at path, with its
// checksum.
func setLeaseGen(t *testing.T, path string, gen uint64) {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	binary.LittleEndian.PutUint64(b[272:], gen)
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	h.Write(b[:8])
	h.Write(make([]byte, 8))
	h.Write(b[16:508])
	binary.LittleEndian.PutUint32(b[508:], h.Sum32())
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(b, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// writeInPlace rewrites the file at path with b, keeping the file, as
// cp does.
func writeInPlace(t *testing.T, path string, b []byte) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(b, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// takeEach takes n numbers one call each (NextN(1): past the block).
func takeEach(t *testing.T, s *Sequence, n int, out *[]uint64) {
	for range n {
		v, err := s.NextN(1)
		require.NoError(t, err)
		*out = append(*out, v)
	}
}

// This version writes lease files and floors as "snapseq2", which the
// version before generations refuses (so that it never rewrites a file
// whose floor has a later generation), and reads a "snapseq1" file as
// generation 0, writing it as "snapseq2" at its next whole write.
func TestSequenceLeaseFileVersions(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, registry.MaxSequence)
	h := newSeqHost(t, "web_1")
	lease := h.path + ".seq.orders"
	g := h.open(t, reg)
	defer g.Close()
	s := openSeq(t, g, "orders", SequenceBlock(1), SequenceLeaseSize(10))
	var issued []uint64
	takeEach(t, s, 3, &issued)
	require.NoError(t, s.Close())
	for _, p := range []string{lease, lease + ".floor"} {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		require.Equal(t, "snapseq2", string(b[:8]), p)
	}
	// As the earlier version left it: "snapseq1", no generation, no floor.
	b, err := os.ReadFile(lease)
	require.NoError(t, err)
	copy(b, "snapseq1")
	writeInPlace(t, lease, b)
	setLeaseGen(t, lease, 0)
	require.NoError(t, os.Remove(lease+".floor"))
	s = openSeq(t, g, "orders", SequenceBlock(1), SequenceLeaseSize(10))
	defer s.Close()
	takeEach(t, s, 12, &issued) // past the lease: a whole write
	b, err = os.ReadFile(lease)
	require.NoError(t, err)
	require.Equal(t, "snapseq2", string(b[:8]))
	requireUnique(t, issued, 1, registry.MaxSequence)
}

// A lease file restored in place to a copy taken before a clean restart
// of the host, while the new claim's processes run: an earlier lease of
// an earlier claim. The process goes on from the current claim's floor;
// it does not stop, and nothing repeats.
func TestSequenceFloorRestoreEarlierClaimWhileRunning(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, registry.MaxSequence)
	h := newSeqHost(t, "web_1")
	lease := h.path + ".seq.orders"
	var issued []uint64
	g := h.open(t, reg)
	s := openSeq(t, g, "orders", SequenceBlock(1), SequenceLeaseSize(10))
	takeEach(t, s, 3, &issued)
	backup, err := os.ReadFile(lease)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, g.Close())

	g = h.open(t, reg) // a new claim
	defer g.Close()
	s = openSeq(t, g, "orders", SequenceBlock(1), SequenceLeaseSize(10))
	defer s.Close()
	takeEach(t, s, 3, &issued)
	writeInPlace(t, lease, backup)
	_, err = s.NextN(1)
	t.Logf("after the restore: %v", err)
	_, err = s.Next()
	t.Logf("Next after the restore: %v", err)
	_, err = s.NextN(1)
	t.Logf("NextN again: %v", err)
	require.NoError(t, err)
}

// A damaged lease file without a floor is refused and nothing is made.
func TestSequenceFloorNothingMadeForDamagedLease(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, registry.MaxSequence)
	h := newSeqHost(t, "web_1")
	lease := h.path + ".seq.orders"
	g := h.open(t, reg)
	defer g.Close()
	s := openSeq(t, g, "orders")
	_, err := s.Next()
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, os.Remove(lease+".floor"))
	require.NoError(t, os.Remove(lease+".refill"))
	b, _ := os.ReadFile(lease)
	b[100] ^= 0xff
	writeInPlace(t, lease, b)
	_, err = g.Sequence("orders")
	requireCorruptFile(t, err, ".seq.")
	_, ferr := os.Lstat(lease + ".floor")
	_, rerr := os.Lstat(lease + ".refill")
	require.ErrorIs(t, ferr, fs.ErrNotExist, "a refused corrupt lease file made the floor file")
	require.ErrorIs(t, rerr, fs.ErrNotExist, "a refused corrupt lease file made the refill lock")
}

// A damaged floor without its lease file is refused and nothing is made.
func TestSequenceFloorNothingMadeForDamagedFloor(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, registry.MaxSequence)
	h := newSeqHost(t, "web_1")
	lease := h.path + ".seq.orders"
	g := h.open(t, reg)
	defer g.Close()
	s := openSeq(t, g, "orders")
	_, err := s.Next()
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, os.Remove(lease))
	require.NoError(t, os.Remove(lease+".refill"))
	b, _ := os.ReadFile(lease + ".floor")
	b[100] ^= 0xff
	writeInPlace(t, lease+".floor", b)
	_, err = g.Sequence("orders")
	requireCorruptFile(t, err, ".seq.")
	_, lerr := os.Lstat(lease)
	_, rerr := os.Lstat(lease + ".refill")
	require.ErrorIs(t, lerr, fs.ErrNotExist, "a refused corrupt floor made the lease file")
	require.ErrorIs(t, rerr, fs.ErrNotExist, "a refused corrupt floor made the refill lock")
}

// The floor removed while processes run (a new process makes a new one;
// the others open it again at their next update, not writing the removed
// one), then the lease file restored in place: nothing repeats.
func TestSequenceFloorRemovedThenRestore(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, registry.MaxSequence)
	h := newSeqHost(t, "web_1")
	lease := h.path + ".seq.orders"
	var issued []uint64
	g1 := h.open(t, reg)
	defer g1.Close()
	s1 := openSeq(t, g1, "orders", SequenceBlock(1), SequenceLeaseSize(1000))
	defer s1.Close()
	takeEach(t, s1, 3, &issued)
	require.NoError(t, os.Remove(lease+".floor"))
	g2 := h.open(t, reg)
	defer g2.Close()
	s2 := openSeq(t, g2, "orders", SequenceBlock(1), SequenceLeaseSize(1000))
	defer s2.Close()
	takeEach(t, s2, 2, &issued)
	backup, _ := os.ReadFile(lease)
	takeEach(t, s1, 10, &issued) // s1 must write the new floor
	writeInPlace(t, lease, backup)
	takeEach(t, s2, 5, &issued)
	requireUnique(t, issued, 1, registry.MaxSequence)
}

// A floor write that fails fails the update: nothing it took is handed
// out (else a later restore raised to the stale floor would hand those
// numbers out again), and the sequence goes on once writes work again;
// a restore in place then repeats nothing.
func TestSequenceFloorWriteFailure(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, registry.MaxSequence)
	h := newSeqHost(t, "web_1")
	lease := h.path + ".seq.orders"
	var issued []uint64
	x := &ExportFailFloorIO{}
	g1 := h.open(t, reg, ExportWithFailFloorIO(x))
	defer g1.Close()
	s1 := openSeq(t, g1, "orders", SequenceBlock(1), SequenceLeaseSize(10))
	defer s1.Close()
	g2 := h.open(t, reg)
	defer g2.Close()
	s2 := openSeq(t, g2, "orders", SequenceBlock(1), SequenceLeaseSize(10))
	defer s2.Close()
	takeEach(t, s1, 3, &issued)
	takeEach(t, s2, 2, &issued)
	backup, err := os.ReadFile(lease)
	require.NoError(t, err)
	x.Fail.Store(true)
	for range 12 { // within the lease and past it (a new lease)
		_, err := s1.NextN(1)
		require.ErrorIs(t, err, syscall.EIO)
	}
	x.Fail.Store(false)
	takeEach(t, s1, 12, &issued)
	writeInPlace(t, lease, backup)
	takeEach(t, s2, 5, &issued)
	takeEach(t, s1, 5, &issued)
	requireUnique(t, issued, 1, registry.MaxSequence)
}

// A generation above 2^63-1 cannot be reached: a file holding one is
// refused as damaged and nothing is handed out; at 2^63-1 the next whole
// write is refused, not wrapped to 0 (which would read as behind its
// floor).
func TestSequenceLeaseGenerationBound(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, registry.MaxSequence)
	h := newSeqHost(t, "web_1")
	lease := h.path + ".seq.orders"
	g := h.open(t, reg)
	defer g.Close()
	s := openSeq(t, g, "orders", SequenceBlock(1), SequenceLeaseSize(10))
	defer s.Close()
	var issued []uint64
	takeEach(t, s, 3, &issued)
	setLeaseGen(t, lease, 1<<63)
	_, err := s.NextN(1)
	requireCorruptFile(t, err, ".seq.")
	setLeaseGen(t, lease, 1<<63-1)
	setLeaseGen(t, lease+".floor", 1<<63-1)
	takeEach(t, s, 7, &issued) // the rest of the lease: the position alone
	_, err = s.NextN(1)        // a new lease: a whole write
	requireCorruptFile(t, err, ".seq.")
	requireUnique(t, issued, 1, registry.MaxSequence)
}

// A restore to a copy holding a lease taken in advance (ahead), first
// touched by a process that never saw the copy's ranges: raised to the
// floor's ranges, the one taken in advance included.
func TestSequenceFloorRestoreWithAhead(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, registry.MaxSequence)
	h := newSeqHost(t, "web_1")
	lease := h.path + ".seq.orders"
	var issued []uint64
	g1 := h.open(t, reg)
	defer g1.Close()
	s1 := openSeq(t, g1, "orders", SequenceBlock(1), SequenceLeaseSize(10))
	defer s1.Close()
	for range 7 {
		v, err := s1.Next()
		require.NoError(t, err)
		issued = append(issued, v)
		g1.ExportWaitSequences()
	}
	_, ahead, _, _, err := ReadLeaseFile(h.path, "orders")
	require.NoError(t, err)
	require.NotZero(t, ahead.First, "the copy holds a lease taken in advance")
	backup, err := os.ReadFile(lease)
	require.NoError(t, err)
	for range 8 {
		v, err := s1.Next()
		require.NoError(t, err)
		issued = append(issued, v)
	}
	require.NoError(t, s1.Close())
	g2 := h.open(t, reg)
	defer g2.Close()
	s2 := openSeq(t, g2, "orders", SequenceBlock(1), SequenceLeaseSize(10))
	defer s2.Close()
	writeInPlace(t, lease, backup)
	takeEach(t, s2, 20, &issued)
	requireUnique(t, issued, 1, registry.MaxSequence)
}

// leaseGen returns the generation of the lease record at path.
func leaseGen(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Len(t, b, 512)
	return binary.LittleEndian.Uint64(b[272:])
}

// A lease file restored in place exactly 1, 2 or many generations behind
// (one write of the whole record each: a new lease, or the switch to the
// lease taken in advance), alone or with its floor, while the host's
// processes run; then a take by the process that moved past the copy, a
// take by a process that opened the sequence before the restore, a
// process that opens it after the restore, the Sequence closed and opened
// again, or the host's processes closed and the host started again, before
// anything else is taken. No number is handed out twice, and the restore
// is raised with an error log (or, with the floor restored too and read
// first by a process that opens the sequence afterwards, the file's
// earlier lease is dropped at open, as the registry records a later one).
//
// The process that opened the sequence before the restore opened it at
// the copy when the floor stays (only the floor tells it the file went
// back), and after the moves when the floor is restored too (only what
// it saw tells).
func TestSequenceLeaseRestoredByDepth(t *testing.T) {
	t.Parallel()
	skipShort(t)
	type step int
	const (
		leaseStep step = iota // each generation past the copy is a new lease (the registry's record moves)
		aheadStep             // the first is the switch to the lease the copy holds taken in advance (the registry's record stays)
	)
	type then int
	const (
		takeSame   then = iota // the process that moved past the copy takes
		takeBefore             // the process that opened the sequence before the restore takes
		takeFresh              // a process that joins the host's claim opens the sequence and takes
		reopen                 // the process that opened before closes its Sequence, opens it again and takes
		restart                // the process that moved closed before the restore; the other closes; the host starts again and takes
		restartAll             // the process that moved closes, then the other; the host starts again and takes
	)
	thenNames := map[then]string{takeSame: "take by the process that moved", takeBefore: "take by a process opened before",
		takeFresh: "a process opened after", reopen: "Sequence closed and opened again", restart: "the other process closes, restart",
		restartAll: "both close, restart"}
	type tcase struct {
		name   string
		depth  uint64 // generations the copy is behind
		floors bool   // the floor restored too
		step   step
		then   then
	}
	var cases []tcase
	for _, depth := range []uint64{1, 2, 5} {
		for _, floors := range []bool{false, true} {
			for _, st := range []step{leaseStep, aheadStep} {
				for _, th := range []then{takeSame, takeBefore, takeFresh, reopen, restart, restartAll} {
					if floors && th == takeFresh && st == aheadStep && depth == 1 {
						// Not covered (seqlease.go): the copy's latest
						// lease is the one the registry records (the copy
						// took it in advance), and nothing the new process
						// can read tells that the copy's current one was
						// used up since.
						continue
					}
					what := "alone"
					if floors {
						what = "with its floor"
					}
					kind := "leases"
					if st == aheadStep {
						kind = "switch to the lease taken in advance"
					}
					cases = append(cases, tcase{fmt.Sprintf("%d back, %s, %s, %s", depth, what, kind, thenNames[th]), depth, floors, st, th})
				}
			}
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg := registrytest.NewRegistry()
			createSeq(t, reg, "orders", 1, registry.MaxSequence)
			h := newSeqHost(t, "web_1")
			lease := h.path + ".seq.orders"
			floor := lease + ".floor"
			var logs syncBuffer
			logOpt := WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))
			seqOpts := []SequenceOption{SequenceBlock(1), SequenceLeaseSize(10)}
			var issued []uint64

			g1 := h.open(t, reg, logOpt) // the process that moves past the copy
			s1 := openSeq(t, g1, "orders", seqOpts...)
			g2 := h.open(t, reg, logOpt) // the process that opens the sequence before the restore
			var s2 *Sequence
			open2 := func() { s2 = openSeq(t, g2, "orders", seqOpts...) }

			takeEach(t, s1, 3, &issued)
			if tc.step == aheadStep {
				// Blocks taken until the next lease is taken in advance.
				for i := 0; ; i++ {
					require.Less(t, i, 1000, "no lease taken in advance")
					_, ahead, _, _, err := ReadLeaseFile(h.path, "orders")
					require.NoError(t, err)
					if ahead.First != 0 {
						break
					}
					issued = append(issued, drawSeq(t, s1, 1)...)
					g1.ExportWaitSequences()
				}
			}
			if !tc.floors {
				open2() // at the copy: it sees no later generation
			}
			backupLease, err := os.ReadFile(lease)
			require.NoError(t, err)
			backupFloor, err := os.ReadFile(floor)
			require.NoError(t, err)
			copyGen := leaseGen(t, lease)
			copyCur, copyAhead, _, _, err := ReadLeaseFile(h.path, "orders")
			require.NoError(t, err)

			// The process moves tc.depth generations past the copy.
			for i := 0; leaseGen(t, lease) < copyGen+tc.depth; i++ {
				require.Less(t, i, 100_000, "the lease file's generation does not move")
				takeEach(t, s1, 1, &issued)
			}
			require.Equal(t, copyGen+tc.depth, leaseGen(t, lease), "exactly %d generations past the copy", tc.depth)
			if tc.step == aheadStep {
				later, _, _, _, err := ReadLeaseFile(h.path, "orders")
				require.NoError(t, err)
				require.NotEqual(t, copyCur.First, later.First, "the lease taken in advance is current")
				if tc.depth == 1 {
					require.Equal(t, copyAhead.First, later.First, "the copy's lease taken in advance is current")
				}
			}
			takeEach(t, s1, 1, &issued) // a number of the later generation
			if tc.floors {
				open2() // after the moves: it saw the later generation
			}
			if tc.then == restart {
				require.NoError(t, s1.Close())
				require.NoError(t, g1.Close())
			}

			logged := len(logs.String())
			if tc.floors {
				writeInPlace(t, floor, backupFloor)
			}
			writeInPlace(t, lease, backupLease)
			require.Equal(t, copyGen, leaseGen(t, lease), "restored")

			closeProc := func(g *Generator, s *Sequence) {
				require.NoError(t, s.Close())
				require.NoError(t, g.Close())
			}
			restartHost := func() {
				g := h.open(t, reg, logOpt) // the host's next start: a new claim
				defer g.Close()
				s := openSeq(t, g, "orders", seqOpts...)
				defer s.Close()
				takeEach(t, s, 15, &issued)
			}
			open1, open2nd := tc.then != restart, true
			switch tc.then {
			case takeSame:
				takeEach(t, s1, 15, &issued)
			case takeBefore:
				takeEach(t, s2, 15, &issued)
			case takeFresh:
				g3 := h.open(t, reg, logOpt)
				defer g3.Close()
				s3 := openSeq(t, g3, "orders", seqOpts...)
				defer s3.Close()
				takeEach(t, s3, 15, &issued)
			case reopen:
				require.NoError(t, s2.Close())
				open2()
				takeEach(t, s2, 15, &issued)
			case restart:
				closeProc(g2, s2)
				open2nd = false
				restartHost()
			case restartAll:
				closeProc(g1, s1)
				closeProc(g2, s2)
				open1, open2nd = false, false
				restartHost()
			}
			// The processes still running go on.
			if open1 {
				takeEach(t, s1, 15, &issued)
				issued = append(issued, drawSeq(t, s1, 15)...)
				closeProc(g1, s1)
			}
			if open2nd {
				takeEach(t, s2, 15, &issued)
				closeProc(g2, s2)
			}
			requireUnique(t, issued, 1, registry.MaxSequence)

			after := logs.String()[logged:]
			if tc.floors && tc.then == takeFresh {
				require.Contains(t, after, "its ranges are dropped (a gap)", "the earlier lease dropped at open:\n%s", after)
			} else {
				require.True(t, strings.Contains(after, "level=ERROR") && strings.Contains(after, "went back"),
					"the restore raised with an error log:\n%s", after)
			}
		})
	}
}

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
	t.Parallel()
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
	t.Parallel()
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

// A lease file restored in place from a backup within its current range
// while a process uses it (the sequence twin of
// TestReservationRollbackWhileRunning): the process raises it back to the
// highest position it saw, and no number is handed out twice. The registry
// cannot see this (its record is the range, not the position), so only the
// running process can.
func TestSequenceLeaseRollbackWhileRunning(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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

// A lease file restored in place to exactly one number before what the
// host took (its backup made just before the last NextN), read by a
// process that opens the sequence after the restore and so cannot know
// the position from memory: the floor raises the file back, and that
// number is not handed out again (the floor's check is not off by one).
func TestSequenceLeaseRestoredOneBelowTheFloor(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, registry.MaxSequence)
	h := newSeqHost(t, "web_1")
	g1 := h.open(t, reg)
	defer g1.Close()
	s1 := openSeq(t, g1, "orders", SequenceBlock(1), SequenceLeaseSize(1000))
	defer s1.Close()
	lease := h.path + ".seq.orders"
	var issued []uint64
	takeEach(t, s1, 2, &issued)
	backup, err := os.ReadFile(lease)
	require.NoError(t, err)
	takeEach(t, s1, 1, &issued)
	writeInPlace(t, lease, backup)

	g2 := h.open(t, reg) // joins the host's claim
	defer g2.Close()
	s2 := openSeq(t, g2, "orders", SequenceBlock(1), SequenceLeaseSize(1000))
	defer s2.Close()
	takeEach(t, s2, 1, &issued)
	requireUnique(t, issued, 1, registry.MaxSequence)
}

// The floor file is checked as the lease file is: one that is not a
// record of this lease file is refused (ErrCorrupt, naming the lease file) and nothing is
// handed out; a lease file without a floor (written before floors
// existed) is used and gets one.
func TestSequenceLeaseFloorChecked(t *testing.T) {
	t.Parallel()
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

// ReadLeaseFile waits for the lease file's lock no longer than the
// default registry timeout, whoever holds it.
func TestReadLeaseFileWhileAnotherUserHoldsIt(t *testing.T) {
	t.Parallel()
	skipShort(t)
	counter := filepath.Join(lockDir(t), "c")
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, 1_000_000)
	g, err := Open(counter, "vm", WithRegistry(reg), WithFileMode(0o644))
	require.NoError(t, err)
	s, err := g.Sequence("orders")
	require.NoError(t, err)
	_, err = s.NextN(1)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, g.Close())
	release := testfs.HoldFlockCancel(t, counter+".seq.orders")
	err = returnsWithin(t, 60*time.Second, release, "ReadLeaseFile", func() error {
		_, _, _, _, err := ReadLeaseFile(counter, "orders")
		return err
	})
	require.ErrorIs(t, err, ErrLocked)
}
