package snapid_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/require"
)

// A counter path in a sticky, world-writable directory (as /tmp): another
// user plants the counter file first (its own, mode 0666). Root's Open
// must refuse it, naming the owner: otherwise the other user rewinds it
// and root hands out the same id twice.
func TestCounterOfAnotherUserRefused(t *testing.T) {
	requireRoot(t)
	root := testfs.SharedTempDir(t, "snapid-owner-")
	sticky := filepath.Join(root, "tmp")
	require.NoError(t, os.Mkdir(sticky, 0o755))
	require.NoError(t, os.Chmod(sticky, os.ModeSticky|0o777))
	bind := filepath.Join(root, "names")
	counter := filepath.Join(sticky, "c")
	fresh := EncodeCounter(0)
	require.NoError(t, os.WriteFile(filepath.Join(root, "zero"), fresh[:], 0o644))

	testfs.AsOtherUser(t, "umask 0; cp "+filepath.Join(root, "zero")+" "+counter+" && chmod 666 "+counter)
	before, err := os.ReadFile(counter)
	require.NoError(t, err)

	g, err := Open(counter, "vm", WithBindingDir(bind))
	if err == nil {
		g.Close()
	}
	require.Error(t, err, "a counter another user owns in a sticky directory was trusted")
	require.True(t, errors.Is(err, ErrUntrustedOwner), "%v", err)
	require.Contains(t, err.Error(), "nobody")
	after, err := os.ReadFile(counter)
	require.NoError(t, err)
	require.Equal(t, before, after, "the refused counter was written")
	for _, s := range []string{".owner", ".mark", ".session", ".released"} {
		_, err := os.Lstat(counter + s)
		require.True(t, errors.Is(err, os.ErrNotExist), "%s was created beside a refused counter", s)
	}
}

// A file beside root's own counter (here the owner token) planted by
// another user in a sticky directory is refused too, and names its owner.
func TestFileBesideCounterOfAnotherUserRefused(t *testing.T) {
	requireRoot(t)
	root := testfs.SharedTempDir(t, "snapid-owner-")
	sticky := filepath.Join(root, "tmp")
	require.NoError(t, os.Mkdir(sticky, 0o755))
	require.NoError(t, os.Chmod(sticky, os.ModeSticky|0o777))
	counter := filepath.Join(sticky, "c")
	testfs.AsOtherUser(t, "umask 0; printf '%s\\n' 0123456789abcdef0123456789abcdef > "+counter+".owner")
	_, err := OwnerToken(counter)
	require.Error(t, err, "an owner token another user planted was trusted")
	require.True(t, errors.Is(err, ErrUntrustedOwner), "%v", err)
}

// Root may use a service user's counter in the service's own directory
// that only the service can write.
func TestCounterOfServiceUserInItsDirAccepted(t *testing.T) {
	requireRoot(t)
	root := testfs.SharedTempDir(t, "snapid-owner-")
	svc := filepath.Join(root, "svc")
	require.NoError(t, os.Mkdir(svc, 0o750))
	require.NoError(t, os.Chown(svc, 65534, 65534))
	counter := filepath.Join(svc, "c")
	fresh := EncodeCounter(0)
	require.NoError(t, os.WriteFile(filepath.Join(root, "zero"), fresh[:], 0o644))
	testfs.AsOtherUser(t, "cp "+filepath.Join(root, "zero")+" "+counter)
	g, err := Open(counter, "vm", WithBindingDir(filepath.Join(root, "names")))
	require.NoError(t, err)
	defer g.Close()
	n, err := g.Next()
	require.NoError(t, err)
	require.Equal(t, uint64(1), n)
}

// An explicit counter path in a directory another user owns: root creates
// nothing there, and an existing root-owned counter there is refused too
// (that user could replace it).
func TestCounterInDirOfAnotherUserRefused(t *testing.T) {
	requireRoot(t)
	root := testfs.SharedTempDir(t, "snapid-owner-")
	dir := filepath.Join(root, "theirs")
	require.NoError(t, os.Mkdir(dir, 0o755))
	require.NoError(t, os.Chown(dir, 65534, 65534))
	counter := filepath.Join(dir, "c")
	bind := filepath.Join(root, "names")

	_, err := Open(counter, "vm", WithBindingDir(bind))
	require.Error(t, err, "root created a counter in another user's directory")
	require.True(t, errors.Is(err, ErrUntrustedOwner), "%v", err)
	require.Contains(t, err.Error(), "nobody")
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, ents, "something was made in the refused directory")

	fresh := EncodeCounter(0)
	require.NoError(t, os.WriteFile(counter, fresh[:], 0o600))
	_, err = Open(counter, "vm", WithBindingDir(bind))
	require.Error(t, err, "root's counter in another user's directory was trusted")
	require.True(t, errors.Is(err, ErrUntrustedOwner), "%v", err)
}

// A counter path that passes through a directory another user can change
// is refused before anything is made, whatever level that directory is
// at: that user could swap the counter's directory for another one
// holding a second counter under the same path (so a binding by path
// would take it as the same counter) or none (a new counter from 0). A
// symbolic link on the way is followed only where no other user could
// have put it. Each case is checked for nothing made on disk.
func TestCounterPathThroughUntrustedLevelRefused(t *testing.T) {
	requireRoot(t)
	root := testfs.SharedTempDir(t, "snapid-path-")
	mk := func(p string, mode os.FileMode, uid int) string {
		t.Helper()
		require.NoError(t, os.MkdirAll(p, 0o755))
		require.NoError(t, os.Chmod(p, mode))
		require.NoError(t, os.Chown(p, uid, uid))
		return p
	}
	// Root's own directories, reached through levels of various owners.
	rootsA := mk(filepath.Join(root, "a"), 0o755, 0)
	theirs := mk(filepath.Join(root, "theirs"), 0o755, 65534)
	mk(filepath.Join(theirs, "mine"), 0o755, 0)
	require.NoError(t, os.Symlink(rootsA, filepath.Join(theirs, "link")))
	require.NoError(t, os.Lchown(filepath.Join(theirs, "link"), 65534, 65534))
	open777 := mk(filepath.Join(root, "open"), 0o777, 0)
	mk(filepath.Join(open777, "mine"), 0o755, 0)
	mk(filepath.Join(root, "openleaf"), 0o777, 0)
	mk(filepath.Join(root, "groupleaf"), 0o775, 0)
	sticky := mk(filepath.Join(root, "sticky"), os.ModeSticky|0o777, 0)
	mk(filepath.Join(sticky, "mine"), 0o755, 0)
	mk(filepath.Join(sticky, "their"), 0o755, 65534)
	mk(filepath.Join(sticky, "their", "mine"), 0o755, 0)
	require.NoError(t, os.Symlink(rootsA, filepath.Join(sticky, "theirlink")))
	require.NoError(t, os.Lchown(filepath.Join(sticky, "theirlink"), 65534, 65534))
	require.NoError(t, os.Symlink(rootsA, filepath.Join(sticky, "rootlink")))
	require.NoError(t, os.Symlink(rootsA, filepath.Join(root, "rootlink")))
	require.NoError(t, os.Symlink("../a", filepath.Join(rootsA, "up")))

	for _, tc := range []struct {
		path string // relative to root
		want error  // nil: accepted
	}{
		{"a/c", nil},
		{"theirs/mine/c", ErrUntrustedOwner},
		{"theirs/link/c", ErrUntrustedOwner},
		{"open/mine/c", ErrUntrustedDir},
		{"openleaf/c", ErrUntrustedDir},
		{"groupleaf/c", ErrUntrustedDir},
		{"sticky/mine/c", nil},
		{"sticky/their/mine/c", ErrUntrustedOwner},
		{"sticky/theirlink/c", ErrUntrustedOwner},
		{"sticky/rootlink/c", nil},
		{"rootlink/c", nil},
		{"a/up/c", nil},
	} {
		t.Run(tc.path, func(t *testing.T) {
			counter := filepath.Join(root, tc.path)
			before := testfs.Snapshot(t, root)
			g, err := Open(counter, "vm", WithBindingDir(filepath.Join(t.TempDir(), "names")))
			if tc.want == nil {
				require.NoError(t, err)
				id, err := g.UniqueID()
				require.NoError(t, err)
				require.Equal(t, "vm-1", id)
				require.NoError(t, g.Close())
				for _, p := range []string{counter} {
					require.NoError(t, os.Remove(p))
				}
				for _, s := range []string{".owner", ".mark", ".session", ".released", ".presence"} {
					_ = os.Remove(counter + s)
				}
				return
			}
			if err == nil {
				g.Close()
			}
			require.Error(t, err, "a counter reached through a level another user can change was used")
			require.True(t, errors.Is(err, tc.want), "%v", err)
			testfs.RequireUnchanged(t, root, before)
		})
	}
}
