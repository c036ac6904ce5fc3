package leasefile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/registry"
)

// A lease file's positions and ranges at the boundaries: a range reaching
// past MaxSequence (what a signed 64-bit column cannot hold, read back
// negative) or a position outside its range is corruption, refused with
// errs.ErrCorruptLease; everything up to MaxSequence, and the position one past
// a used-up range ending at MaxSequence, reads back as written.
func TestLeaseFileBoundaries(t *testing.T) {
	t.Parallel()
	const (
		max   = registry.MaxSequence
		two63 = uint64(1) << 63
	)
	values := []uint64{0, 1, max - 1, max, two63, math.MaxUint64}
	inRange := func(v uint64) bool { return v >= 1 && v <= max }
	type tc struct {
		what string
		l    Record
		ok   bool
	}
	var cases []tc
	for _, v := range values {
		cases = append(cases,
			// One number, taken next: cur [v, v] at v. v = 0 is no range.
			tc{fmt.Sprintf("cur [%d, %d] at %d", v, v, v), Record{Pos: v, Cur: Range{v, v}}, v == 0 || inRange(v)},
			// A range from 1 up to v.
			tc{fmt.Sprintf("cur [1, %d] at 1", v), Record{Pos: 1, Cur: Range{1, v}}, inRange(v)},
			// A range from v up to max.
			tc{fmt.Sprintf("cur [%d, max] at max", v), Record{Pos: max, Cur: Range{v, max}}, inRange(v)},
			// The position anywhere in [1, max+1] of a range [1, max]: max+1
			// is a used-up range.
			tc{fmt.Sprintf("cur [1, max] at %d", v), Record{Pos: v, Cur: Range{1, max}}, v >= 1 && v <= two63},
			// The next lease, taken ahead, at v.
			tc{fmt.Sprintf("ahead [%d, %d]", v, v), Record{Pos: 1, Cur: Range{1, 1}, Ahead: Range{v, v}}, v == 0 || inRange(v)},
			tc{fmt.Sprintf("ahead [2, %d]", v), Record{Pos: 1, Cur: Range{1, 1}, Ahead: Range{2, v}}, v >= 2 && v <= max},
			// A position without a current range.
			tc{fmt.Sprintf("no range at %d", v), Record{Pos: v}, v == 0},
		)
	}
	for _, c := range cases {
		c.l.Session, c.l.Node, c.l.Seq, c.l.Owner = "s1", "web_1", "orders", "0123456789abcdef0123456789abcdef"
		b, err := Encode(&c.l)
		if err != nil {
			t.Fatalf("%s: encode: %v", c.what, err)
		}
		// The hot path writes the position alone, outside the checksum:
		// decode it as written there too.
		binary.LittleEndian.PutUint64(b[8:], c.l.Pos)
		got, err := Decode(b, Size)
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: refused: %v", c.what, err)
		case c.ok && got != c.l:
			t.Errorf("%s: read back %+v, wrote %+v", c.what, got, c.l)
		case !c.ok && !errors.Is(err, errs.ErrCorruptLease):
			t.Errorf("%s: want errs.ErrCorruptLease, got %+v, %v", c.what, got, err)
		}
	}
}
