package engine

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapid/snapid/internal/hoststate"
	"github.com/stretchr/testify/require"
)

// The files earlier versions kept beside the counter, as they wrote them:
// the migration is tested from these bytes.

// encodeForms is one copy of a form history (see migrate.go).
func encodeForms(h formHistory, gen uint64) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\ngeneration %d\n", formsHeader, gen)
	for _, e := range h {
		switch {
		case e.registry != "":
			fmt.Fprintf(&b, "registry %s %d %d\n", e.registry, e.node, e.stride)
		case e.form == FormatDecimal:
			fmt.Fprintf(&b, "decimal %d\n", e.node)
		case e.current:
			fmt.Fprintf(&b, "striped %d %d current\n", e.stride, e.node)
		default:
			fmt.Fprintf(&b, "striped %d %d %d\n", e.stride, e.node, e.upto)
		}
	}
	body := b.String()
	return fmt.Appendf([]byte(body), "crc32c %08x\n", crc32.Checksum([]byte(body), crc32c))
}

// encodeNumberFile is a number file (see migrate.go), its claim line the
// hash of a claim's session.
func encodeNumberFile(f numberRecord) []byte {
	return fmt.Appendf(nil, "snapid-number 2\nname %s\nnumber %d\nstride %d\nclaim %016x\n", f.name, f.number, f.stride, uint64(0x5eed5eed5eed5eed))
}

func striped(stride, node, upto uint64) formEntry {
	return formEntry{form: FormatStriped, stride: stride, node: node, upto: upto}
}

func stripedCurrent(stride, node uint64) formEntry {
	return formEntry{form: FormatStriped, stride: stride, node: node, current: true}
}

// oldHost is a counter holding v with the files an earlier version kept
// beside it (suffix: content), in a test host of its own.
func oldHost(t *testing.T, v uint64, files map[string][]byte) (dir, path string) {
	t.Helper()
	dir, path = ctPath(t)
	ctWrite(t, path, v)
	for suffix, b := range files {
		require.NoError(t, os.WriteFile(path+suffix, b, 0o600))
	}
	return dir, path
}

// record reads the host's record of name for the counter at path.
func record(t *testing.T, path, name string) hoststate.Record {
	t.Helper()
	p, err := hoststate.OpenPlace(testBindingDir(path), hoststate.PlaceOptions{})
	require.NoError(t, err)
	defer p.Close()
	r, ok, err := p.Read(name)
	require.NoError(t, err)
	require.True(t, ok, "no record of %s", name)
	return r
}

// requireGone fails if any of the earlier version's files is left.
func requireGone(t *testing.T, path string) {
	t.Helper()
	for _, s := range []string{formsSuffix, formsCopySuffix, numberSuffix, releasedSuffix} {
		require.NoFileExists(t, path+s, "the migration left %s", s)
	}
}

// A counter that issued striped ids under stride 100 node 13 (up to
// 3013), and decimal ids of node 4, with the two copies of the history
// an earlier version kept (the copy older, without the decimal form): its
// first Open takes every form into the record, with the form left at
// the counter's value; a new form starts above 3013; the files are gone.
func TestMigrateFormHistory(t *testing.T) {
	t.Parallel()
	_, path := oldHost(t, 30, map[string][]byte{
		formsSuffix:     encodeForms(formHistory{stripedCurrent(100, 13), {form: FormatDecimal, node: 4}}, 2),
		formsCopySuffix: encodeForms(formHistory{stripedCurrent(100, 13)}, 1),
	})
	g, err := Open(path, "vm1", WithSync(false), WithFormat(FormatStriped), WithStride(10), WithNodeNumber(3))
	require.NoError(t, err)
	defer g.Close()
	v, err := g.UniqueUint64()
	require.NoError(t, err)
	require.Equal(t, uint64(302*10+3), v, "the first id of stride 10 node 3 above 3013")
	requireGone(t, path)
	require.Equal(t, []hoststate.Form{
		{Kind: formStriped, Stride: 100, Node: 13, Upto: 30},
		{Kind: formDecimal, Node: 4},
		{Kind: formStriped, Stride: 10, Node: 3, Current: true},
	}, record(t, path, "vm1").Forms)
}

// The number file and the history's registry line of a name a registry
// numbered: an Open without the registry takes the number (and refuses
// another) before anything is made, the record keeps the number and
// stride with the striped form of that stride left at the counter's
// value, and the host's claim of the number refuses it to another name.
func TestMigrateNumberFile(t *testing.T) {
	t.Parallel()
	dir, path := oldHost(t, 40, map[string][]byte{
		numberSuffix: encodeNumberFile(numberRecord{name: "vm1", number: 3, stride: 100}),
		formsSuffix:  encodeForms(formHistory{{registry: "vm1", node: 3, stride: 100}, stripedCurrent(100, 3)}, 4),
	})
	_, err := Open(path, "vm1", WithSync(false), WithFormat(FormatDecimal), WithNodeNumber(5))
	require.ErrorIs(t, err, ErrNumberMismatch)
	require.FileExists(t, path+numberSuffix, "a refused Open migrated")

	g, err := Open(path, "vm1", WithSync(false), WithFormat(FormatDecimal))
	require.NoError(t, err)
	_, node, _ := g.Form()
	require.Equal(t, uint64(3), node, "the number the registry gave")
	require.NoError(t, g.Close())
	requireGone(t, path)
	r := record(t, path, "vm1")
	require.Equal(t, []uint64{3, 100}, []uint64{r.Node, r.Stride})
	require.Equal(t, []hoststate.Form{
		{Kind: formStriped, Stride: 100, Node: 3, Current: true},
		{Kind: formDecimal, Node: 3},
	}, r.Forms)
	name, n, s, ok, err := ReadNodeNumber(path)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "vm1", name)
	require.Equal(t, []uint64{3, 100}, []uint64{n, s})

	// The number file's stride stands: another is refused.
	_, err = Open(path, "vm1", WithSync(false), WithFormat(FormatStriped), WithStride(10))
	require.ErrorIs(t, err, ErrStrideMismatch)
	_, err = Open(filepath.Join(dir, "other"), "db", WithSync(false), WithFormat(FormatDecimal), WithNodeNumber(3))
	require.ErrorIs(t, err, ErrNumberBound)
}

// Copies restored from a backup older than a striped form the number
// file still records (stride 100, node 3): the form is taken into the
// record as left at the counter's value, and a return to stride 10 (the
// form the copies record as in use) starts above 4003.
func TestMigrateNumberFileRemembersAFormTheHistoryLost(t *testing.T) {
	t.Parallel()
	_, path := oldHost(t, 40, map[string][]byte{
		numberSuffix:    encodeNumberFile(numberRecord{name: "vm1", number: 3, stride: 100}),
		formsSuffix:     encodeForms(formHistory{stripedCurrent(10, 3)}, 1),
		formsCopySuffix: encodeForms(formHistory{stripedCurrent(10, 3)}, 1),
	})
	g, err := Open(path, "vm1", WithSync(false), WithFormat(FormatDecimal), WithNodeNumber(3))
	require.NoError(t, err)
	require.NoError(t, g.Close())
	r := record(t, path, "vm1")
	require.Equal(t, []hoststate.Form{
		{Kind: formStriped, Stride: 10, Node: 3, Current: true},
		{Kind: formStriped, Stride: 100, Node: 3, Upto: 40},
		{Kind: formDecimal, Node: 3},
	}, r.Forms)
	c := openTestCounter(t, 40)
	require.Equal(t, uint64(400), adopt(t, c, &r, 10, 3), "the first id of stride 10 node 3 must be 4013, above 4003")
}

// A number file and a history registry line of another name (a name
// released on this counter and followed by another): its number is
// refused to this name before anything is made, and claimed for that
// name once the files are taken in.
func TestMigrateAnotherNamesNumber(t *testing.T) {
	t.Parallel()
	dir, path := oldHost(t, 9, map[string][]byte{
		numberSuffix: encodeNumberFile(numberRecord{name: "old_name", number: 5}),
	})
	_, err := Open(path, "vm1", WithSync(false), WithFormat(FormatDecimal), WithNodeNumber(5))
	require.ErrorIs(t, err, ErrNumberMismatch)
	g, err := Open(path, "vm1", WithSync(false), WithFormat(FormatDecimal), WithNodeNumber(7))
	require.NoError(t, err)
	require.NoError(t, g.Close())
	requireGone(t, path)
	require.Zero(t, record(t, path, "vm1").Node, "another name's number is not vm1's")
	_, err = Open(filepath.Join(dir, "other"), "db", WithSync(false), WithFormat(FormatDecimal), WithNodeNumber(5))
	require.ErrorIs(t, err, ErrNumberBound)
}

// The file that said this host released its name: the name's record
// says it now, the file is gone, and the name (and another name on the
// counter) is refused until claimed again on purpose.
func TestMigrateReleased(t *testing.T) {
	t.Parallel()
	_, path := oldHost(t, 12, map[string][]byte{releasedSuffix: []byte(releasedHeader + "\nvm1\n")})
	_, err := Open(path, "vm1", WithSync(false))
	require.ErrorIs(t, err, ErrReleased)
	requireGone(t, path)
	r := record(t, path, "vm1")
	require.True(t, r.Released)
	require.Equal(t, uint64(12), r.Mark)
	_, err = Open(path, "web", WithSync(false))
	require.ErrorIs(t, err, ErrReleased)
	g, err := Open(path, "vm1", WithSync(false), WithReclaim())
	require.NoError(t, err)
	id, err := g.UniqueID()
	require.NoError(t, err)
	require.Equal(t, "vm1-13", id)
	require.NoError(t, g.Close())
	require.False(t, record(t, path, "vm1").Released)

	// One that cannot be read refuses every name but a reclaim, which
	// removes it.
	_, path = oldHost(t, 0, map[string][]byte{releasedSuffix: []byte("garbage")})
	_, err = Open(path, "vm1", WithSync(false))
	require.ErrorIs(t, err, ErrReleased)
	require.Contains(t, err.Error(), releasedSuffix)
	g, err = Open(path, "vm1", WithSync(false), WithReclaim())
	require.NoError(t, err)
	require.NoError(t, g.Close())
	requireGone(t, path)
}

// Damaged files are refused with their own errors and left as they are:
// both copies of the history (errCorruptForms: the forms they record are
// not known, and not forgotten either), one damaged and the other
// missing, or the number file (errCorruptNumber). One damaged copy beside
// a whole one is taken from the whole one.
func TestMigrateDamaged(t *testing.T) {
	t.Parallel()
	whole := encodeForms(formHistory{stripedCurrent(100, 13)}, 1)
	for _, tc := range []struct {
		name  string
		files map[string][]byte
		want  error
	}{
		{"both copies", map[string][]byte{formsSuffix: []byte("garbage"), formsCopySuffix: []byte("snapid-forms 2\n")}, errCorruptForms},
		{"one copy, the other missing", map[string][]byte{formsCopySuffix: []byte("garbage")}, errCorruptForms},
		{"number file", map[string][]byte{numberSuffix: []byte("snapid-number 2\nname vm1\n")}, errCorruptNumber},
		{"one copy beside a whole one", map[string][]byte{formsSuffix: []byte("garbage"), formsCopySuffix: whole}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, path := oldHost(t, 30, tc.files)
			g, err := Open(path, "vm1", WithSync(false), WithFormat(FormatStriped), WithStride(10), WithNodeNumber(3))
			if tc.want == nil {
				require.NoError(t, err)
				v, err := g.UniqueUint64()
				require.NoError(t, err)
				require.Greater(t, v, uint64(3013))
				require.NoError(t, g.Close())
				requireGone(t, path)
				return
			}
			require.ErrorIs(t, err, tc.want)
			require.ErrorIs(t, err, ErrCorrupt)
			for s, b := range tc.files {
				got, err := os.ReadFile(path + s)
				require.NoError(t, err)
				require.Equal(t, b, got, "a refused migration changed %s", s)
			}
		})
	}
}

// The two copies of a history are read together (mergeForms): whichever
// is older, or carries the higher generation, no form either records is
// forgotten; the form in use is the newer copy's, and a form only the
// other records as in use is taken as left at the counter's value now
// (the most it can have issued). The record they make raises a new form
// above every id of them.
func TestMigrateFormHistoryMerge(t *testing.T) {
	t.Parallel()
	unknown := func(stride, node, upto uint64) formEntry {
		e := striped(stride, node, upto)
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
			a:    formHistory{stripedCurrent(10, 1)}, genA: 1,
			b: formHistory{striped(10, 1, 5), stripedCurrent(100, 11)}, genB: 2,
			want: formHistory{unknown(10, 1, 5), stripedCurrent(100, 11)},
			cur:  25, wantHigh: 25*100 + 11,
		},
		{
			name: "older copy restored from a backup",
			a:    formHistory{striped(10, 1, 5), stripedCurrent(100, 11)}, genA: 2,
			b: formHistory{stripedCurrent(10, 1)}, genB: 1,
			want: formHistory{unknown(10, 1, 5), stripedCurrent(100, 11)},
			cur:  25, wantHigh: 25*100 + 11,
		},
		{
			name: "an old history with a higher generation (both copies once removed)",
			a:    formHistory{stripedCurrent(100, 11)}, genA: 1,
			b: formHistory{striped(100, 11, 3), stripedCurrent(10, 1), dec(4)}, genB: 9,
			want: formHistory{unknown(100, 11, 3), stripedCurrent(10, 1), dec(4)},
			cur:  40, wantHigh: 40*100 + 11,
		},
		{
			name: "written up to the primary only (a power cut between the copies)",
			a:    formHistory{striped(10, 1, 5), striped(100, 11, 25), stripedCurrent(1000, 7), reg("vm", 7, 1000)}, genA: 3,
			b: formHistory{striped(10, 1, 5), stripedCurrent(100, 11), reg("vm", 7, 0)}, genB: 2,
			want: formHistory{striped(10, 1, 5), unknown(100, 11, 25), stripedCurrent(1000, 7), reg("vm", 7, 1000)},
			cur:  30, wantHigh: 30*1000 + 7,
		},
		{
			name: "forms only the older copy records",
			a:    formHistory{striped(10, 1, 9), stripedCurrent(100, 11)}, genA: 5,
			b: formHistory{striped(10, 1, 5), striped(20, 3, 2), dec(8), reg("web", 8, 0)}, genB: 4,
			want: formHistory{striped(10, 1, 9), stripedCurrent(100, 11), striped(20, 3, 2), dec(8), reg("web", 8, 0)},
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
			for _, e := range h {
				require.False(t, e.unknown, "resolve left %+v unknown", e)
			}
			// What an earlier version wrote decodes to what was merged.
			got, gen, err := decodeFormsGen(encodeForms(h, 7))
			require.NoError(t, err)
			require.Equal(t, uint64(7), gen)
			require.Equal(t, h, got)
			var r hoststate.Record
			of := oldFiles{forms: h}
			of.merge(&r, "vm", tc.cur)
			high, ok := highestStriped(r.Forms, 7, 2, tc.cur)
			require.True(t, ok)
			require.Equal(t, tc.wantHigh, high)
		})
	}
}

// A record that already has a striped form in use keeps it; the
// history's form in use is taken as left at the counter's value, and a
// form both record as left keeps the higher value.
func TestMigrateIntoARecord(t *testing.T) {
	t.Parallel()
	r := hoststate.Record{Forms: []hoststate.Form{
		{Kind: formStriped, Stride: 10, Node: 1, Upto: 4},
		{Kind: formStriped, Stride: 1000, Node: 7, Current: true},
	}}
	of := oldFiles{forms: formHistory{striped(10, 1, 9), stripedCurrent(100, 11), {registry: "vm", node: 7, stride: 1000}}}
	of.merge(&r, "vm", 50)
	require.Equal(t, []hoststate.Form{
		{Kind: formStriped, Stride: 10, Node: 1, Upto: 9},
		{Kind: formStriped, Stride: 1000, Node: 7, Current: true},
		{Kind: formStriped, Stride: 100, Node: 11, Upto: 50},
	}, r.Forms)
	require.Equal(t, []uint64{7, 1000}, []uint64{r.Node, r.Stride})
}

// A copy a version 1 history wrote (no generation, no registry lines) is
// read as generation 0, so any copy written since wins the form in use.
func TestMigrateReadsFormsVersion1(t *testing.T) {
	t.Parallel()
	body := "snapid-forms 1\nstriped 10 1 5\nstriped 100 11 current\ndecimal 4\n"
	b := fmt.Appendf([]byte(body), "crc32c %08x\n", crc32.Checksum([]byte(body), crc32c))
	h, gen, err := decodeFormsGen(b)
	require.NoError(t, err)
	require.Equal(t, uint64(0), gen)
	require.Equal(t, formHistory{striped(10, 1, 5), stripedCurrent(100, 11), {form: FormatDecimal, node: 4}}, h)
}

// A version 2 copy without its generation line is not read, even with a
// matching checksum.
func TestMigrateFormsGenerationLineRequired(t *testing.T) {
	t.Parallel()
	for _, line := range []string{"5", "gen 5", "generation", "generation 05", "generation -1"} {
		body := "snapid-forms 2\n" + line + "\nstriped 10 1 current\n"
		b := fmt.Appendf([]byte(body), "crc32c %08x\n", crc32.Checksum([]byte(body), crc32c))
		_, _, err := decodeFormsGen(b)
		require.Error(t, err, "line %q", line)
	}
}

// The number file of both versions decodes; its claim line is not
// checked (the record, not the file, is what a joining process reads).
func TestMigrateReadsNumberFile(t *testing.T) {
	t.Parallel()
	for _, b := range [][]byte{
		[]byte("snapid-number 1\nname vm1\nnumber 3\nstride 100\n"),
		encodeNumberFile(numberRecord{name: "vm1", number: 3, stride: 100}),
	} {
		n, err := decodeNumberFile(b)
		require.NoError(t, err)
		require.Equal(t, numberRecord{name: "vm1", number: 3, stride: 100}, n)
	}
	_, err := decodeNumberFile([]byte("snapid-number 2\nname vm1\nnumber 0\nstride 0\nclaim 0000000000000000\n"))
	require.ErrorIs(t, err, errCorruptNumber)
}

// The node numbers and stride an earlier version's files say a name
// issued under are claimed for it at its first Open, whatever form that
// Open asks for: another name cannot take them and repeat its ids.
func TestMigrateClaimsTheNamesNumbers(t *testing.T) {
	t.Parallel()
	t.Run("decimal", func(t *testing.T) {
		dir, path := oldHost(t, 5, map[string][]byte{
			numberSuffix: encodeNumberFile(numberRecord{name: "ma", number: 3}),
			formsSuffix:  encodeForms(formHistory{{registry: "ma", node: 3}, {form: FormatDecimal, node: 3}}, 1),
		})
		g, err := Open(path, "ma", WithSync(false))
		require.NoError(t, err)
		require.NoError(t, g.Close())
		_, err = Open(filepath.Join(dir, "b"), "mb", WithFormat(FormatDecimal), WithNodeNumber(3))
		require.ErrorIs(t, err, ErrNumberBound)
	})
	t.Run("striped", func(t *testing.T) {
		dir, path := oldHost(t, 50, map[string][]byte{formsSuffix: encodeForms(formHistory{stripedCurrent(10, 3)}, 1)})
		g, err := Open(path, "ma", WithSync(false))
		require.NoError(t, err)
		require.NoError(t, g.Close())
		_, err = Open(filepath.Join(dir, "b"), "mb", WithFormat(FormatStriped), WithStride(100), WithNodeNumber(13))
		require.ErrorIs(t, err, ErrStrideMismatch)
	})
}

// What an earlier version's files refuse is refused before anything is
// made: a damaged history makes no record of the name, and a history
// that puts the form asked for past its bound claims no node number or
// stride.
func TestMigrateRefusalMakesNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		v     uint64
		files map[string][]byte
		opts  []Option
		want  error
	}{
		{"damaged history", 5, map[string][]byte{formsSuffix: []byte("garbage\n")}, nil, errCorruptForms},
		{"form past its bound", 100, map[string][]byte{formsSuffix: encodeForms(formHistory{striped(1000, 3, 100)}, 1)},
			[]Option{WithFormat(FormatStriped), WithStride(10), WithNodeNumber(5), WithMaxID(5000)}, ErrExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, path := oldHost(t, tc.v, tc.files)
			_, err := Open(path, "vm1", append([]Option{WithSync(false)}, tc.opts...)...)
			require.ErrorIs(t, err, tc.want)
			entries, rerr := os.ReadDir(testBindingDir(path))
			if !errors.Is(rerr, fs.ErrNotExist) {
				require.NoError(t, rerr)
			}
			for _, e := range entries {
				require.True(t, e.Name()[0] == '.', "nothing recorded or claimed: %s", e.Name())
			}
		})
	}
}
