package snapid_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// A Sequence is one pointer: the one Sequence returns is the one
// Sequences lists while it is open, and a closed one is listed no more.
func TestSequencesListTheSequencesHandedOut(t *testing.T) {
	ctx := context.Background()
	reg := registrytest.NewRegistry()
	_, err := admin.CreateSequence(ctx, reg, "orders", 1, 1_000_000)
	require.NoError(t, err)
	g, err := snapid.Open(filepath.Join(t.TempDir(), "counter.u64"), "seq_host", snapid.Config{
		Registry:   &snapid.RegistryConfig{Registry: reg},
		BindingDir: t.TempDir(),
	})
	require.NoError(t, err)
	defer g.Close()
	a, err := g.Sequence("orders")
	require.NoError(t, err)
	b, err := g.SequenceContext(ctx, "orders")
	require.NoError(t, err)
	require.NotSame(t, a, b, "a sequence opened twice is two Sequences")
	n, err := a.Next()
	require.NoError(t, err)
	m, err := b.Next()
	require.NoError(t, err)
	require.NotEqual(t, n, m)

	open := g.Sequences()
	require.Len(t, open, 2)
	require.ElementsMatch(t, []*snapid.Sequence{a, b}, open)
	require.Same(t, g.Sequences()[0], g.Sequences()[0])

	require.NoError(t, a.Close())
	require.Equal(t, []*snapid.Sequence{b}, g.Sequences())
	require.NoError(t, b.Close())
	require.Empty(t, g.Sequences())
}

// Open's errors and results pass through the root package unchanged: a
// refused Open returns no Generator and the engine's error value.
func TestOpenRefusedReturnsNoGenerator(t *testing.T) {
	g, err := snapid.Open(filepath.Join(t.TempDir(), "counter.u64"), "Not A Name", snapid.Config{})
	require.ErrorIs(t, err, snapid.ErrInvalidName)
	require.Nil(t, g)
}
