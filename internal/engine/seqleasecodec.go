package engine

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/snapid/snapid/registry"
)

// The sequence lease file <counter>.seq.<sequence> holds the host's lease
// of a sequence, shared by the host's processes: each takes blocks of
// numbers from it under an exclusive flock on the file itself (as for the
// counter), writing the new position in place and syncing it before any
// number of the block is returned. It follows the counter file's rules:
// created atomically (createFileAtomically), never replaced, checked on
// every read (size, magic, checksum, ranges), and a file in another
// format is refused with errCorruptLease and left as it is.
//
// Layout (Size bytes, integers unsigned 64-bit little-endian):
//
//	  0  8  magic "snapseq2" ("snapseq1": written by a version without
//	        generations, read as generation 0; this version writes
//	        "snapseq2", which that version refuses, so that it never
//	        rewrites a file whose floor has a later generation)
//	  8  8  pos: the next number to hand out from cur (cur.last+1 when
//	        used up; 0 without cur). The hot path writes these 8 bytes
//	        alone, so the checksum does not cover them.
//	 16  8  cur first (0: no current range)
//	 24  8  cur last
//	 32  8  ahead first (0: none): the next lease, taken in advance
//	 40  8  ahead last
//	 48 64  session of the host's claim the ranges were leased under
//	112 64  node name
//	176 64  sequence name
//	240 32  owner token
//	272  8  generation: one more at every write of the whole record (a
//	        new lease, a new claim, ranges dropped); at most 2^63-1
//	280 ..  zero
//	508  4  CRC-32C of bytes 0..507, bytes 8..15 (pos) read as zero
//
// The floor file <lease file>.floor holds, in the same format, the
// record as the host's last update left it (written after the lease
// file, before any number is handed out, and not synced: it is a floor
// for a lease file restored or copied over in place while the host runs,
// not a durable record). Every update checks that the floor it has open
// is still the one at its path (reopening it if not) and reads it under
// the lease file's lock: a lease file at an earlier generation than a
// floor of the same claim, or of the host's current claim, or at the
// same generation and ranges with an earlier position, went backwards,
// and is raised back to the floor before anything is taken, by whichever
// process of the host comes first (the twin of the counter's floor in
// the mark file). A floor write that fails fails the update: nothing is
// handed out. Empty or all zeros: no floor. A lease file and its floor
// restored together are not caught in general: each process raises the
// file to what it last saw itself (an earlier generation to the record of
// its last update, an earlier position in the same ranges to the highest
// it saw; see Sequence.updateContext), and a process opening the
// sequence afterwards drops an earlier lease (Sequence.verify; not a
// copy whose lease taken in advance is the registry's record), but what
// other processes took beyond what a process saw can repeat.
//
// Strings are ASCII, zero-padded. The ranges are trusted only while the
// session is the host's current claim and the latest range (ahead, else
// cur) is the lease the registry records for the host (see
// Sequence.verify); otherwise they are void: a gap, never a repeat.
const (
	Size         = 512
	leaseMagic   = "snapseq2" // written by this version; "snapseq1" (no generation) is read as generation 0
	leaseMagicV1 = "snapseq1"
	maxLeaseGen  = 1<<63 - 1 // a generation above it is refused as damaged (it cannot be reached)
	leaseCRCAt   = Size - 4
	leaseStrSize = 64
	leaseGenAt   = 272
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Range is an inclusive range; first 0 means none.
type Range struct{ First, Last uint64 }

func (r Range) None() bool { return r.First == 0 }

// Record is the content of a lease file.
type Record struct {
	Pos                       uint64
	Gen                       uint64 // see leaseGenAt
	Cur, Ahead                Range
	Session, Node, Seq, Owner string
}

// Latest is the most recent lease the file holds.
func (l *Record) Latest() Range {
	if !l.Ahead.None() {
		return l.Ahead
	}
	return l.Cur
}

// Left is how many numbers cur still has.
func (l *Record) Left() uint64 {
	if l.Cur.None() || l.Pos > l.Cur.Last {
		return 0
	}
	return l.Cur.Last - l.Pos + 1
}

// Void drops the ranges (a gap) and binds the file to session.
func (l *Record) Void(session string) {
	l.Cur, l.Ahead, l.Pos, l.Session = Range{}, Range{}, 0, session
}

func Encode(l *Record) ([]byte, error) {
	b := make([]byte, Size)
	return b, EncodeTo(b, l)
}

// EncodeTo encodes l into b (leaseSize bytes, zero).
func EncodeTo(b []byte, l *Record) error {
	copy(b, leaseMagic)
	binary.LittleEndian.PutUint64(b[8:], l.Pos)
	for i, v := range []uint64{l.Cur.First, l.Cur.Last, l.Ahead.First, l.Ahead.Last} {
		binary.LittleEndian.PutUint64(b[16+8*i:], v)
	}
	for i, s := range []string{l.Session, l.Node, l.Seq, l.Owner} {
		size := leaseStrSize
		if i == 3 {
			size = 32
		}
		if len(s) > size {
			return fmt.Errorf("snapid: %w: %q does not fit a lease file (%d bytes at most)", ErrInvalidOption, s, size)
		}
		copy(b[48+leaseStrSize*i:], s)
	}
	binary.LittleEndian.PutUint64(b[leaseGenAt:], l.Gen)
	binary.LittleEndian.PutUint32(b[leaseCRCAt:], leaseCRC(b))
	return nil
}

func leaseCRC(b []byte) uint32 {
	var zero [8]byte
	h := crc32.New(castagnoli)
	h.Write(b[:8])
	h.Write(zero[:])
	h.Write(b[16:leaseCRCAt])
	return h.Sum32()
}

// Decode checks and decodes a lease file's content (n bytes of it
// read, size its size).
func Decode(b []byte, size int64) (Record, error) {
	bad := func(format string, args ...any) (Record, error) {
		return Record{}, fmt.Errorf("%w: "+format, append([]any{errCorruptLease}, args...)...)
	}
	if size != Size || len(b) != Size {
		return bad("it is %d bytes; a lease file is %d", size, Size)
	}
	v1 := string(b[:8]) == leaseMagicV1
	if string(b[:8]) != leaseMagic && !v1 {
		return bad("it does not start with %q", leaseMagic)
	}
	if binary.LittleEndian.Uint32(b[leaseCRCAt:]) != leaseCRC(b) {
		return bad("checksum mismatch (damaged, or a torn write)")
	}
	var l Record
	l.Pos = binary.LittleEndian.Uint64(b[8:])
	u := func(i int) uint64 { return binary.LittleEndian.Uint64(b[16+8*i:]) }
	l.Cur, l.Ahead = Range{u(0), u(1)}, Range{u(2), u(3)}
	l.Gen = binary.LittleEndian.Uint64(b[leaseGenAt:])
	if v1 {
		l.Gen = 0
	}
	if l.Gen > maxLeaseGen {
		return bad("generation %d is above %d", l.Gen, uint64(maxLeaseGen))
	}
	strs := make([]string, 4)
	for i := range strs {
		size := leaseStrSize
		if i == 3 {
			size = 32
		}
		f := b[48+leaseStrSize*i : 48+leaseStrSize*i+size]
		n := 0
		for n < len(f) && f[n] != 0 {
			if f[n] < ' ' || f[n] > '~' {
				return bad("field %d holds a byte that is not printable ASCII", i)
			}
			n++
		}
		for _, c := range f[n:] {
			if c != 0 {
				return bad("field %d is not zero-padded", i)
			}
		}
		strs[i] = string(f[:n])
	}
	l.Session, l.Node, l.Seq, l.Owner = strs[0], strs[1], strs[2], strs[3]
	for _, r := range []Range{l.Cur, l.Ahead} {
		if !r.None() && (r.Last < r.First || r.Last > registry.MaxSequence) {
			return bad("range [%d, %d] is not a valid range", r.First, r.Last)
		}
	}
	switch {
	case l.Cur.None() && (l.Pos != 0 || !l.Ahead.None()):
		return bad("position %d or a next lease without a current one", l.Pos)
	case !l.Cur.None() && (l.Pos < l.Cur.First || l.Pos > l.Cur.Last+1):
		return bad("position %d is outside its range [%d, %d]", l.Pos, l.Cur.First, l.Cur.Last)
	}
	return l, nil
}
