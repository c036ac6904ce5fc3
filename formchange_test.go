package snapid_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/snapidtest"
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
	reg := snapidtest.NewRegistry()
	for _, other := range []string{"other_1", "other_2"} {
		h := newSeqHost(t, other)
		g := h.open(t, reg, WithFormat(FormatDecimal))
		require.NoError(t, g.Close())
	}
	_, err := reg.SetStride(context.Background(), 10)
	require.NoError(t, err)
	h := newSeqHost(t, "vm1")
	g, err := Open(h.path, h.name, WithBindingDir(t.TempDir()), WithSync(false), WithFormat(FormatStriped), WithNodeNumber(13), WithStride(100))
	require.NoError(t, err)
	old := stripedIDs(t, g, 30)
	require.Equal(t, uint64(3013), old[29])
	require.NoError(t, g.Close())

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
// (node 3: 103 … 4003), then lost its number file (removed, as
// ErrCorruptNumber advises) and is opened without a registry with stride
// 10 and node number 3: the form history, not the number file, remembers
// stride 100, and no id repeats (4003 = 400×10+3 without the raise).
func TestFormChangeNumberFileRemovedThenNoRegistry(t *testing.T) {
	reg := snapidtest.NewRegistry()
	for _, other := range []string{"other_1", "other_2"} {
		h := newSeqHost(t, other)
		g := h.open(t, reg, WithFormat(FormatDecimal))
		require.NoError(t, g.Close())
	}
	h := newSeqHost(t, "vm1")
	g := h.open(t, reg, WithFormat(FormatStriped), WithStride(100))
	_, node, _ := g.Form()
	require.Equal(t, uint64(3), node)
	old := stripedIDs(t, g, 40)
	require.Equal(t, uint64(4003), old[39])
	require.NoError(t, g.Close())
	require.NoError(t, os.Remove(h.path+".number"))

	g, err := Open(h.path, h.name, WithBindingDir(t.TempDir()), WithSync(false), WithFormat(FormatStriped), WithNodeNumber(3), WithStride(10))
	require.NoError(t, err)
	defer g.Close()
	seen := map[uint64]bool{}
	for _, v := range old {
		seen[v] = true
	}
	for _, v := range stripedIDs(t, g, 400) {
		require.False(t, seen[v], "id %d handed out twice", v)
		seen[v] = true
	}
}

// A striped Generator whose counter another Generator opened with
// another stride (and raised) is refused at its next update
// (ErrFormChanged): two striped forms never issue from one counter at
// once.
func TestFormChangeRefusesTheFormLeft(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c")
	g1, err := Open(path, "vm1", WithBindingDir(t.TempDir()), WithSync(false), WithFormat(FormatStriped), WithNodeNumber(13), WithStride(100))
	require.NoError(t, err)
	defer g1.Close()
	stripedIDs(t, g1, 30)
	g2, err := Open(path, "vm1", WithBindingDir(t.TempDir()), WithSync(false), WithFormat(FormatStriped), WithNodeNumber(3), WithStride(10))
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
	g3, err := Open(path, "vm1", WithBindingDir(t.TempDir()), WithSync(false), WithFormat(FormatDecimal), WithNodeNumber(3))
	require.NoError(t, err)
	defer g3.Close()
	_, err = g3.UniqueID()
	require.NoError(t, err)
	stripedIDs(t, g2, 1)
}

// A new striped form whose raise would pass its bound is refused before
// any id (ErrExhausted), and leaves no record of the name.
func TestFormChangePastTheBoundRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c")
	g, err := Open(path, "vm1", WithBindingDir(t.TempDir()), WithSync(false), WithFormat(FormatStriped), WithNodeNumber(13), WithStride(100))
	require.NoError(t, err)
	stripedIDs(t, g, 30) // up to 3013
	require.NoError(t, g.Close())
	bind := t.TempDir()
	_, err = Open(path, "vm1", WithBindingDir(bind), WithSync(false), WithFormat(FormatStriped), WithNodeNumber(3), WithStride(10), WithMaxID(3000))
	require.ErrorIs(t, err, ErrExhausted)
	require.Contains(t, err.Error(), "up to 3013")
	v, err := ReadCounter(path)
	require.NoError(t, err)
	require.Equal(t, uint64(30), v, "a refused form moved the counter")
	ents, err := os.ReadDir(bind)
	require.NoError(t, err)
	for _, e := range ents {
		// The number and the stride stay claimed for vm1 (a claim is
		// never given back: another Open of the name may rely on it);
		// no record of the name is left.
		require.Contains(t, []string{"#node-3", "#stride"}, e.Name(), "a refused Open left %s in the records' place", e.Name())
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

// An Open with a registry refused after its claim because the form
// history cannot be used closes every file it opened (the counter and
// the files beside it).
func TestFormRefusedAfterClaimClosesFiles(t *testing.T) {
	reg := snapidtest.NewRegistry()
	h := newSeqHost(t, "vm1")
	g := h.open(t, reg, WithFormat(FormatStriped), WithStride(10))
	require.NoError(t, g.Close())
	for _, p := range []string{h.path + ".forms", h.path + ".forms.copy"} {
		require.NoError(t, os.WriteFile(p, []byte("damaged"), 0o600))
	}
	before := openFDs(t)
	for range 3 {
		_, err := Open(h.path, h.name, WithRegistry(reg), WithSync(false), WithHostInfo(h.info), WithFormat(FormatStriped))
		require.ErrorIs(t, err, ErrCorruptForms)
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
			g1, err := Open(path, "vm1", WithBindingDir(t.TempDir()), WithSync(false), WithFormat(FormatStriped), WithNodeNumber(3), WithStride(100))
			require.NoError(t, err)
			defer g1.Close()
			stripedIDs(t, g1, 5)
			g2, err := Open(path, "vm1", WithBindingDir(t.TempDir()), WithSync(false), WithFormat(FormatStriped), WithNodeNumber(tc.node), WithStride(tc.stride))
			require.NoError(t, err)
			defer g2.Close()
			stripedIDs(t, g2, 40)
			_, err = g1.UniqueUint64()
			require.ErrorIs(t, err, ErrFormChanged)
		})
	}
}
