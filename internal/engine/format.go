package engine

import (
	"fmt"
	"strconv"

	"github.com/snapid/snapid/registry"
)

// Format is the form of the ids a Generator hands out (WithFormat). Every
// form carries the counter's number; the numeric forms carry the node's
// number instead of its name (see WithNodeNumber and NumberRegistry).
//
//	form     id               example   an integer?  fits
//	name     <name>-<number>  web_1-91  no           any number up to 2^64-1
//	decimal  <node>.<number>  123.91    no (a        any number up to 2^64-1
//	                                    decimal)     not ending in 0
//	striped  number×S+node    9123      yes          the bound (WithMaxID)
//
// Decimal is Snap!'s numeric form. As decimal numbers, 123.9 and 123.90
// are equal although the strings differ, and spreadsheets, JSON parsers
// and databases read these ids as numbers: so the decimal form never hands
// out a counter number ending in 0 (those are skipped, a gap of one number
// in ten), and no two of its ids are equal as decimals. Striped ids are
// one integer, number × stride + node number, with the stride S fixed for
// the cluster (NumberRegistry.SetStride) and every node number below it:
// two nodes' ids never meet, and each node's ids increase by S.
type Format uint8

const (
	// FormatName is "<name>-<number>", the default.
	FormatName Format = iota
	// FormatDecimal is "<node number>.<number>", numbers ending in 0
	// skipped.
	FormatDecimal
	// FormatStriped is number × stride + node number, one integer.
	FormatStriped
)

var formatNames = [...]string{"name", "decimal", "striped"}

// String returns "name", "decimal" or "striped".
func (f Format) String() string {
	if int(f) < len(formatNames) {
		return formatNames[f]
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// ParseFormat parses "name", "decimal" or "striped".
func ParseFormat(s string) (Format, error) {
	for i, n := range formatNames {
		if s == n {
			return Format(i), nil
		}
	}
	return 0, fmt.Errorf("snapid: %w: id form %q: want name, decimal or striped", ErrInvalidOption, s)
}

// Bounds for WithMaxID: the largest id a consumer can hold.
const (
	MaxInt64 = 1<<63 - 1 // a signed 64-bit integer (the default for FormatStriped)
	// MaxSafeInteger is JavaScript's Number.MAX_SAFE_INTEGER, the largest
	// integer a float64 holds exactly: WithMaxID(MaxSafeInteger) for ids
	// a browser reads.
	MaxSafeInteger = 1<<53 - 1
	MaxUint32      = 1<<32 - 1 // an unsigned 32-bit integer
)

// MaxNodeNumber is the largest node number: numbers fit a signed 32-bit
// integer.
const MaxNodeNumber = registry.MaxNodeNumber

// idForm is how a Generator forms its ids: the form, the node number and
// stride it needs, and the largest counter number the form may carry.
type idForm struct {
	form   Format
	node   uint64 // FormatDecimal, FormatStriped
	stride uint64 // FormatStriped
	limit  uint64 // the largest counter number this form hands out
}

// checkNodeNumber validates a node number for form f with stride s (0:
// not known yet).
func checkNodeNumber(n, s uint64) error {
	switch {
	case n == 0:
		return fmt.Errorf("snapid: %w: node number 0: node numbers start at 1", ErrInvalidOption)
	case n > MaxNodeNumber:
		return fmt.Errorf("snapid: %w: node number %d is above %d", ErrInvalidOption, n, uint64(MaxNodeNumber))
	case s != 0 && n >= s:
		return fmt.Errorf("snapid: %w: node number %d is not below the stride %d: striped ids of two nodes would meet", ErrInvalidOption, n, s)
	}
	return nil
}

// checkStride validates a stride: at least 2 (node numbers start at 1 and
// stay below it), at most MaxNodeNumber+1.
func checkStride(s uint64) error {
	if s < 2 || s > MaxNodeNumber+1 {
		return fmt.Errorf("snapid: %w: stride %d: want 2 to %d (node numbers are 1 to stride-1)", ErrInvalidOption, s, uint64(MaxNodeNumber)+1)
	}
	return nil
}

// newIDForm checks that the form can be made with node number node,
// stride and bound maxID (0: the form's default), and returns it.
func newIDForm(f Format, node, stride, maxID uint64) (idForm, error) {
	fm := idForm{form: f, node: node, stride: stride, limit: MaxNumber}
	switch f {
	case FormatName:
		if maxID != 0 {
			fm.limit = maxID
		}
		return fm, nil
	case FormatDecimal:
		if err := checkNodeNumber(node, 0); err != nil {
			return fm, err
		}
		if maxID != 0 {
			fm.limit = maxID
		}
		return fm, nil
	case FormatStriped:
		if err := checkStride(stride); err != nil {
			return fm, err
		}
		if err := checkNodeNumber(node, stride); err != nil {
			return fm, err
		}
		if maxID == 0 {
			maxID = MaxInt64
		}
		if maxID < stride+node {
			return fm, fmt.Errorf("snapid: %w: bound %d is below the first striped id %d (stride %d, node %d)", ErrInvalidOption, maxID, stride+node, stride, node)
		}
		// The largest n with n×stride + node <= maxID, computed without
		// overflow.
		fm.limit = (maxID - node) / stride
		return fm, nil
	}
	return fm, fmt.Errorf("snapid: %w: unknown id form %d", ErrInvalidOption, uint8(f))
}

// skip reports whether the form never hands out counter number n.
func (fm *idForm) skip(n uint64) bool { return fm.form == FormatDecimal && n%10 == 0 }

// exhausted is the error for a counter number past the form's bound.
func (fm *idForm) exhausted(n uint64) error {
	return fmt.Errorf("snapid: %w: number %d is past the last one the %s form can carry (%d)", ErrExhausted, n, fm.form, fm.limit)
}

// appendID appends the id of counter number n (not skipped, within the
// bound) for node name name.
func (fm *idForm) appendID(b []byte, name string, n uint64) []byte {
	switch fm.form {
	case FormatDecimal:
		b = strconv.AppendUint(b, fm.node, 10)
		b = append(b, '.')
		return strconv.AppendUint(b, n, 10)
	case FormatStriped:
		return strconv.AppendUint(b, n*fm.stride+fm.node, 10)
	}
	b = append(b, name...)
	b = append(b, '-')
	return strconv.AppendUint(b, n, 10)
}

// id returns the parsed id of counter number n.
func (fm *idForm) id(name string, n uint64) ID {
	switch fm.form {
	case FormatDecimal:
		return ID{Form: FormatDecimal, Node: fm.node, Number: n}
	case FormatStriped:
		return ID{Form: FormatStriped, Node: fm.node, Number: n, Value: n*fm.stride + fm.node, Stride: fm.stride}
	}
	return ID{Name: name, Number: n}
}
