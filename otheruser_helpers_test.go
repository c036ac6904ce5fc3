package snapid_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/statefile"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/require"
)

// Set-up shared by the tests that put another user (nobody) on the host
// beside root.

// passwdWithNobody makes the password database the library reads list
// root and nobody, nobody's home being home, until the test ends.
func passwdWithNobody(t *testing.T, root, home string) {
	t.Helper()
	passwd := filepath.Join(root, "passwd")
	require.NoError(t, os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:"+home+":/usr/sbin/nologin\n"), 0o644))
	t.Cleanup(statefile.SetUserDatabase(passwd, ""))
}

// hostWithNobody makes a directory others can reach with a home for
// nobody in it, listed in the password database, and the host-wide
// bindings directory under it; it returns the directory and the home.
func hostWithNobody(t *testing.T, prefix string) (root, home string) {
	t.Helper()
	root = testfs.SharedTempDir(t, prefix)
	home = filepath.Join(root, "home")
	require.NoError(t, os.Mkdir(home, 0o755))
	require.NoError(t, os.Chown(home, nobody, nobody))
	passwdWithNobody(t, root, home)
	snapid.ExportBindingDefaults(t, filepath.Join(root, "hostwide", "names"))
	return root, home
}

// raceWithNobody prepares a test in which root and a child test binary
// run as nobody open at the same moment: the host-wide bindings directory
// shared, nobody's home and work directory (with its tmp), the password
// database, and the test binary copied where nobody can run it (bin).
func raceWithNobody(t *testing.T, prefix string) (root, shared, home, work, bin string) {
	t.Helper()
	root = testfs.SharedTempDir(t, prefix)
	shared = filepath.Join(root, "names")
	snapid.ExportBindingDefaults(t, shared)
	home, work = filepath.Join(root, "home"), filepath.Join(root, "work")
	for _, d := range []string{home, work, filepath.Join(work, "tmp")} {
		require.NoError(t, os.Mkdir(d, 0o755))
		require.NoError(t, os.Chown(d, nobody, nobody))
	}
	// Root finds the user's bindings in the home the password database
	// gives; the child, with /nonexistent there, falls back to $HOME.
	passwdWithNobody(t, root, home)
	require.NoError(t, os.MkdirAll(shared, 0o755))
	bin = filepath.Join(root, "snapid.test")
	copyExecutable(t, bin)
	return root, shared, home, work, bin
}

// requireRoot skips a test that needs root unless SNAPID_REQUIRE_ROOT is
// set, when it fails it (see testfs.RequireRoot).
func requireRoot(t *testing.T) { t.Helper(); testfs.RequireRoot(t) }
