package registry_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/assert"
)

// A lease that cannot be had matches ErrExhausted when nothing is left for
// the data centre, ErrSequenceShort (and not ErrExhausted) when fewer
// consecutive numbers are left than asked for; either says what is left.
func TestSequenceExhaustedError(t *testing.T) {
	t.Parallel()
	none := &registry.SequenceExhaustedError{Sequence: "orders", DC: "dc1", Max: 100, Wanted: 5}
	short := &registry.SequenceExhaustedError{Sequence: "orders", DC: "dc1", Max: 100, Wanted: 5, DCLeft: 2, GlobalLeft: 1, Largest: 2}
	// Other data centres' ranges hold numbers that only their hosts lease.
	elsewhere := &registry.SequenceExhaustedError{Sequence: "orders", DC: "dc1", Max: 100, Wanted: 1,
		OtherDCs: map[string]uint64{"dc3": 4, "dc2": 30, "dc4": 0}}
	allLeased := &registry.SequenceExhaustedError{Sequence: "orders", DC: "dc1", Max: 100, Wanted: 1, OtherDCs: map[string]uint64{"dc2": 0}}
	shortElsewhere := *short
	shortElsewhere.OtherDCs = map[string]uint64{"dc2": 7}
	for _, tc := range []struct {
		name       string
		err        error
		exhausted  bool
		shortMatch bool
		says       []string
	}{
		{"nothing left", none, true, false, []string{`sequence "orders"`, "max 100", `data centre "dc1"`}},
		{"fewer than asked", short, false, true, []string{"5 consecutive numbers asked for", "at most 2", "ask for at most 2"}},
		{"wrapped", fmt.Errorf("lease: %w", short), false, true, nil},
		{"nothing left here, some elsewhere", elsewhere, true, false, []string{`data centre "dc1" leased every number of its ranges`,
			`; other data centres' ranges hold 34 numbers not leased yet ("dc2" 30, "dc3" 4), which only their own hosts can lease`}},
		{"nothing left anywhere", allLeased, true, false, []string{`; the ranges of the other data centres (dc2) are all leased to their hosts too`}},
		{"fewer than asked, some elsewhere", &shortElsewhere, false, true, []string{"ask for at most 2; other data centres' ranges hold 7 numbers not leased yet"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.exhausted, errors.Is(tc.err, registry.ErrExhausted))
			assert.Equal(t, tc.shortMatch, errors.Is(tc.err, registry.ErrSequenceShort))
			var se *registry.SequenceExhaustedError
			assert.True(t, errors.As(tc.err, &se))
			for _, s := range tc.says {
				assert.Contains(t, tc.err.Error(), s)
			}
		})
	}
}
