package snapid_test

import (
	"math"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// TestSequenceLeaseSizeBounds: SequenceLeaseSize refuses a size whose
// growth (leases grow to 128 times it) passes 2^63-1, the largest lease a
// registry stores: the option refuses, so every registry behaves alike.
func TestSequenceLeaseSizeBounds(t *testing.T) {
	require.LessOrEqual(t, MaxSequenceLease, registry.MaxSequence/128)
	require.Greater(t, (MaxSequenceLease+1)*128, registry.MaxSequence)
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "ids", 1, registry.MaxSequence)
	host := newSeqHost(t, "web")
	g := host.open(t, reg)
	defer g.Close()
	for _, tc := range []struct {
		n  uint64
		ok bool
	}{
		{0, false}, {1, true}, {MaxSequenceLease - 1, true}, {MaxSequenceLease, true}, {MaxSequenceLease + 1, false},
		{registry.MaxSequence - 1, false}, {registry.MaxSequence, false}, {registry.MaxSequence + 1, false}, {math.MaxUint64, false},
	} {
		s, err := g.Sequence("ids", SequenceLeaseSize(tc.n))
		if !tc.ok {
			require.ErrorIs(t, err, ErrInvalidOption, "SequenceLeaseSize(%d)", tc.n)
			continue
		}
		require.NoError(t, err, "SequenceLeaseSize(%d)", tc.n)
		require.NoError(t, s.Close())
	}
	s := openSeq(t, g, "ids", SequenceLeaseSize(MaxSequenceLease))
	defer s.Close()
	n, err := s.Next()
	require.NoError(t, err)
	require.Equal(t, uint64(1), n)
}
