package engine_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A counter path in a sticky, world-writable directory (as /tmp): another
// user plants the counter file first (its own, mode 0666). Root's Open
// must refuse it, naming the owner: otherwise the other user rewinds it
// and root hands out the same id twice.
func TestCounterOfAnotherUserRefused(t *testing.T) {
	t.Parallel()
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
	for _, s := range []string{".owner", ".mark", ".session"} {
		_, err := os.Lstat(counter + s)
		require.True(t, errors.Is(err, os.ErrNotExist), "%s was created beside a refused counter", s)
	}
}

// A file beside root's own counter (here the owner token) planted by
// another user in a sticky directory is refused too, and names its owner.
func TestFileBesideCounterOfAnotherUserRefused(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
				for _, s := range []string{".owner", ".mark", ".session", ".presence"} {
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

// Another user's (uid 65534) moves against the counter's path: every one
// is refused, with nothing made or written where that user pointed.
func TestCounterPathAttacks(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	zero := EncodeCounter(0)

	// The counter's own directory made by another user in a sticky
	// directory, holding that user's counter: root's first Open must not
	// take it (the user could put the counter back to 0 between runs).
	t.Run("own directory planted in a sticky directory", func(t *testing.T) {
		root := testfs.SharedTempDir(t, "snapid-path-")
		stk := filepath.Join(root, "stk")
		require.NoError(t, os.Mkdir(stk, 0o755))
		require.NoError(t, os.Chmod(stk, os.ModeSticky|0o777))
		require.NoError(t, os.WriteFile(filepath.Join(root, "zero"), zero[:], 0o644))
		counter := filepath.Join(stk, "work", "c")
		testfs.AsOtherUser(t, "mkdir "+filepath.Join(stk, "work")+" && cp "+filepath.Join(root, "zero")+" "+counter)
		g, err := Open(counter, "tmpw", WithBindingDir(filepath.Join(root, "names")))
		if err == nil {
			g.Close()
		}
		require.Error(t, err, "a directory another user made in a sticky directory was trusted")
		require.True(t, errors.Is(err, ErrUntrustedOwner), "%v", err)
		require.Contains(t, err.Error(), "nobody")
	})

	// WithFollowSymlinks: a link another user planted (in a directory it
	// owns, or in a sticky one) to a file of root's is never followed.
	for _, where := range []string{"their directory", "sticky directory"} {
		t.Run("followed link planted in "+where, func(t *testing.T) {
			root := testfs.SharedTempDir(t, "snapid-path-")
			victim := filepath.Join(root, "victim")
			require.NoError(t, os.WriteFile(victim, []byte("VICTIM!!"), 0o600))
			dir := filepath.Join(root, "d")
			require.NoError(t, os.Mkdir(dir, 0o755))
			if where == "sticky directory" {
				require.NoError(t, os.Chmod(dir, os.ModeSticky|0o777))
			} else {
				require.NoError(t, os.Chown(dir, 65534, 65534))
			}
			link := filepath.Join(dir, "c")
			testfs.AsOtherUser(t, "ln -s "+victim+" "+link)
			g, err := Open(link, "rdr", WithFollowSymlinks(true), WithBindingDir(filepath.Join(root, "names")))
			if err == nil {
				g.Next()
				g.Close()
			}
			require.Error(t, err, "a link another user planted was followed")
			require.True(t, errors.Is(err, ErrUntrustedOwner), "%v", err)
			b, rerr := os.ReadFile(victim)
			require.NoError(t, rerr)
			require.Equal(t, "VICTIM!!", string(b), "the link's target was written")
		})
	}

	// A link root made in its own directory is still followed.
	t.Run("followed link of root's own", func(t *testing.T) {
		root := testfs.SharedTempDir(t, "snapid-path-")
		real := filepath.Join(root, "real")
		require.NoError(t, os.WriteFile(real, zero[:], 0o600))
		link := filepath.Join(root, "link")
		require.NoError(t, os.Symlink(real, link))
		g, err := Open(link, "lnk", WithFollowSymlinks(true), WithBindingDir(filepath.Join(root, "names")))
		require.NoError(t, err)
		n, err := g.Next()
		require.NoError(t, err)
		require.Equal(t, uint64(1), n)
		require.NoError(t, g.Close())
	})

	// Init for a service user: a link the service user made in its own
	// directory, above the new counter, leads nowhere root did not mean.
	t.Run("init through a link of the service user", func(t *testing.T) {
		root := testfs.SharedTempDir(t, "snapid-path-")
		svc := filepath.Join(root, "svc")
		require.NoError(t, os.Mkdir(svc, 0o755))
		require.NoError(t, os.Chown(svc, 65534, 65534))
		rootonly := filepath.Join(root, "rootonly")
		require.NoError(t, os.Mkdir(rootonly, 0o700))
		testfs.AsOtherUser(t, "ln -s "+rootonly+" "+filepath.Join(svc, "sub"))
		_, err := Init(filepath.Join(svc, "sub", "c"), 5)
		require.Error(t, err, "Init followed the service user's link")
		require.True(t, errors.Is(err, ErrUntrustedOwner), "%v", err)
		ents, rerr := os.ReadDir(rootonly)
		require.NoError(t, rerr)
		require.Empty(t, ents, "Init made a file where the link pointed")
	})
}

// The files beside a counter that are only locked (the presence file, a
// sequence's refill lock), planted by another user in a sticky directory
// before root first uses the counter: refused like every other file
// beside the counter, never locked or joined.
func TestLockedFilesBesideCounterChecked(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	for _, tc := range []struct {
		name, script string
		want         error
	}{
		{"presence of another user", "umask 0; : > C.presence", ErrUntrustedOwner},
		{"presence a FIFO", "mkfifo -m 666 C.presence", ErrNotRegular},
		{"refill lock a FIFO", "mkfifo -m 666 C.seq.orders.refill", ErrNotRegular},
		{"lease floor a FIFO", "mkfifo -m 666 C.seq.orders.floor", ErrNotRegular},
		{"lease floor of another user", "umask 0; : > C.seq.orders.floor", ErrUntrustedOwner},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := testfs.SharedTempDir(t, "snapid-beside-")
			stk := filepath.Join(root, "stk")
			require.NoError(t, os.Mkdir(stk, 0o755))
			require.NoError(t, os.Chmod(stk, os.ModeSticky|0o777))
			counter := filepath.Join(stk, "c")
			testfs.AsOtherUser(t, "cd "+stk+" && C=c && "+strings.ReplaceAll(tc.script, "C.", "$C."))
			reg := registrytest.NewRegistry()
			_, err := CreateSequence(context.Background(), reg, "orders", 1, 1000)
			require.NoError(t, err)
			g, err := Open(counter, "pr1", WithRegistry(reg))
			if err == nil {
				defer g.Close()
				var s *Sequence
				s, err = g.Sequence("orders")
				if err == nil {
					s.Close()
				}
			}
			require.Error(t, err, "a file another user planted beside the counter was used")
			require.True(t, errors.Is(err, tc.want), "%v", err)
		})
	}
}

// A relative counter path is checked as the absolute path it names: run
// from a directory another user owns, Init, Repair and ReadCounter never
// follow that user's link into a root-only directory.
func TestRelativeCounterPathChecked(t *testing.T) {
	requireRoot(t)
	root := testfs.SharedTempDir(t, "snapid-rel-")
	home := filepath.Join(root, "home")
	require.NoError(t, os.Mkdir(home, 0o755))
	require.NoError(t, os.Chown(home, 65534, 65534))
	victim := filepath.Join(root, "victim")
	require.NoError(t, os.Mkdir(victim, 0o700))
	secret := filepath.Join(victim, "c2")
	require.NoError(t, os.WriteFile(secret, []byte("root secret config line.\n"), 0o600))
	testfs.AsOtherUser(t, "ln -s "+victim+" "+filepath.Join(home, "state"))
	t.Chdir(home)

	_, err := Init(filepath.Join("state", "newfile"), 7)
	require.ErrorIs(t, err, ErrUntrustedOwner)
	_, err = Repair(filepath.Join("state", "c2"), 5)
	require.ErrorIs(t, err, ErrUntrustedOwner)
	_, err = ReadCounter(filepath.Join("state", "c2"))
	require.ErrorIs(t, err, ErrUntrustedOwner)
	ents, err := os.ReadDir(victim)
	require.NoError(t, err)
	require.Len(t, ents, 1, "a file was made in the root-only directory")
	b, err := os.ReadFile(secret)
	require.NoError(t, err)
	require.Equal(t, "root secret config line.\n", string(b))
}

// An Open refused because of the counter's path makes nothing for the
// bindings either: no directory level, no lock file, no binding.
func TestRefusedPathMakesNoBindings(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	root := testfs.SharedTempDir(t, "snapid-refpath-")
	evil := filepath.Join(root, "evil")
	require.NoError(t, os.Mkdir(evil, 0o755))
	require.NoError(t, os.Chown(evil, 65534, 65534))
	bd := filepath.Join(root, "bd")
	_, err := Open(filepath.Join(evil, "c"), "web", WithBindingDir(filepath.Join(bd, "names")))
	require.ErrorIs(t, err, ErrUntrustedOwner)
	_, serr := os.Lstat(bd)
	require.True(t, os.IsNotExist(serr), "the bindings directory was made for a refused counter")
}

// A counter whose directory does not exist is refused with the directory
// named and what to do (create it: install -d -m 0700 DIR), for Open
// (which binds the name first) and Init, and nothing is made.
func TestMissingDirectorySaysCreateIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		open func(path string) error
	}{
		{"Open", func(path string) error {
			g, err := Open(path, "web_1", WithBindingDir(filepath.Join(t.TempDir(), "names")))
			if err == nil {
				g.Close()
			}
			return err
		}},
		{"Init", func(path string) error { _, err := Init(path, 1); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dir := filepath.Join(base, "cms")
			err := tc.open(filepath.Join(dir, "counter.u64"))
			require.Error(t, err)
			assert.True(t, errors.Is(err, fs.ErrNotExist), "%v", err)
			var fe *FileError
			assert.True(t, errors.As(err, &fe), "%v", err)
			assert.Contains(t, err.Error(), "the directory "+dir+" does not exist")
			assert.Contains(t, err.Error(), "create it first")
			assert.Contains(t, err.Error(), "install -d -m 0700 "+dir)
			_, serr := os.Stat(dir)
			assert.ErrorIs(t, serr, fs.ErrNotExist, "nothing made")
		})
	}
}

// Another user holds the counter's flock (it can read the counter) while
// a caller's update waits for it: the caller leaves at its deadline, and
// Close then returns at once (the update waiting for the lock gives up
// when every caller has left or the Generator closes), without a registry
// and with one, in strict and block mode.
func TestUpdateWaitEndsWithCallersAndClose(t *testing.T) {
	t.Parallel()
	skipShort(t)
	for _, tc := range []struct {
		name string
		reg  bool
		opts []Option
	}{
		{"strict", false, nil},
		{"block", false, []Option{WithBlock(4)}},
		{"strict with registry", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			counter := filepath.Join(lockDir(t), "c")
			opts := append([]Option{WithFileMode(0o644), WithBindingDir(filepath.Join(t.TempDir(), "names"))}, tc.opts...)
			if tc.reg {
				opts = append(opts, WithRegistry(registrytest.NewRegistry()), WithRegistryTimeout(time.Second))
			}
			g, err := Open(counter, "hangtest", opts...)
			require.NoError(t, err)
			testfs.HoldFlock(t, counter)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err = g.NextNContext(ctx, 5)
			require.ErrorIs(t, err, context.DeadlineExceeded)

			done := make(chan error, 1)
			go func() { done <- g.Close() }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Close still waits for an update stuck behind another process's flock")
			}
			// Nothing was taken by the update that gave up.
			b, err := os.ReadFile(counter)
			require.NoError(t, err)
			v, err := DecodeCounter(b)
			require.NoError(t, err)
			require.Zero(t, v)
		})
	}
}
