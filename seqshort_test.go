package snapid_test

import (
	"errors"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// NextN asking for more numbers than are left, while some are: the error
// matches ErrSequenceShort and says how many are left, not ErrExhausted
// (every number up to max handed out); the numbers left are then issued,
// and only after them is the sequence ErrExhausted.
func TestSequenceNextNShortIsNotExhausted(t *testing.T) {
	reg := registrytest.NewRegistry()
	createSeq(t, reg, "orders", 1, 10)
	h := newSeqHost(t, "web_1")
	g := h.open(t, reg)
	defer g.Close()
	s := openSeq(t, g, "orders", SequenceBlock(1), SequenceLeaseSize(8))
	defer s.Close()
	first, err := s.NextN(8)
	require.NoError(t, err)
	require.Equal(t, uint64(1), first)
	_, err = s.NextN(5)
	require.ErrorIs(t, err, ErrSequenceShort)
	require.False(t, errors.Is(err, ErrExhausted), "9 and 10 were never handed out: %v", err)
	var e *SequenceExhaustedError
	require.ErrorAs(t, err, &e)
	require.Equal(t, uint64(2), e.Largest)
	require.Contains(t, err.Error(), "ask for at most 2")
	v, err := s.NextN(2)
	require.NoError(t, err)
	require.Equal(t, uint64(9), v)
	_, err = s.NextN(1)
	require.ErrorIs(t, err, ErrExhausted)
	require.False(t, errors.Is(err, ErrSequenceShort))
}
