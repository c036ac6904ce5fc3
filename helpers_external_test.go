package snapid_test

import (
	"errors"
	"path/filepath"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/require"
)

// Helpers of the external tests (package snapid_test): the tests that open
// Generators on registrytest's in-memory registry.

var errInjected = errors.New("injected I/O error")

// ctPath returns a fresh directory and a counter path in it (not created).
func ctPath(t *testing.T) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	return dir, filepath.Join(dir, "counter.u64")
}

// crash abandons g as a killed process would: its locks and descriptors go
// away, but nothing is returned to the registry.
func crash(t *testing.T, g *Generator) {
	t.Helper()
	require.NoError(t, ExportCrash(g))
}

// ctValue reads the counter's last issued number.
func ctValue(t *testing.T, path string) uint64 {
	t.Helper()
	v, err := ReadCounter(path)
	require.NoError(t, err)
	return v
}

func openReg(t *testing.T, path, name string, reg registry.Registry, opts ...Option) *Generator {
	t.Helper()
	opts = append([]Option{WithRegistry(reg), WithSync(false), WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"})}, opts...)
	g, err := Open(path, name, opts...)
	require.NoError(t, err)
	return g
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

// requireCorruptFile checks that err is ErrCorrupt naming (as a
// FileError's path) a file whose name holds suffix: the counter's own
// errors name the counter, those of the files beside it that file.
func requireCorruptFile(t *testing.T, err error, suffix string, msgAndArgs ...any) {
	t.Helper()
	require.ErrorIs(t, err, ErrCorrupt, msgAndArgs...)
	var fe *FileError
	require.ErrorAs(t, err, &fe, "a corrupt file's error names the file: %v", err)
	require.Contains(t, filepath.Base(fe.Path), suffix, "the file named: %v", err)
}
