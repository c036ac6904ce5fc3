package snapid

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Helpers of the Generator tests on the real Cassandra.

// crash abandons g as a killed process would.
func crash(t *testing.T, g *Generator) {
	t.Helper()
	require.NoError(t, ExportCrash(g))
}

// copyFiles copies the named files from one directory to another, as an
// operator copying a counter directory would.
func copyFiles(t *testing.T, from, to string, names ...string) {
	t.Helper()
	for _, f := range names {
		b, err := os.ReadFile(filepath.Join(from, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(to, f), b, 0o600))
	}
}

func draw(t *testing.T, g *Generator, n int) []uint64 {
	t.Helper()
	out := make([]uint64, 0, n)
	for i := 0; i < n; i++ {
		v, err := g.Next()
		require.NoError(t, err)
		out = append(out, v)
	}
	return out
}
