package engine

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// invalidNames are node names that break the rule, one per way to break it.
// Other tests (Open, snapctl) reuse the table.
var invalidNames = []struct {
	name string
	in   string
	why  string // part of the error that says what is wrong
}{
	{"empty", "", "it is empty"},
	{"64 chars", "a" + strings.Repeat("b", 63), "64 bytes long"},
	{"very long", strings.Repeat("a", 1000), "1000 bytes long"},
	{"leading digit", "1abc", "starts with a digit"},
	{"only a digit", "0", "starts with a digit"},
	{"upper case", "Server", "byte 0"},
	{"upper case inside", "serverA", "byte 6"},
	{"dash", "server-a", "byte 6"},
	{"dot", "server.a", "byte 6"},
	{"space", "server a", "byte 6"},
	{"trailing space", "server ", "byte 6"},
	{"non-ASCII e acute", "caf\u00e9", "byte 3"},
	{"NUL", "a\x00b", "byte 1"},
	{"tab", "a\tb", "byte 1"},
	{"newline", "a\n", "byte 1"},
	{"slash", "a/b", "byte 1"},
	{"invalid UTF-8", "a\xff", "byte 1"},
}

func TestValidateNameInvalid(t *testing.T) {
	t.Parallel()
	for _, tt := range invalidNames {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateName(tt.in)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidName)
			assert.NotErrorIs(t, err, ErrInvalidID)
			assert.Contains(t, err.Error(), NameRule, "the error states the rule")
			assert.Contains(t, err.Error(), tt.why, "the error says what is wrong")
		})
	}
}

func TestNameFromHostname(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		host       string
		want       string
		changedHas []string // substrings of the change description; nil: unchanged
		unchanged  bool
	}{
		{name: "already valid", host: "web_1", want: "web_1", unchanged: true},
		{name: "single letter", host: "a", want: "a", unchanged: true},
		{name: "cut at first dot", host: "web.example.com", want: "web", changedHas: []string{"cut at the first"}},
		{name: "dash to underscore", host: "web-1", want: "web_1", changedHas: []string{`replaced "-" by "_"`}},
		{name: "several dashes", host: "a-b-c", want: "a_b_c", changedHas: []string{`replaced "-"`}},
		{name: "lower-cased", host: "WEB", want: "web", changedHas: []string{"lower-cased"}},
		{name: "all three", host: "Web-01.Example.COM", want: "web_01", changedHas: []string{"cut at the first", `replaced "-"`, "lower-cased"}},
		{name: "dash after the dot is cut away", host: "web.a-b", want: "web", changedHas: []string{"cut at the first"}},
		{name: "leading dash becomes underscore", host: "-web", want: "_web", changedHas: []string{`replaced "-"`}},
		{name: "63 chars after cut", host: strings.Repeat("a", 63) + ".x", want: strings.Repeat("a", 63), changedHas: []string{"cut"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, changed, err := NameFromHostname(tt.host)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			require.NoError(t, ValidateName(got), "the derived name is valid")
			if tt.unchanged {
				assert.Empty(t, changed)
				return
			}
			require.NotEmpty(t, changed, "a change is reported")
			assert.Contains(t, changed, tt.host)
			assert.Contains(t, changed, tt.want)
			for _, s := range tt.changedHas {
				assert.Contains(t, changed, s)
			}
		})
	}
}

func TestNameFromHostnameRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		host string
	}{
		{"empty", ""},
		{"leading dot", ".example.com"},
		{"leading digit", "1web.example.com"},
		{"digit after dash fix", "9-web"},
		{"too long", strings.Repeat("a", 64)},
		{"too long after lower-casing", strings.Repeat("A", 64) + ".com"},
		{"non-ASCII", "caf\u00e9.example.com"},
		{"non-ASCII upper case is not folded", "\u00c9cole"},
		{"Kelvin sign is not folded to k", "\u212a"},
		{"space", "web 1"},
		{"NUL", "web\x00"},
		{"underscore-only change cannot fix plus", "web+1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, changed, err := NameFromHostname(tt.host)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidName)
			assert.Contains(t, err.Error(), NameRule)
			assert.Empty(t, got, "nothing is returned with the error")
			assert.Empty(t, changed)
		})
	}
}

// nameRE is the node name rule of the specification, written independently
// of nodename.Problem.
var nameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{
		"a", "_", "server_a", "a1", "1a", "", "A", "a-b", "a.b", "a b", "caf\u00e9", "a\x00", "a\t",
		strings.Repeat("a", 63), strings.Repeat("a", 64), "\u212a", "a\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := ValidateName(s)
		want := nameRE.MatchString(s)
		if (err == nil) != want {
			t.Fatalf("ValidateName(%q) = %v, the rule says valid=%v", s, err, want)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidName) {
				t.Fatalf("ValidateName(%q): %v does not wrap ErrInvalidName", s, err)
			}
			if !strings.Contains(err.Error(), NameRule) {
				t.Fatalf("ValidateName(%q): %v does not state the rule", s, err)
			}
		}
		// NameFromHostname returns a valid name or an error, never an
		// invalid name, and keeps a valid name as it is.
		name, changed, herr := NameFromHostname(s)
		if herr == nil && !nameRE.MatchString(name) {
			t.Fatalf("NameFromHostname(%q) = %q, which is invalid", s, name)
		}
		if herr != nil && !errors.Is(herr, ErrInvalidName) {
			t.Fatalf("NameFromHostname(%q): %v does not wrap ErrInvalidName", s, herr)
		}
		if want && (herr != nil || name != s || changed != "") {
			t.Fatalf("NameFromHostname(%q) of a valid name = %q, %q, %v", s, name, changed, herr)
		}
	})
}
