package leasefile

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/registry"
)

// The layout's offsets and sizes, and the largest generation (see the
// package documentation).
const (
	Size         = 512
	leaseMagic   = "snapseq2" // written by this version; "snapseq1" (no generation) is read as generation 0
	leaseMagicV1 = "snapseq1"
	MaxGen       = 1<<63 - 1 // a generation above it is refused as damaged (it cannot be reached)
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
			return fmt.Errorf("snapid: %w: %q does not fit a lease file (%d bytes at most)", errs.ErrInvalidOption, s, size)
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
		return Record{}, fmt.Errorf("%w: "+format, append([]any{errs.ErrCorruptLease}, args...)...)
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
	if l.Gen > MaxGen {
		return bad("generation %d is above %d", l.Gen, uint64(MaxGen))
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
