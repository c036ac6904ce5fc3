package hoststate

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRecordRoundTrip(t *testing.T) {
	t.Parallel()
	r := Record{Name: "vm1", Dev: 7, Ino: 9, Path: "/c", Forms: []Form{{Kind: "striped", Node: 3, Stride: 100, Upto: 40}, {Kind: "striped", Node: 3, Stride: 10, Current: true}},
		Node: 3, Stride: 10, Floor: 5, Mark: 1029, Gen: 4}
	b, err := encode(r)
	require.NoError(t, err)
	require.Len(t, b, FileSize)
	got, slot, err := decode(b, "vm1")
	require.NoError(t, err)
	require.Equal(t, 0, slot)
	require.Equal(t, r, got)
	require.True(t, got.HasForm(Form{Kind: "striped", Node: 3, Stride: 10}), "a form is found by its kind, node and stride")
	require.Equal(t, 0, got.FormIndex(Form{Kind: "striped", Node: 3, Stride: 100, Current: true}))
	require.Equal(t, -1, got.FormIndex(Form{Kind: "decimal", Node: 3}))
}

// The newer whole copy wins; a torn newer copy leaves the older one, and
// no whole copy at all is an error, never "no record".
func TestRecordTwoCopies(t *testing.T) {
	t.Parallel()
	older, err := encodeSlot(Record{Name: "vm1", Floor: 1, Gen: 1})
	require.NoError(t, err)
	newer, err := encodeSlot(Record{Name: "vm1", Floor: 2, Gen: 2})
	require.NoError(t, err)
	file := append(append([]byte{}, older...), newer...)
	r, slot, err := decode(file, "vm1")
	require.NoError(t, err)
	require.Equal(t, uint64(2), r.Floor)
	require.Equal(t, 1, slot)

	torn := append([]byte{}, file...)
	torn[SlotSize+header+3] ^= 0xff // the newer copy's payload
	r, slot, err = decode(torn, "vm1")
	require.NoError(t, err)
	require.Equal(t, uint64(1), r.Floor, "the torn newer copy is skipped")
	require.Equal(t, 0, slot)

	torn[header+3] ^= 0xff
	_, _, err = decode(torn, "vm1")
	require.True(t, errors.Is(err, ErrCorrupt), "%v", err)

	_, _, err = decode(file[:100], "vm1")
	require.True(t, errors.Is(err, ErrCorrupt), "%v", err)
	_, _, err = decode(file, "vm2")
	require.True(t, errors.Is(err, ErrCorrupt), "another name's record: %v", err)
}

func TestRecordTooLarge(t *testing.T) {
	t.Parallel()
	r := Record{Name: "vm1"}
	for i := range 200 {
		r.Forms = append(r.Forms, Form{Kind: "striped", Node: uint64(i + 1), Stride: 1 << 40})
	}
	_, err := encodeSlot(r)
	require.Error(t, err)
	require.Contains(t, err.Error(), "too many forms (200)")
}
