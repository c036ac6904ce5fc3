package idform

import (
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/snapid/snapid/internal/errs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseIDValid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want ID
	}{
		{"a-1", ID{Name: "a", Number: 1}},
		{"server_a-123", ID{Name: "server_a", Number: 123}},
		{"_-9", ID{Name: "_", Number: 9}},
		{"a1_b2-10", ID{Name: "a1_b2", Number: 10}},
		{"x-18446744073709551615", ID{Name: "x", Number: math.MaxUint64}},
		{"x-9007199254740993", ID{Name: "x", Number: 1<<53 + 1}},
		{strings.Repeat("n", 63) + "-1", ID{Name: strings.Repeat("n", 63), Number: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseID(tt.in)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.in, got.String(), "round trip")
			assert.Equal(t, tt.in, string(got.AppendTo(nil)))
			assert.Equal(t, "prefix:"+tt.in, string(got.AppendTo([]byte("prefix:"))))
		})
	}
}

func TestParseIDInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		why  string // part of the error message
	}{
		{"empty", "", "empty"},
		{"no dash", "server", `no "-"`},
		{"only dash", "-", "empty"},
		{"empty name", "-1", "empty"},
		{"empty number", "a-", "empty"},
		{"two dashes", "a-1-2", "not a decimal digit"},
		{"dash in name", "a-b-1", "not a decimal digit"},
		{"zero", "a-0", "0 is never issued"},
		{"leading zero", "a-01", "leading zeros"},
		{"zeros", "a-00", "leading zeros"},
		{"plus sign", "a-+1", "not a decimal digit"},
		{"minus sign", "a--1", "not a decimal digit"},
		{"overflow", "a-18446744073709551616", "larger than 2^64-1"},
		{"far overflow", "a-99999999999999999999999", "larger than 2^64-1"},
		{"hex", "a-0x10", "leading zeros"},
		{"space before number", "a- 1", "not a decimal digit"},
		{"trailing space", "a-1 ", "not a decimal digit"},
		{"trailing newline", "a-1\n", "not a decimal digit"},
		{"underscore in number", "a-1_000", "not a decimal digit"},
		{"upper-case name", "A-1", "name"},
		{"leading digit name", "1a-1", "starts with a digit"},
		{"name too long", strings.Repeat("a", 64) + "-1", "64 bytes long"},
		{"dot in name", "a.b-1", "name"},
		{"non-ASCII name", "caf\u00e9-1", "name"},
		{"non-ASCII digit", "a-\u0661", "not a decimal digit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseID(tt.in)
			require.Error(t, err)
			assert.ErrorIs(t, err, errs.ErrInvalidID)
			assert.Contains(t, err.Error(), tt.why)
			assert.Equal(t, ID{}, got, "nothing is returned with the error")
		})
	}
}

func TestIDCompare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		want int
	}{
		{"a-9", "a-10", -1},
		{"a-10", "a-9", 1},
		{"a-10", "a-10", 0},
		{"a-2", "b-1", -1},
		{"b-1", "a-2", 1},
		{"a-18446744073709551615", "a-18446744073709551614", 1},
		{"a-100", "a_b-1", -1},
		{"ab-1", "a-1", 1},
	}
	for _, tt := range tests {
		t.Run(tt.a+" vs "+tt.b, func(t *testing.T) {
			a, err := ParseID(tt.a)
			require.NoError(t, err)
			b, err := ParseID(tt.b)
			require.NoError(t, err)
			assert.Equal(t, tt.want, a.Compare(b))
			assert.Equal(t, -tt.want, b.Compare(a), "antisymmetric")
		})
	}
}

func TestIDSortNumerically(t *testing.T) {
	t.Parallel()
	in := []string{"b-1", "a-10", "a-9", "a-100", "a-1"}
	ids := make([]ID, len(in))
	for i, s := range in {
		var err error
		ids[i], err = ParseID(s)
		require.NoError(t, err)
	}
	slices.SortFunc(ids, ID.Compare)
	var got []string
	for _, id := range ids {
		got = append(got, id.String())
	}
	assert.Equal(t, []string{"a-1", "a-9", "a-10", "a-100", "b-1"}, got)
}

func TestIDJSON(t *testing.T) {
	t.Parallel()
	type doc struct {
		ID   ID            `json:"id"`
		Many []ID          `json:"many"`
		ByID map[ID]string `json:"by_id"`
	}
	big := ID{Name: "web_1", Number: math.MaxUint64}
	in := doc{
		ID:   big,
		Many: []ID{{Name: "a", Number: 1}, {Name: "b", Number: 1<<53 + 1}},
		ByID: map[ID]string{{Name: "a", Number: 7}: "seven"},
	}
	b, err := json.Marshal(in)
	require.NoError(t, err)
	assert.JSONEq(t,
		`{"id":"web_1-18446744073709551615","many":["a-1","b-9007199254740993"],"by_id":{"a-7":"seven"}}`,
		string(b), "ids marshal as strings, so numbers above 2^53 survive")

	var out doc
	require.NoError(t, json.Unmarshal(b, &out))
	assert.Equal(t, in, out)
}

func TestIDJSONInvalid(t *testing.T) {
	t.Parallel()
	t.Run("marshal", func(t *testing.T) {
		for _, id := range []ID{{}, {Name: "a"}, {Name: "A", Number: 1}, {Number: 1}, {Name: "a-b", Number: 1}} {
			_, err := json.Marshal(id)
			require.Error(t, err, "%#v", id)
			assert.ErrorIs(t, err, errs.ErrInvalidID)
		}
	})
	t.Run("unmarshal", func(t *testing.T) {
		for _, s := range []string{`"a-0"`, `"a-01"`, `"A-1"`, `"a"`, `""`, `"a-18446744073709551616"`} {
			var id ID
			err := json.Unmarshal([]byte(s), &id)
			require.Error(t, err, s)
			assert.ErrorIs(t, err, errs.ErrInvalidID, s)
			assert.Equal(t, ID{}, id, "the target is left alone")
		}
	})
	t.Run("unmarshal number is refused", func(t *testing.T) {
		var id ID
		assert.Error(t, json.Unmarshal([]byte(`12`), &id))
	})
}

func TestParseIDForms(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want ID
	}{
		{"123.91", ID{Form: FormatDecimal, Node: 123, Number: 91}},
		{"1.1", ID{Form: FormatDecimal, Node: 1, Number: 1}},
		{"2147483647.18446744073709551615", ID{Form: FormatDecimal, Node: MaxNodeNumber, Number: math.MaxUint64}},
		{"9123", ID{Form: FormatStriped, Value: 9123}},
		{"18446744073709551615", ID{Form: FormatStriped, Value: math.MaxUint64}},
	} {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseID(tt.in)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.in, got.String(), "round trip")
			b, err := json.Marshal(got)
			require.NoError(t, err)
			assert.Equal(t, `"`+tt.in+`"`, string(b))
		})
	}
	for _, tt := range []struct{ in, why string }{
		{"1.10", "never ends in 0"},
		{"1.50", "never ends in 0"},
		{"01.1", "leading zeros"},
		{"0.1", "0 is never issued"},
		{"1.0", "0 is never issued"},
		{"1.01", "leading zeros"},
		{"2147483648.1", "above 2147483647"},
		{"1.", "empty"},
		{".1", "empty"},
		{"1.1.1", "not a decimal digit"},
		{"0", "0 is never issued"},
		{"01", "leading zeros"},
		{"18446744073709551616", "larger than 2^64-1"},
		{"+1", `no "-"`},
	} {
		t.Run(tt.in, func(t *testing.T) {
			_, err := ParseID(tt.in)
			require.ErrorIs(t, err, errs.ErrInvalidID)
			assert.Contains(t, err.Error(), tt.why)
		})
	}
}

func TestIDUnstripe(t *testing.T) {
	t.Parallel()
	id, err := ParseID("9123")
	require.NoError(t, err)
	got, err := id.Unstripe(1000)
	require.NoError(t, err)
	assert.Equal(t, ID{Form: FormatStriped, Value: 9123, Stride: 1000, Node: 123, Number: 9}, got)
	b, err := got.MarshalText()
	require.NoError(t, err)
	assert.Equal(t, "9123", string(b))
	for _, tt := range []struct {
		v, s uint64
		want error
	}{
		{9000, 1000, errs.ErrInvalidID}, // node 0
		{999, 1000, errs.ErrInvalidID},  // number 0
		{9123, 1, errs.ErrInvalidOption},
		{9123, 0, errs.ErrInvalidOption},
	} {
		_, err := ID{Form: FormatStriped, Value: tt.v}.Unstripe(tt.s)
		assert.ErrorIs(t, err, tt.want, "%d stride %d", tt.v, tt.s)
	}
	_, err = ID{Name: "a", Number: 1}.Unstripe(10)
	assert.ErrorIs(t, err, errs.ErrInvalidID)
	_, err = ID{Form: FormatStriped, Value: 9123, Stride: 1000, Node: 124, Number: 9}.MarshalText()
	assert.ErrorIs(t, err, errs.ErrInvalidID, "an inconsistent striped id")
}

// MarshalText and ParseID(..).Unstripe agree on every striped id with a
// stride: number 0 (the value below the stride) and node 0 are refused by
// both, the rest accepted by both and round-tripped.
func TestIDStripedMarshalAgreesWithUnstripe(t *testing.T) {
	t.Parallel()
	for _, s := range []uint64{2, 3, 10, 1000} {
		for v := uint64(1); v <= 3*s+1; v++ {
			id := ID{Form: FormatStriped, Value: v, Stride: s, Node: v % s, Number: v / s}
			_, merr := id.MarshalText()
			parsed, err := ParseID(strconv.FormatUint(v, 10))
			require.NoError(t, err)
			un, uerr := parsed.Unstripe(s)
			require.Equal(t, merr == nil, uerr == nil, "stride %d value %d: MarshalText says %v, Unstripe says %v", s, v, merr, uerr)
			if uerr == nil {
				require.Equal(t, id, un)
			} else {
				require.ErrorIs(t, merr, errs.ErrInvalidID)
			}
		}
	}
}

func TestIDCompareForms(t *testing.T) {
	t.Parallel()
	ids := []ID{
		{Form: FormatStriped, Value: 5},
		{Form: FormatDecimal, Node: 2, Number: 1},
		{Name: "b", Number: 1},
		{Form: FormatDecimal, Node: 1, Number: 11},
		{Name: "a", Number: 10},
		{Form: FormatDecimal, Node: 1, Number: 9},
		{Name: "a", Number: 9},
		{Form: FormatStriped, Value: 40},
	}
	slices.SortFunc(ids, ID.Compare)
	var got []string
	for _, id := range ids {
		got = append(got, id.String())
	}
	assert.Equal(t, []string{"a-9", "a-10", "b-1", "1.9", "1.11", "2.1", "5", "40"}, got)
}

// nameRE is the node name rule, written independently of
// nodename.Problem.
var nameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func FuzzParseID(f *testing.F) {
	for _, s := range []string{
		"a-1", "server_a-123", "_-9", "x-18446744073709551615", "x-18446744073709551616",
		"a-0", "a-01", "a-+1", "a--1", "-1", "a-", "-", "", "a", "a-1-2", "A-1", "1a-1",
		strings.Repeat("a", 63) + "-1", strings.Repeat("a", 64) + "-1", "caf\u00e9-1", "a-1\n",
		"a-\u0661", "a-9007199254740993",
		"1.1", "123.91", "1.10", "01.1", "0.1", "1.01", "2147483647.9", "2147483648.9", "1.", ".1", "1.1.1",
		"1", "0", "01", "18446744073709551615", "18446744073709551616", "-0", "1e3", " 1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseID(s)
		if err != nil {
			if !errors.Is(err, errs.ErrInvalidID) {
				t.Fatalf("ParseID(%q): error %v does not wrap errs.ErrInvalidID", s, err)
			}
			if id != (ID{}) {
				t.Fatalf("ParseID(%q) returned %#v with an error", s, id)
			}
			return
		}
		if got := id.String(); got != s {
			t.Fatalf("ParseID(%q).String() = %q: not a round trip", s, got)
		}
		switch id.Form {
		case FormatName:
			if !nameRE.MatchString(id.Name) {
				t.Fatalf("ParseID(%q) accepted the invalid name %q", s, id.Name)
			}
		case FormatDecimal:
			if id.Node == 0 || id.Node > MaxNodeNumber || id.Number%10 == 0 || id.Name != "" {
				t.Fatalf("ParseID(%q) accepted the decimal id %#v", s, id)
			}
		case FormatStriped:
			if id.Value == 0 || id.Number != 0 || id.Node != 0 || id.Name != "" {
				t.Fatalf("ParseID(%q) accepted the striped id %#v", s, id)
			}
		default:
			t.Fatalf("ParseID(%q) returned form %v", s, id.Form)
		}
		if id.Number == 0 && id.Form != FormatStriped {
			t.Fatalf("ParseID(%q) accepted number 0", s)
		}
		b, err := id.MarshalText()
		if err != nil || string(b) != s {
			t.Fatalf("MarshalText of %q = %q, %v", s, b, err)
		}
		var back ID
		if err := back.UnmarshalText(b); err != nil || back != id {
			t.Fatalf("UnmarshalText(%q) = %#v, %v", b, back, err)
		}
	})
}

// FuzzDecimalIDsDiffer: two different strings ParseID accepts as decimal
// ids are different numbers when read as exact decimals (as a
// spreadsheet, a JSON parser or a database reads them).
func FuzzDecimalIDsDiffer(f *testing.F) {
	f.Add("123.9", "123.91")
	f.Add("1.5", "1.50")
	f.Add("12.3", "1.23")
	f.Add("5.1", "5.100")
	f.Fuzz(func(t *testing.T, a, b string) {
		ia, erra := ParseID(a)
		ib, errb := ParseID(b)
		if erra != nil || errb != nil || ia.Form != FormatDecimal || ib.Form != FormatDecimal || a == b {
			return
		}
		ra, ok := new(big.Rat).SetString(a)
		if !ok {
			t.Fatalf("%q is a decimal id but not a decimal number", a)
		}
		rb, ok := new(big.Rat).SetString(b)
		if !ok {
			t.Fatalf("%q is a decimal id but not a decimal number", b)
		}
		if ra.Cmp(rb) == 0 {
			t.Fatalf("decimal ids %q and %q are equal as decimals", a, b)
		}
	})
}
