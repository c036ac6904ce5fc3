package snapid_test

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Without WithLogger the library's notices go to slog.Default(), so that
// an embedder sees them; WithLogger with a discarding handler silences
// them. The notice here: a name whose bound counter is gone moves to
// another counter.
func TestDefaultLoggerIsSlogDefault(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	moveName := func(opts ...Option) {
		t.Helper()
		dir, bind := t.TempDir(), t.TempDir()
		a, b := filepath.Join(dir, "a.u64"), filepath.Join(dir, "b.u64")
		opts = append(opts, WithBindingDir(bind))
		g, err := Open(a, "vm", opts...)
		require.NoError(t, err)
		require.NoError(t, g.Close())
		require.NoError(t, os.Remove(a))
		g, err = Open(b, "vm", opts...)
		require.NoError(t, err)
		require.NoError(t, g.Close())
	}
	moveName()
	assert.Contains(t, buf.String(), "level=WARN")
	assert.Contains(t, buf.String(), "the counter file this node name went with on this host is gone")

	buf.Reset()
	moveName(WithLogger(slog.New(slog.DiscardHandler)))
	assert.Empty(t, buf.String(), "a discarding logger silences the notices")
}
