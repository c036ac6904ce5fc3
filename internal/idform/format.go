package idform

import (
	"fmt"
	"math"
	"strconv"

	"github.com/snapid/snapid/internal/errs"
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

// Valid reports whether f is one of the forms.
func (f Format) Valid() bool { return int(f) < len(formatNames) }

// ParseFormat parses "name", "decimal" or "striped".
func ParseFormat(s string) (Format, error) {
	for i, n := range formatNames {
		if s == n {
			return Format(i), nil
		}
	}
	return 0, fmt.Errorf("snapid: %w: id form %q: want name, decimal or striped", errs.ErrInvalidOption, s)
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

// MaxNumber is the largest number a counter can issue.
const MaxNumber = math.MaxUint64

// MaxNodeNumber is the largest node number: numbers fit a signed 32-bit
// integer.
const MaxNodeNumber = registry.MaxNodeNumber

// Form is how a Generator forms its ids: the form, the node number and
// stride it needs, and the largest counter number the form may carry.
type Form struct {
	Format Format
	Node   uint64 // FormatDecimal, FormatStriped
	Stride uint64 // FormatStriped
	Limit  uint64 // the largest counter number this form hands out
}

// CheckNodeNumber validates a node number for form f with stride s (0:
// not known yet).
func CheckNodeNumber(n, s uint64) error {
	switch {
	case n == 0:
		return fmt.Errorf("snapid: %w: node number 0: node numbers start at 1", errs.ErrInvalidOption)
	case n > MaxNodeNumber:
		return fmt.Errorf("snapid: %w: node number %d is above %d", errs.ErrInvalidOption, n, uint64(MaxNodeNumber))
	case s != 0 && n >= s:
		return fmt.Errorf("snapid: %w: node number %d is not below the stride %d: striped ids of two nodes would meet", errs.ErrInvalidOption, n, s)
	}
	return nil
}

// CheckStride validates a stride: at least 2 (node numbers start at 1 and
// stay below it), at most MaxNodeNumber+1.
func CheckStride(s uint64) error {
	if s < 2 || s > MaxNodeNumber+1 {
		return fmt.Errorf("snapid: %w: stride %d: want 2 to %d (node numbers are 1 to stride-1)", errs.ErrInvalidOption, s, uint64(MaxNodeNumber)+1)
	}
	return nil
}

// New checks that the form can be made with node number node,
// stride and bound maxID (0: the form's default), and returns it.
func New(f Format, node, stride, maxID uint64) (Form, error) {
	fm := Form{Format: f, Node: node, Stride: stride, Limit: MaxNumber}
	switch f {
	case FormatName:
		if maxID != 0 {
			fm.Limit = maxID
		}
		return fm, nil
	case FormatDecimal:
		if err := CheckNodeNumber(node, 0); err != nil {
			return fm, err
		}
		if maxID != 0 {
			fm.Limit = maxID
		}
		return fm, nil
	case FormatStriped:
		if err := CheckStride(stride); err != nil {
			return fm, err
		}
		if err := CheckNodeNumber(node, stride); err != nil {
			return fm, err
		}
		if maxID == 0 {
			maxID = MaxInt64
		}
		if maxID < stride+node {
			return fm, fmt.Errorf("snapid: %w: bound %d is below the first striped id %d (stride %d, node %d)", errs.ErrInvalidOption, maxID, stride+node, stride, node)
		}
		// The largest n with n×stride + node <= maxID, computed without
		// overflow.
		fm.Limit = (maxID - node) / stride
		return fm, nil
	}
	return fm, fmt.Errorf("snapid: %w: unknown id form %d", errs.ErrInvalidOption, uint8(f))
}

// Skip reports whether the form never hands out counter number n.
func (fm *Form) Skip(n uint64) bool { return fm.Format == FormatDecimal && n%10 == 0 }

// Exhausted is the error for a counter number past the form's bound.
func (fm *Form) Exhausted(n uint64) error {
	return fmt.Errorf("snapid: %w: number %d is past the last one the %s form can carry (%d)", errs.ErrExhausted, n, fm.Format, fm.Limit)
}

// AppendID appends the id of counter number n (not skipped, within the
// bound) for node name name.
func (fm *Form) AppendID(b []byte, name string, n uint64) []byte {
	switch fm.Format {
	case FormatDecimal:
		b = strconv.AppendUint(b, fm.Node, 10)
		b = append(b, '.')
		return strconv.AppendUint(b, n, 10)
	case FormatStriped:
		return strconv.AppendUint(b, n*fm.Stride+fm.Node, 10)
	}
	b = append(b, name...)
	b = append(b, '-')
	return strconv.AppendUint(b, n, 10)
}

// ID returns the parsed ID of counter number n.
func (fm *Form) ID(name string, n uint64) ID {
	switch fm.Format {
	case FormatDecimal:
		return ID{Form: FormatDecimal, Node: fm.Node, Number: n}
	case FormatStriped:
		return ID{Form: FormatStriped, Node: fm.Node, Number: n, Value: n*fm.Stride + fm.Node, Stride: fm.Stride}
	}
	return ID{Name: name, Number: n}
}
