package idform

import (
	"fmt"

	"github.com/snapid/snapid/internal/errs"
)

// How many numbers a request takes from the counter, and whether they
// fit under the form's bound or 2^64-1: the arithmetic advance checks
// before anything is taken.

// Fits is fits for the counter at path under form (nil: no bound but
// 2^64-1).
func Fits(path string, form *Form, base, k uint64, decimal bool) error {
	limit := uint64(MaxNumber)
	if form != nil {
		limit = form.Limit
	}
	m, ok := k, k <= limit-min(base, limit)
	if ok && decimal {
		m, ok = DecimalSpan(base, k)
		ok = ok && m <= limit-base
	}
	if base < limit && ok {
		return nil
	}
	what := "2^64-1"
	if limit < MaxNumber {
		what = fmt.Sprintf("the last number the %s form can carry (%d)", form.Format, limit)
	}
	left := uint64(0)
	if base < limit {
		left = limit - base
		if decimal {
			left -= (limit/10 - base/10) // the numbers ending in 0 are not handed out
		}
	}
	return &errs.FileError{Op: "advance", Path: path, Err: fmt.Errorf(
		"%w: last issued %d; %d more would pass %s, and %d are left: nothing was taken", errs.ErrExhausted, base, k, what, left)}
}

// DecimalSpan returns how many numbers after base hold k that do not end
// in 0 (the decimal form's ids), the last of them one that does not; ok is
// false past 2^64-1.
func DecimalSpan(base, k uint64) (m uint64, ok bool) {
	m = k
	for {
		if m > MaxNumber-base {
			return 0, false
		}
		tens := (base+m)/10 - base/10
		if m-tens >= k {
			return m, true
		}
		m = k + tens
	}
}

// Span returns how many numbers after base a request of k takes (decimal:
// k ids of the decimal form, see DecimalSpan); ok is false past 2^64-1.
// Every check of a request against a bound (the form's, the registry's
// mark) counts with it from the base the request starts at, so that they
// all count the same numbers.
func Span(base, k uint64, decimal bool) (m uint64, ok bool) {
	if decimal {
		return DecimalSpan(base, k)
	}
	return k, k <= MaxNumber-base
}
