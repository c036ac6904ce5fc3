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
// Layout (leaseSize bytes, integers unsigned 64-bit little-endian):
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
	leaseSize    = 512
	leaseMagic   = "snapseq2" // written by this version; "snapseq1" (no generation) is read as generation 0
	leaseMagicV1 = "snapseq1"
	maxLeaseGen  = 1<<63 - 1 // a generation above it is refused as damaged (it cannot be reached)
	leaseCRCAt   = leaseSize - 4
	leaseStrSize = 64
	leaseGenAt   = 272
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// seqRange is an inclusive range; first 0 means none.
type seqRange struct{ first, last uint64 }

func (r seqRange) none() bool { return r.first == 0 }

// leaseRecord is the content of a lease file.
type leaseRecord struct {
	pos                    uint64
	gen                    uint64 // see leaseGenAt
	cur, ahead             seqRange
	session, node, seq, ow string
}

// latest is the most recent lease the file holds.
func (l *leaseRecord) latest() seqRange {
	if !l.ahead.none() {
		return l.ahead
	}
	return l.cur
}

// left is how many numbers cur still has.
func (l *leaseRecord) left() uint64 {
	if l.cur.none() || l.pos > l.cur.last {
		return 0
	}
	return l.cur.last - l.pos + 1
}

// void drops the ranges (a gap) and binds the file to session.
func (l *leaseRecord) void(session string) {
	l.cur, l.ahead, l.pos, l.session = seqRange{}, seqRange{}, 0, session
}

func encodeLease(l *leaseRecord) ([]byte, error) {
	b := make([]byte, leaseSize)
	return b, encodeLeaseTo(b, l)
}

// encodeLeaseTo encodes l into b (leaseSize bytes, zero).
func encodeLeaseTo(b []byte, l *leaseRecord) error {
	copy(b, leaseMagic)
	binary.LittleEndian.PutUint64(b[8:], l.pos)
	for i, v := range []uint64{l.cur.first, l.cur.last, l.ahead.first, l.ahead.last} {
		binary.LittleEndian.PutUint64(b[16+8*i:], v)
	}
	for i, s := range []string{l.session, l.node, l.seq, l.ow} {
		size := leaseStrSize
		if i == 3 {
			size = 32
		}
		if len(s) > size {
			return fmt.Errorf("snapid: %w: %q does not fit a lease file (%d bytes at most)", ErrInvalidOption, s, size)
		}
		copy(b[48+leaseStrSize*i:], s)
	}
	binary.LittleEndian.PutUint64(b[leaseGenAt:], l.gen)
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

// decodeLease checks and decodes a lease file's content (n bytes of it
// read, size its size).
func decodeLease(b []byte, size int64) (leaseRecord, error) {
	bad := func(format string, args ...any) (leaseRecord, error) {
		return leaseRecord{}, fmt.Errorf("%w: "+format, append([]any{errCorruptLease}, args...)...)
	}
	if size != leaseSize || len(b) != leaseSize {
		return bad("it is %d bytes; a lease file is %d", size, leaseSize)
	}
	v1 := string(b[:8]) == leaseMagicV1
	if string(b[:8]) != leaseMagic && !v1 {
		return bad("it does not start with %q", leaseMagic)
	}
	if binary.LittleEndian.Uint32(b[leaseCRCAt:]) != leaseCRC(b) {
		return bad("checksum mismatch (damaged, or a torn write)")
	}
	var l leaseRecord
	l.pos = binary.LittleEndian.Uint64(b[8:])
	u := func(i int) uint64 { return binary.LittleEndian.Uint64(b[16+8*i:]) }
	l.cur, l.ahead = seqRange{u(0), u(1)}, seqRange{u(2), u(3)}
	l.gen = binary.LittleEndian.Uint64(b[leaseGenAt:])
	if v1 {
		l.gen = 0
	}
	if l.gen > maxLeaseGen {
		return bad("generation %d is above %d", l.gen, uint64(maxLeaseGen))
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
	l.session, l.node, l.seq, l.ow = strs[0], strs[1], strs[2], strs[3]
	for _, r := range []seqRange{l.cur, l.ahead} {
		if !r.none() && (r.last < r.first || r.last > registry.MaxSequence) {
			return bad("range [%d, %d] is not a valid range", r.first, r.last)
		}
	}
	switch {
	case l.cur.none() && (l.pos != 0 || !l.ahead.none()):
		return bad("position %d or a next lease without a current one", l.pos)
	case !l.cur.none() && (l.pos < l.cur.first || l.pos > l.cur.last+1):
		return bad("position %d is outside its range [%d, %d]", l.pos, l.cur.first, l.cur.last)
	}
	return l, nil
}
