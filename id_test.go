package snapid

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseIDValid(t *testing.T) {
	tests := []struct {
		in   string
		want ID
	}{
		{"a-1", ID{"a", 1}},
		{"server_a-123", ID{"server_a", 123}},
		{"_-9", ID{"_", 9}},
		{"a1_b2-10", ID{"a1_b2", 10}},
		{"x-18446744073709551615", ID{"x", math.MaxUint64}},
		{"x-9007199254740993", ID{"x", 1<<53 + 1}},
		{strings.Repeat("n", 63) + "-1", ID{strings.Repeat("n", 63), 1}},
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
	tests := []struct {
		name string
		in   string
		why  string // part of the error message
	}{
		{"empty", "", `no "-"`},
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
			assert.ErrorIs(t, err, ErrInvalidID)
			assert.Contains(t, err.Error(), tt.why)
			assert.Equal(t, ID{}, got, "nothing is returned with the error")
		})
	}
}

func TestIDCompare(t *testing.T) {
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
	type doc struct {
		ID   ID            `json:"id"`
		Many []ID          `json:"many"`
		ByID map[ID]string `json:"by_id"`
	}
	big := ID{"web_1", math.MaxUint64}
	in := doc{
		ID:   big,
		Many: []ID{{"a", 1}, {"b", 1<<53 + 1}},
		ByID: map[ID]string{{"a", 7}: "seven"},
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
	t.Run("marshal", func(t *testing.T) {
		for _, id := range []ID{{}, {"a", 0}, {"A", 1}, {"", 1}, {"a-b", 1}} {
			_, err := json.Marshal(id)
			require.Error(t, err, "%#v", id)
			assert.ErrorIs(t, err, ErrInvalidID)
		}
	})
	t.Run("unmarshal", func(t *testing.T) {
		for _, s := range []string{`"a-0"`, `"a-01"`, `"A-1"`, `"a"`, `""`, `"a-18446744073709551616"`} {
			var id ID
			err := json.Unmarshal([]byte(s), &id)
			require.Error(t, err, s)
			assert.ErrorIs(t, err, ErrInvalidID, s)
			assert.Equal(t, ID{}, id, "the target is left alone")
		}
	})
	t.Run("unmarshal number is refused", func(t *testing.T) {
		var id ID
		assert.Error(t, json.Unmarshal([]byte(`12`), &id))
	})
}
