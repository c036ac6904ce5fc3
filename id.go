package snapid

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
)

// ID is a parsed id: a node name and a number, written "<name>-<number>".
//
// Ids do not sort as plain strings ("a-10" < "a-9"); use Compare, which
// orders by name and then numerically. ID marshals to JSON as its string
// form, so numbers above 2^53 survive JavaScript clients.
type ID struct {
	Name   string
	Number uint64
}

// String returns "<name>-<number>", the number in decimal without leading
// zeros.
func (id ID) String() string {
	return string(id.AppendTo(make([]byte, 0, len(id.Name)+21)))
}

// AppendTo appends the id's string form to b.
func (id ID) AppendTo(b []byte) []byte {
	b = append(b, id.Name...)
	b = append(b, '-')
	return strconv.AppendUint(b, id.Number, 10)
}

// Compare orders ids by name, then by number (numerically).
func (id ID) Compare(other ID) int {
	if c := strings.Compare(id.Name, other.Name); c != 0 {
		return c
	}
	return cmp.Compare(id.Number, other.Number)
}

// MarshalText implements encoding.TextMarshaler.
func (id ID) MarshalText() ([]byte, error) {
	if err := id.validate(); err != nil {
		return nil, err
	}
	return id.AppendTo(nil), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseID's rules.
func (id *ID) UnmarshalText(b []byte) error {
	p, err := ParseID(string(b))
	if err != nil {
		return err
	}
	*id = p
	return nil
}

func (id ID) validate() error {
	if why := nameProblem(id.Name); why != "" {
		return fmt.Errorf("snapid: %w: name %q: %s", ErrInvalidID, id.Name, why)
	}
	if id.Number == 0 {
		return fmt.Errorf("snapid: %w: number 0 is never issued", ErrInvalidID)
	}
	return nil
}

// ParseID parses "<name>-<number>". The name must be a valid node name; the
// number must be decimal, from 1 to 2^64-1, with no sign, no leading zeros
// and nothing around it. Anything else is an error wrapping ErrInvalidID.
func ParseID(s string) (ID, error) {
	i := strings.IndexByte(s, '-')
	if i < 0 {
		return ID{}, fmt.Errorf("snapid: %w %q: no \"-\" between name and number", ErrInvalidID, s)
	}
	name, num := s[:i], s[i+1:]
	if why := nameProblem(name); why != "" {
		return ID{}, fmt.Errorf("snapid: %w %q: name %q: %s", ErrInvalidID, s, name, why)
	}
	n, why := parseNumber(num)
	if why != "" {
		return ID{}, fmt.Errorf("snapid: %w %q: number %q: %s", ErrInvalidID, s, num, why)
	}
	return ID{Name: name, Number: n}, nil
}

// parseNumber accepts only the canonical decimal form of 1..2^64-1.
func parseNumber(s string) (uint64, string) {
	switch {
	case s == "":
		return 0, "it is empty"
	case s[0] == '0':
		if len(s) == 1 {
			return 0, "0 is never issued"
		}
		return 0, "leading zeros are not allowed"
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Sprintf("byte %d is %q, not a decimal digit", i, s[i])
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, "it is larger than 2^64-1"
	}
	return n, ""
}
