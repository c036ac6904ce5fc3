package idform

import (
	"errors"
	"math/big"
	"regexp"
	"strings"
	"testing"

	"github.com/snapid/snapid/internal/errs"
)

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
