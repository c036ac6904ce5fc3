package snapid_test

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// A registered host's very first Open with a form the cluster refuses
// (another stride, a node number the registry does not give) is bad
// input: it is refused and leaves nothing beside the counter.
func TestFormRefusedOnFirstOpenLeavesNoFiles(t *testing.T) {
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
