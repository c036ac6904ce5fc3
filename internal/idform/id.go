package idform

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"

	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/internal/nodename"
)

// ID is a parsed id, in one of the forms (see Format): "<name>-<number>",
// "<node number>.<number>" or one integer (striped).
//
// Ids do not sort as plain strings ("a-10" < "a-9"); use Compare, which
// orders by form, then by name or node number, then numerically. ID
// marshals to JSON as its string form, so numbers above 2^53 survive
// JavaScript clients.
type ID struct {
	Name   string // FormatName: the node name
	Number uint64 // the counter's number (FormatStriped: when Stride is known)
	Form   Format
	Node   uint64 // FormatDecimal, and FormatStriped when Stride is known: the node number
	Value  uint64 // FormatStriped: the id, Number × Stride + Node
	Stride uint64 // FormatStriped: the cluster's stride, 0 when not known (see Unstripe)
}

// String returns the id's string form: numbers in decimal without
// leading zeros.
func (id ID) String() string {
	return string(id.AppendTo(make([]byte, 0, len(id.Name)+21)))
}

// AppendTo appends the id's string form to b.
func (id ID) AppendTo(b []byte) []byte {
	switch id.Form {
	case FormatDecimal:
		b = strconv.AppendUint(b, id.Node, 10)
		b = append(b, '.')
		return strconv.AppendUint(b, id.Number, 10)
	case FormatStriped:
		return strconv.AppendUint(b, id.Value, 10)
	}
	b = append(b, id.Name...)
	b = append(b, '-')
	return strconv.AppendUint(b, id.Number, 10)
}

// Compare orders ids by form, then by name (FormatName) or node number
// (FormatDecimal), then by number, numerically; striped ids by value. One
// node's ids so sort in the order they were issued: 7.5 before 7.13,
// though 7.13 is the smaller decimal.
func (id ID) Compare(other ID) int {
	if c := cmp.Compare(id.Form, other.Form); c != 0 {
		return c
	}
	switch id.Form {
	case FormatDecimal:
		if c := cmp.Compare(id.Node, other.Node); c != 0 {
			return c
		}
	case FormatStriped:
		return cmp.Compare(id.Value, other.Value)
	default:
		if c := strings.Compare(id.Name, other.Name); c != 0 {
			return c
		}
	}
	return cmp.Compare(id.Number, other.Number)
}

// Unstripe returns a striped id with its node number and counter number
// split out of its value by the cluster's stride s (Value mod s and Value
// div s). A value that no node could have issued with stride s (node 0,
// number 0) is errs.ErrInvalidID.
func (id ID) Unstripe(s uint64) (ID, error) {
	if id.Form != FormatStriped {
		return id, fmt.Errorf("snapid: %w: %s is not a striped id", errs.ErrInvalidID, id)
	}
	if err := CheckStride(s); err != nil {
		return id, err
	}
	out := ID{Form: FormatStriped, Value: id.Value, Stride: s, Node: id.Value % s, Number: id.Value / s}
	if out.Node == 0 || out.Number == 0 {
		return id, fmt.Errorf("snapid: %w: %d is not a striped id of stride %d (node %d, number %d)", errs.ErrInvalidID, id.Value, s, out.Node, out.Number)
	}
	return out, nil
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

// validate refuses an id no Generator could have issued (errs.ErrInvalidID),
// by the rules of its form.
func (id ID) validate() error {
	var err error
	switch id.Form {
	case FormatName:
		err = id.validateName()
	case FormatDecimal:
		err = id.validateDecimal()
	case FormatStriped:
		return id.validateStriped()
	default:
		return fmt.Errorf("snapid: %w: unknown form %d", errs.ErrInvalidID, uint8(id.Form))
	}
	if err != nil {
		return err
	}
	if id.Number == 0 {
		return fmt.Errorf("snapid: %w: number 0 is never issued", errs.ErrInvalidID)
	}
	return nil
}

// validateName refuses a name-form id whose name is not a valid node
// name.
func (id ID) validateName() error {
	if why := nodename.Problem(id.Name); why != "" {
		return fmt.Errorf("snapid: %w: name %q: %s", errs.ErrInvalidID, id.Name, why)
	}
	return nil
}

// validateDecimal refuses a decimal id whose node number is out of range
// or whose number ends in 0.
func (id ID) validateDecimal() error {
	if id.Node == 0 || id.Node > MaxNodeNumber {
		return fmt.Errorf("snapid: %w: node number %d is not 1 to %d", errs.ErrInvalidID, id.Node, uint64(MaxNodeNumber))
	}
	if id.Number%10 == 0 && id.Number != 0 {
		return fmt.Errorf("snapid: %w: %d.%d: a decimal id never ends in 0 (it would equal %d.%d as a number)", errs.ErrInvalidID, id.Node, id.Number, id.Node, id.Number/10)
	}
	return nil
}

// validateStriped refuses a striped id of value 0, and one split with a
// stride whose number, stride and node do not make its value.
func (id ID) validateStriped() error {
	if id.Value == 0 {
		return fmt.Errorf("snapid: %w: 0 is never issued", errs.ErrInvalidID)
	}
	if id.Stride != 0 && (id.Node == 0 || id.Number == 0 || id.Node >= id.Stride || id.Number > (MaxNumber-id.Node)/id.Stride || id.Number*id.Stride+id.Node != id.Value) {
		return fmt.Errorf("snapid: %w: %d is not number %d × stride %d + node %d", errs.ErrInvalidID, id.Value, id.Number, id.Stride, id.Node)
	}
	return nil
}

// ParseID parses an id in any form: "<name>-<number>" (the name must be
// a valid node name), "<node number>.<number>" (the decimal form; a number
// ending in 0 is never issued in it: 1.50 would equal 1.5 as a decimal)
// or one integer (the striped form: Value set; Unstripe splits it with
// the cluster's stride). Numbers must be decimal, from 1 to 2^64-1 (node
// numbers to MaxNodeNumber), with no sign, no leading zeros and nothing
// around them. Anything else is an error wrapping errs.ErrInvalidID.
func ParseID(s string) (ID, error) {
	if i := strings.IndexByte(s, '-'); i >= 0 {
		name, num := s[:i], s[i+1:]
		if why := nodename.Problem(name); why != "" {
			return ID{}, fmt.Errorf("snapid: %w %q: name %q: %s", errs.ErrInvalidID, s, name, why)
		}
		n, why := parseNumber(num)
		if why != "" {
			return ID{}, fmt.Errorf("snapid: %w %q: number %q: %s", errs.ErrInvalidID, s, num, why)
		}
		return ID{Name: name, Number: n}, nil
	}
	if i := strings.IndexByte(s, '.'); i >= 0 {
		node, num := s[:i], s[i+1:]
		nn, why := parseNumber(node)
		if why == "" && nn > MaxNodeNumber {
			why = fmt.Sprintf("it is above %d", uint64(MaxNodeNumber))
		}
		if why != "" {
			return ID{}, fmt.Errorf("snapid: %w %q: node number %q: %s", errs.ErrInvalidID, s, node, why)
		}
		n, why := parseNumber(num)
		if why == "" && n%10 == 0 {
			why = "a decimal id never ends in 0 (it would equal the id without it as a number)"
		}
		if why != "" {
			return ID{}, fmt.Errorf("snapid: %w %q: number %q: %s", errs.ErrInvalidID, s, num, why)
		}
		return ID{Form: FormatDecimal, Node: nn, Number: n}, nil
	}
	if s == "" {
		return ID{}, fmt.Errorf("snapid: %w: an empty string", errs.ErrInvalidID)
	}
	v, why := parseNumber(s)
	if why != "" {
		if s[0] < '0' || s[0] > '9' {
			why = "no \"-\" between name and number"
		}
		return ID{}, fmt.Errorf("snapid: %w %q: %s", errs.ErrInvalidID, s, why)
	}
	return ID{Form: FormatStriped, Value: v}, nil
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
