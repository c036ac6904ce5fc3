package snapid_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/snapidtest"
	"github.com/stretchr/testify/require"
)

// Attacks on the counter's path by another user (uid 65534), each as a
// review reproduced it; every one must be refused with nothing made or
// written where the attacker pointed.
func TestCounterPathAttacks(t *testing.T) {
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
			reg := snapidtest.NewRegistry()
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
