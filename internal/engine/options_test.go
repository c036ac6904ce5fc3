package engine_test

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Without WithLogger the library's notices go to slog.Default(), so that
// an embedder sees them; WithLogger with a discarding handler silences
// them. The notice here: a counter found below the host's record of how
// far it went, under a registry, is raised to it.
func TestDefaultLoggerIsSlogDefault(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	moveName := func(opts ...Option) {
		t.Helper()
		dir, bind := t.TempDir(), t.TempDir()
		a := filepath.Join(dir, "a.u64")
		opts = append(opts, WithBindingDir(bind), WithRegistry(registrytest.NewRegistry()))
		g, err := Open(a, "vm", opts...)
		require.NoError(t, err)
		_, err = g.NextN(3)
		require.NoError(t, err)
		require.NoError(t, g.Close())
		zero := EncodeCounter(0)
		require.NoError(t, os.WriteFile(a, zero[:], 0o600))
		g, err = Open(a, "vm", opts...)
		require.NoError(t, err)
		require.NoError(t, g.Close())
	}
	moveName()
	assert.Contains(t, buf.String(), "level=WARN")
	assert.Contains(t, buf.String(), "below the host's record of how far it went")

	buf.Reset()
	moveName(WithLogger(slog.New(slog.DiscardHandler)))
	assert.Empty(t, buf.String(), "a discarding logger silences the notices")
}

// A place of records given at the counter's own path, or at a file kept
// beside it, is refused before anything is made: the place would be made
// as a directory in the file's stead, and every later Open would fail.
func TestBindingDirBesideTheCounterRefused(t *testing.T) {
	t.Parallel()
	for _, rel := range []string{"counter.u64", "counter.u64/records", "counter.u64.mark", "counter.u64.seq.orders"} {
		t.Run(rel, func(t *testing.T) {
			dir := t.TempDir()
			_, err := Open(filepath.Join(dir, "counter.u64"), "web_1", WithBindingDir(filepath.Join(dir, rel)))
			require.ErrorIs(t, err, ErrInvalidOption)
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Empty(t, entries, "a refused Open makes nothing")
		})
	}
	// A directory that only starts like the counter's name is its own.
	dir := t.TempDir()
	g, err := Open(filepath.Join(dir, "counter.u64"), "web_1", WithBindingDir(filepath.Join(dir, "counter.u64.records")))
	require.NoError(t, err)
	require.NoError(t, g.Close())
}
