package engine

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
)

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

func FuzzDecodeCounter(f *testing.F) {
	for _, b := range [][]byte{
		nil, {}, {1}, make([]byte, 7), make([]byte, 8), make([]byte, 9), make([]byte, 16),
		{42, 0, 0, 0, 0, 0, 0, 0}, bytes.Repeat([]byte{0xff}, 8), {0, 0, 0, 0, 0, 0, 0, 0x80},
	} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeCounter(b)
		if len(b) != CounterSize {
			if err == nil || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("DecodeCounter of %d bytes = %d, %v; want ErrCorrupt", len(b), v, err)
			}
			if v != 0 {
				t.Fatalf("DecodeCounter of %d bytes returned %d with the error", len(b), v)
			}
			return
		}
		if err != nil {
			t.Fatalf("DecodeCounter(% x): %v", b, err)
		}
		enc := EncodeCounter(v)
		if !bytes.Equal(enc[:], b) {
			t.Fatalf("EncodeCounter(DecodeCounter(% x)) = % x", b, enc)
		}
		// Little-endian, as Snap!'s counter.u64 on x86.
		var want uint64
		for i := CounterSize - 1; i >= 0; i-- {
			want = want<<8 | uint64(b[i])
		}
		if v != want {
			t.Fatalf("DecodeCounter(% x) = %d, want %d (little-endian)", b, v, want)
		}
	})
}
