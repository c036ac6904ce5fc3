package snapid_test

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Entries other users made in the host-wide directory while an earlier
// version left it writable by every user (1777) do not fail root's Opens
// for good: a directory or a symbolic link at a node name is moved aside
// (with a warning naming it and where it went) and root's binding takes
// its place; a lock file not root's is refused with an error that says
// which file to remove.
func TestBindingOldSharedDirForeignEntries(t *testing.T) {
	requireRoot(t)
	base := testfs.SharedTempDir(t, "snapid-migrate-")
	shared := filepath.Join(base, "names")
	require.NoError(t, os.Mkdir(shared, 0o755))
	require.NoError(t, os.Chmod(shared, os.ModeSticky|0o777)) // as the old version left it
	ExportBindingDefaults(t, shared)
	testfs.AsOtherUser(t, "mkdir "+filepath.Join(shared, "vm")+" && touch "+filepath.Join(shared, "vm", "x")+
		" && ln -s /etc/passwd "+filepath.Join(shared, "web")+" && touch "+filepath.Join(shared, ".lock"))
	counters := filepath.Join(base, "rootc")
	require.NoError(t, os.Mkdir(counters, 0o755))

	var logs bytes.Buffer
	log := WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	_, err := Open(filepath.Join(counters, "vm.u64"), "vm", log)
	require.ErrorIs(t, err, ErrUntrustedDir)
	require.Contains(t, err.Error(), "rm "+filepath.Join(shared, ".lock"), "the error says what to remove")
	require.NoError(t, os.Remove(filepath.Join(shared, ".lock")))

	for _, name := range []string{"vm", "web"} {
		g, err := Open(filepath.Join(counters, name+".u64"), name, log)
		require.NoError(t, err, "an entry another user planted at %s fails root's Open", name)
		require.NoError(t, g.Close())
		requireBinding(t, shared, name, filepath.Join(counters, name+".u64"))
	}
	assert.Contains(t, logs.String(), "moved aside")
	ents, err := os.ReadDir(shared)
	require.NoError(t, err)
	var aside []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".not-root-") {
			aside = append(aside, e.Name())
		}
	}
	require.Len(t, aside, 2, "both entries kept, out of the way: %v", ents)
	for _, a := range aside {
		if strings.HasPrefix(a, ".not-root-vm-") {
			_, err := os.Stat(filepath.Join(shared, a, "x"))
			assert.NoError(t, err, "the directory moved aside whole")
		}
	}
}
