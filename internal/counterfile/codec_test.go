package counterfile

import (
	"math"
	"testing"

	"github.com/snapid/snapid/internal/errs"
	"github.com/stretchr/testify/require"
)

// The 8 bytes are unsigned little-endian, and nothing but 8 bytes decodes:
// an empty or short file is never read as 0.
func TestCodec(t *testing.T) {
	t.Parallel()
	for _, v := range []uint64{0, 1, 255, 256, math.MaxUint64} {
		b := Encode(v)
		got, err := Decode(b[:])
		require.NoError(t, err)
		require.Equal(t, v, got)
	}
	require.Equal(t, [Size]byte{1, 2}, Encode(0x0201))
	for _, n := range []int{0, 1, 7, 9, 64} {
		_, err := Decode(make([]byte, n))
		require.ErrorIs(t, err, errs.ErrCorrupt, "%d bytes", n)
	}
}
