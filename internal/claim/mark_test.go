package claim

import (
	"encoding/binary"
	"testing"

	"github.com/snapid/snapid/internal/errs"
	"github.com/stretchr/testify/require"
)

func TestDecodeMark(t *testing.T) {
	t.Parallel()
	var b [MarkSize + 1]byte
	binary.LittleEndian.PutUint64(b[:], 700)
	binary.LittleEndian.PutUint64(b[8:], 600)
	m, err := DecodeMark(b[:MarkSize], MarkSize)
	require.NoError(t, err)
	require.Equal(t, Mark{Mark: 700, Floor: 600}, m)

	m, err = DecodeMark(nil, 0)
	require.NoError(t, err)
	require.Equal(t, Mark{}, m, "an empty mark file: nothing may be issued")

	for _, tc := range []struct {
		name string
		b    []byte
		size int64
	}{
		{"short", b[:8], 8},
		{"long", b[:MarkSize+1], MarkSize + 1},
		{"longer than read", b[:MarkSize], 4096},
	} {
		_, err := DecodeMark(tc.b, tc.size)
		require.ErrorIs(t, err, errs.ErrCorruptMark, tc.name)
	}
}
