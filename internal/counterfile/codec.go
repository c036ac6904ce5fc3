package counterfile

import (
	"encoding/binary"
	"fmt"

	"github.com/snapid/snapid/internal/errs"
)

// Size is the exact size of a counter file in bytes.
const Size = 8

// Encode returns the on-disk form of a counter whose last issued number is
// v: 8 bytes, unsigned little-endian (the bytes of Snap!'s counter.u64 on
// x86).
func Encode(v uint64) [Size]byte {
	var b [Size]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return b
}

// Decode decodes the content of a counter file. Anything but exactly 8
// bytes is an error wrapping errs.ErrCorrupt; in particular an empty or
// short file is never read as 0.
func Decode(b []byte) (uint64, error) {
	if len(b) != Size {
		return 0, fmt.Errorf("%w: it is %d bytes, a counter file is exactly %d", errs.ErrCorrupt, len(b), Size)
	}
	return binary.LittleEndian.Uint64(b), nil
}
