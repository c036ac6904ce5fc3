package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// stripedIDs takes n striped ids from g.
func stripedIDs(t *testing.T, g *Generator, n int) []uint64 {
	t.Helper()
	out := make([]uint64, n)
	for i := range out {
		v, err := g.UniqueUint64()
		require.NoError(t, err)
		out[i] = v
	}
	return out
}

// A counter that issued striped ids without a registry (stride 100, node
// 13: 113 … 3013) and then joins a numbering registry with stride 10
// (node 3) starts above every id it issued: no id repeats (3013 =
// 301×10+3 without the raise).
func TestFormChangeNoRegistryThenRegistry(t *testing.T) {
	reg := registrytest.NewRegistry()
	for _, other := range []string{"other_1", "other_2"} {
		h := newSeqHost(t, other)
		g := h.open(t, reg, WithFormat(FormatDecimal))
		require.NoError(t, g.Close())
	}
	_, err := reg.SetStride(context.Background(), 10)
	require.NoError(t, err)
	h := newSeqHost(t, "vm1")
	g, err := Open(h.path, h.name, WithSync(false), WithFormat(FormatStriped), WithNodeNumber(13), WithStride(100))
	require.NoError(t, err)
	old := stripedIDs(t, g, 30)
	require.Equal(t, uint64(3013), old[29])
	require.NoError(t, g.Close())

	// The host takes the cluster's stride: the operator removes the
	// host's claim of its own.
	require.NoError(t, os.Remove(filepath.Join(ExportTestBindingDir(h.path), "#stride")))
	g = h.open(t, reg, WithFormat(FormatStriped))
	defer g.Close()
	_, node, stride := g.Form()
	require.Equal(t, []uint64{3, 10}, []uint64{node, stride})
	seen := map[uint64]bool{}
	for _, v := range old {
		seen[v] = true
	}
	for _, v := range stripedIDs(t, g, 50) {
		require.False(t, seen[v], "id %d handed out twice", v)
		require.Greater(t, v, uint64(3013))
		seen[v] = true
	}
}

// A counter that issued striped ids under the registry's stride 100
// (node 3: 103 … 4003) keeps the registry's number and stride without
// it: opened without a registry with stride 10, it is refused
// (ErrStrideMismatch), and nothing is issued.
func TestFormChangeRegistryStrideKeptWithoutRegistry(t *testing.T) {
	t.Parallel()
	reg := registrytest.NewRegistry()
	for _, other := range []string{"other_1", "other_2"} {
		h := newSeqHost(t, other)
		g := h.open(t, reg, WithFormat(FormatDecimal))
		require.NoError(t, g.Close())
	}
	h := newSeqHost(t, "vm1")
	g := h.open(t, reg, WithFormat(FormatStriped), WithStride(100))
	_, node, _ := g.Form()
	require.Equal(t, uint64(3), node)
	stripedIDs(t, g, 40)
	require.NoError(t, g.Close())
	before, err := ReadCounter(h.path)
	require.NoError(t, err)

	_, err = Open(h.path, h.name, WithSync(false), WithFormat(FormatStriped), WithNodeNumber(3), WithStride(10))
	require.ErrorIs(t, err, ErrStrideMismatch)
	after, err := ReadCounter(h.path)
	require.NoError(t, err)
	require.Equal(t, before, after)
}

// openStriped opens the counter at path as vm1 with the striped form
// (stride, node), in the test's host, the host's stride claim removed
// first (as an operator changing the host's stride does).
func openStriped(t *testing.T, path string, stride, node uint64, opts ...Option) (*Generator, error) {
	t.Helper()
	require.NoError(t, os.RemoveAll(filepath.Join(ExportTestBindingDir(path), "#stride")))
	return Open(path, "vm1", append([]Option{WithSync(false), WithFormat(FormatStriped), WithNodeNumber(node), WithStride(stride)}, opts...)...)
}

// A striped Generator whose counter another Generator opened with
// another stride (and raised) is refused at its next update
// (ErrFormChanged): two striped forms never issue from one counter at
// once.
func TestFormChangeRefusesTheFormLeft(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c")
	g1, err := openStriped(t, path, 100, 13)
	require.NoError(t, err)
	defer g1.Close()
	stripedIDs(t, g1, 30)
	g2, err := openStriped(t, path, 10, 3)
	require.NoError(t, err)
	defer g2.Close()
	v := stripedIDs(t, g2, 1)[0]
	require.Greater(t, v, uint64(3013))
	_, err = g1.UniqueUint64()
	require.ErrorIs(t, err, ErrFormChanged)
	_, err = g1.NextN(5)
	require.ErrorIs(t, err, ErrFormChanged)
	stripedIDs(t, g2, 1) // the form in use goes on

	// A name-form or decimal Generator on the same counter does not
	// change the striped form in use.
	g3, err := Open(path, "vm1", WithSync(false), WithFormat(FormatDecimal), WithNodeNumber(3))
	require.NoError(t, err)
	defer g3.Close()
	_, err = g3.UniqueID()
	require.NoError(t, err)
	stripedIDs(t, g2, 1)
}

// A new striped form whose raise would pass its bound is refused before
// any id (ErrExhausted), and leaves the counter and the record's forms
// as they were.
func TestFormChangePastTheBoundRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c")
	g, err := openStriped(t, path, 100, 13)
	require.NoError(t, err)
	stripedIDs(t, g, 30) // up to 3013
	require.NoError(t, g.Close())
	record := filepath.Join(ExportTestBindingDir(path), "vm1")
	before, err := os.ReadFile(record)
	require.NoError(t, err)
	_, err = openStriped(t, path, 10, 3, WithMaxID(3000))
	require.ErrorIs(t, err, ErrExhausted)
	require.Contains(t, err.Error(), "up to 3013")
	v, err := ReadCounter(path)
	require.NoError(t, err)
	require.Equal(t, uint64(30), v, "a refused form moved the counter")
	after, err := os.ReadFile(record)
	require.NoError(t, err)
	require.Equal(t, before, after, "a refused form changed the record")
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

// An Open with a registry refused after its claim because the counter's
// form history cannot take its form (the raise past its bound) closes
// every file it opened (the counter and the files beside it).
func TestFormRefusedAfterClaimClosesFiles(t *testing.T) {
	reg := registrytest.NewRegistry()
	_, err := reg.SetStride(context.Background(), 10)
	require.NoError(t, err)
	h := newSeqHost(t, "vm1")
	g, err := openStriped(t, h.path, 100, 13)
	require.NoError(t, err)
	stripedIDs(t, g, 30) // up to 3013
	require.NoError(t, g.Close())
	require.NoError(t, os.Remove(filepath.Join(ExportTestBindingDir(h.path), "#stride")))
	before := openFDs(t)
	for range 3 {
		_, err := Open(h.path, h.name, WithRegistry(reg), WithSync(false), WithHostInfo(h.info), WithFormat(FormatStriped), WithMaxID(3000))
		require.ErrorIs(t, err, ErrExhausted)
	}
	require.Equal(t, before, openFDs(t), "a refused Open left descriptors open")
}

// The form left is refused whichever of its parts changed: the stride
// alone (same node number: 30×10+3 = 3×100+3), the node number alone, or
// both.
func TestFormChangeRefusesTheFormLeftEitherPart(t *testing.T) {
	for _, tc := range []struct {
		name         string
		node, stride uint64
	}{
		{"stride", 3, 10},
		{"node number", 7, 100},
		{"both", 7, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c")
			g1, err := openStriped(t, path, 100, 3)
			require.NoError(t, err)
			defer g1.Close()
			stripedIDs(t, g1, 5)
			g2, err := openStriped(t, path, tc.stride, tc.node)
			require.NoError(t, err)
			defer g2.Close()
			stripedIDs(t, g2, 40)
			_, err = g1.UniqueUint64()
			require.ErrorIs(t, err, ErrFormChanged)
		})
	}
}

// A registered host's very first Open with a form the cluster refuses
// (another stride, a node number the registry does not give) is bad
// input: it is refused and leaves nothing beside the counter.
func TestFormRefusedOnFirstOpenLeavesNoFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []Option
		want error
	}{
		{"another stride", []Option{WithFormat(FormatStriped), WithStride(10)}, ErrStrideMismatch},
		{"a node number the registry did not give", []Option{WithFormat(FormatDecimal), WithNodeNumber(7)}, ErrNumberMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := registrytest.NewRegistry()
			a := newSeqHost(t, "fa")
			ga := a.open(t, reg, WithFormat(FormatStriped), WithStride(100))
			require.NoError(t, ga.Close())

			b := newSeqHost(t, "fb")
			before := dirNames(t, filepath.Dir(b.path))
			_, err := Open(b.path, b.name, append([]Option{WithRegistry(reg), WithHostInfo(b.info)}, tc.opts...)...)
			require.ErrorIs(t, err, tc.want)
			require.Equal(t, before, dirNames(t, filepath.Dir(b.path)), "the refused Open made files beside the counter")
		})
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}
