package cli

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The library's warnings reach stderr, one line each, as
// "snapctl: warning: …": here the one for a name whose bound counter is
// gone and that moves to another counter.
func TestCLILibraryWarningsOnStderr(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	dir := t.TempDir()
	a := filepath.Join(dir, "a.u64")
	r := f.run(t, "next", "--name", "vm", "--counter", a, "--format", "striped", "--node-number", "1", "--stride", "100")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Empty(t, withoutNoRegistryNotice(t, r.stderr, "vm"))
	// An operator changing the host's stride removes its claim first.
	require.NoError(t, os.Remove(filepath.Join(f.vars["SNAPID_BINDING_DIR"], "#stride")))
	r = f.run(t, "next", "--name", "vm", "--counter", a, "--format", "striped", "--node-number", "1", "--stride", "10")
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSuffix(withoutNoRegistryNotice(t, r.stderr, "vm"), "\n"), "\n")
	require.Len(t, lines, 1, "one line: %q", r.stderr)
	assert.True(t, strings.HasPrefix(lines[0], "snapctl: warning: counter raised above the striped ids it handed out under another stride"), lines[0])
	assert.Contains(t, lines[0], "stride=10")
	assert.Contains(t, lines[0], "path="+a)
	assert.NotContains(t, lines[0], "snapid:")
}

// The handler's format: one line per record, whatever the message and
// values hold; levels named; debug dropped; groups and attributes kept.
func TestLineHandler(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := slog.New(newLineHandler(&buf))
	l.Debug("snapid: not shown")
	l.Info("snapid: a notice", "n", 1)
	l.Warn("snapid: two\nlines", "err", "a\nb")
	l.With("name", "vm").WithGroup("g").Error("snapid: bad", "k", "v")
	assert.Equal(t, "snapctl: notice: a notice (n=1)\n"+
		"snapctl: warning: two lines (err=a b)\n"+
		"snapctl: error: bad (name=vm, g.k=v)\n", buf.String())
}
