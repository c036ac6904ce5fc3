package snapid_test

import (
	"encoding/binary"
	"hash/crc32"
	"io/fs"
	"os"
	"syscall"
	"testing"

	. "github.com/snapid/snapid"
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
