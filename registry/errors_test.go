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
