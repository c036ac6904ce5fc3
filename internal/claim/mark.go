package claim

import (
	"encoding/binary"
	"fmt"

	"github.com/snapid/snapid/internal/errs"
)

// Mark is the content of the mark file (see the package documentation).
type Mark struct{ Mark, Floor uint64 }

// MarkSize is the size of a mark file that is not empty.
const MarkSize = 16

// DecodeMark decodes a mark file of size bytes whose content (all of it,
// or its first bytes if it is too long) is b; an empty one reads as zero
// (nothing may be issued).
func DecodeMark(b []byte, size int64) (Mark, error) {
	switch {
	case size == 0 && len(b) == 0:
		return Mark{}, nil
	case size == MarkSize && len(b) == MarkSize:
		return Mark{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])}, nil
	}
	return Mark{}, fmt.Errorf("%w: it is %d bytes; a mark file is %d bytes or empty", errs.ErrCorruptMark, size, MarkSize)
}
