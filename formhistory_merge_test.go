package snapid

import (
	"fmt"
	"hash/crc32"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// The two copies are read together (mergeForms): whichever is older, or
// carries the higher generation, no form either records is forgotten; the
// form in use is the newer copy's, and a form only the other records as in
// use is taken as left at the counter's value now (the most it can have
// issued: the copy with the higher generation may be the older one, if
// both were once removed and the history started again).
func TestFormHistoryMerge(t *testing.T) {
	s := func(stride, node, upto uint64) formEntry {
		return formEntry{form: FormatStriped, stride: stride, node: node, upto: upto}
	}
	cur := func(stride, node uint64) formEntry {
		return formEntry{form: FormatStriped, stride: stride, node: node, current: true}
	}
	unknown := func(stride, node, upto uint64) formEntry {
		e := s(stride, node, upto)
		e.unknown = true
		return e
	}
	dec := func(node uint64) formEntry { return formEntry{form: FormatDecimal, node: node} }
	reg := func(name string, node, stride uint64) formEntry {
		return formEntry{registry: name, node: node, stride: stride}
	}
	for _, tc := range []struct {
		name     string
		a        formHistory
		genA     uint64
		b        formHistory
		genB     uint64
		want     formHistory
		cur      uint64 // the counter's value, for resolve
		wantHigh uint64 // highest id of a form other than stride 7 node 2
	}{
		{
			name: "older primary restored from a backup",
			a:    formHistory{cur(10, 1)}, genA: 1,
			b: formHistory{s(10, 1, 5), cur(100, 11)}, genB: 2,
			want: formHistory{unknown(10, 1, 5), cur(100, 11)},
			cur:  25, wantHigh: 25*100 + 11,
		},
		{
			name: "older copy restored from a backup",
			a:    formHistory{s(10, 1, 5), cur(100, 11)}, genA: 2,
			b: formHistory{cur(10, 1)}, genB: 1,
			want: formHistory{unknown(10, 1, 5), cur(100, 11)},
			cur:  25, wantHigh: 25*100 + 11,
		},
		{
			name: "an old history with a higher generation (both copies once removed)",
			a:    formHistory{cur(100, 11)}, genA: 1,
			b: formHistory{s(100, 11, 3), cur(10, 1), dec(4)}, genB: 9,
			want: formHistory{unknown(100, 11, 3), cur(10, 1), dec(4)},
			cur:  40, wantHigh: 40*100 + 11,
		},
		{
			name: "written up to the primary only (a power cut between the copies)",
			a:    formHistory{s(10, 1, 5), s(100, 11, 25), cur(1000, 7), reg("vm", 7, 1000)}, genA: 3,
			b: formHistory{s(10, 1, 5), cur(100, 11), reg("vm", 7, 0)}, genB: 2,
			want: formHistory{s(10, 1, 5), unknown(100, 11, 25), cur(1000, 7), reg("vm", 7, 1000)},
			cur:  30, wantHigh: 30*1000 + 7,
		},
		{
			name: "forms only the older copy records",
			a:    formHistory{s(10, 1, 9), cur(100, 11)}, genA: 5,
			b: formHistory{s(10, 1, 5), s(20, 3, 2), dec(8), reg("web", 8, 0)}, genB: 4,
			want: formHistory{s(10, 1, 9), cur(100, 11), s(20, 3, 2), dec(8), reg("web", 8, 0)},
			cur:  12, wantHigh: 12*100 + 11,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := mergeForms(tc.a, tc.genA, tc.b, tc.genB)
			require.Equal(t, tc.want, h)
			// Either order of the copies on disk gives the same forms.
			swapped := mergeForms(tc.b, tc.genB, tc.a, tc.genA)
			if tc.genA != tc.genB {
				require.ElementsMatch(t, h, swapped)
			}
			h.resolve(tc.cur)
			high, ok := h.highestStriped(7, 2, tc.cur)
			require.True(t, ok)
			require.Equal(t, tc.wantHigh, high)
			for _, e := range h {
				require.False(t, e.unknown, "resolve left %+v unknown", e)
			}
			// What is written decodes to what was merged.
			got, gen, err := decodeFormsGen(encodeForms(h, 7))
			require.NoError(t, err)
			require.Equal(t, uint64(7), gen)
			require.Equal(t, h, got)
		})
	}
}

// Both copies restored from one backup forget a striped form the number
// file beside the counter still records (the registry's stride 100 and
// node number 3): the form is taken back into the history as left at the
// counter's value, and the return to stride 10 starts above every id the
// counter handed out under it (4003 = 400×10+3 without that).
func TestFormHistoryBothCopiesRestoredNumberFileRemembers(t *testing.T) {
	c, f := openTestCounter(t, 0)
	require.Equal(t, uint64(0), adopt(t, c, f, 10, 3))
	require.NoError(t, c.withLock(func() error { return c.store(5) })) // 13 … 53
	backup := map[string][]byte{}
	for _, p := range f.paths {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		backup[p] = b
	}
	require.NoError(t, os.WriteFile(f.counterPath+numberSuffix, encodeNumberFile(numberRecord{name: "vm1", number: 3, stride: 100}), 0o600))
	adopt(t, c, f, 100, 3)
	require.NoError(t, c.withLock(func() error { return c.store(40) })) // up to 4003
	for p, b := range backup {
		require.NoError(t, os.WriteFile(p, b, 0o600))
	}
	v := adopt(t, c, f, 10, 3)
	require.Equal(t, uint64(400), v, "the first id of stride 10 node 3 must be 4013, above 4003")
	h, repair, err := f.read()
	require.NoError(t, err)
	require.False(t, repair)
	require.Equal(t, formHistory{
		{form: FormatStriped, stride: 10, node: 3, current: true},
		{registry: "vm1", node: 3, stride: 100},
		{form: FormatStriped, stride: 100, node: 3, upto: 40},
	}, h)
}

// A copy a version 1 history wrote (no generation, no registry lines) is
// read as generation 0, so any copy written since wins the form in use.
func TestFormHistoryReadsVersion1(t *testing.T) {
	body := "snapid-forms 1\nstriped 10 1 5\nstriped 100 11 current\ndecimal 4\n"
	b := fmt.Appendf([]byte(body), "crc32c %08x\n", crc32.Checksum([]byte(body), crc32c))
	h, gen, err := decodeFormsGen(b)
	require.NoError(t, err)
	require.Equal(t, uint64(0), gen)
	require.Equal(t, formHistory{
		{form: FormatStriped, stride: 10, node: 1, upto: 5},
		{form: FormatStriped, stride: 100, node: 11, current: true},
		{form: FormatDecimal, node: 4},
	}, h)
}

// A version 2 copy without its generation line is not read, even with a
// matching checksum.
func TestFormHistoryGenerationLineRequired(t *testing.T) {
	for _, line := range []string{"5", "gen 5", "generation", "generation 05", "generation -1"} {
		body := "snapid-forms 2\n" + line + "\nstriped 10 1 current\n"
		b := fmt.Appendf([]byte(body), "crc32c %08x\n", crc32.Checksum([]byte(body), crc32c))
		_, _, err := decodeFormsGen(b)
		require.Error(t, err, "line %q", line)
	}
}
