package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The sequence seen on a host: a server with its own counter and the
// host-derived name "vm" issues vm-1; then the README's first command,
// 'snapctl next' (per-user default counter, the same derived name), must
// not print vm-1 again. It is refused with one line that names the
// server's counter and what to do, issues nothing and creates nothing.
func TestNextRefusesNameBoundToAnotherCounter(t *testing.T) {
	bind := t.TempDir() // the host's binding directory
	serverDir := t.TempDir()
	serverCounter := filepath.Join(serverDir, "counter.u64")
	server, err := snapid.Open(serverCounter, "vm", snapid.WithBindingDir(bind))
	require.NoError(t, err)
	defer server.Close()
	id, err := server.UniqueID()
	require.NoError(t, err)
	require.Equal(t, "vm-1", id)

	f := newFakeEnv(t)
	f.host = "vm"
	f.vars["SNAPID_BINDING_DIR"] = bind
	beforeHome, beforeBind := testfs.Snapshot(t, f.home), testfs.Snapshot(t, bind)
	r := f.run(t, "next")
	require.Equal(t, exitFailure, r.code, "stdout: %q\nstderr: %q", r.stdout, r.stderr)
	assert.Empty(t, r.stdout, "no id printed")
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	require.Len(t, lines, 2, "the name notice and one error line: %q", r.stderr)
	assert.Contains(t, lines[0], "notice")
	line := lines[1]
	t.Log(line)
	require.True(t, strings.HasPrefix(line, "snapctl: "), line)
	for _, want := range []string{`"vm"`, serverCounter, filepath.Join(bind, "vm"), "nothing was issued", "--counter", "--name"} {
		assert.Contains(t, line, want)
	}
	testfs.RequireUnchanged(t, f.home, beforeHome)
	testfs.RequireUnchanged(t, bind, beforeBind)
	ents, err := os.ReadDir(f.home)
	require.NoError(t, err)
	assert.Empty(t, ents, "not even the per-user state directory is created")

	// The server goes on from its counter; snapctl with that counter
	// continues it.
	id, err = server.UniqueID()
	require.NoError(t, err)
	assert.Equal(t, "vm-2", id)
	r = f.run(t, "next", "--counter", serverCounter)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "vm-3\n", r.stdout)
}
