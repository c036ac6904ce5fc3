package snapid_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/statefile"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/require"
)

// fakeGetent makes the library read the host's users from a program
// printing script's output (the system's user database: getent passwd)
// until the test ends.
func fakeGetent(t *testing.T, dir, script string) {
	t.Helper()
	p := filepath.Join(dir, "getent")
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"+script+"\n"), 0o755))
	t.Cleanup(statefile.SetUserDatabase("", p))
}

// A user known only to the system's user database (LDAP, SSSD: not in
// /etc/passwd) who bound a name to a counter of its own is seen by root's
// first Open of that name.
func TestBindingUsersFromUserDatabase(t *testing.T) {
	requireRoot(t)
	root, home := hostWithNobody(t, "snapid-userdb-")
	fakeGetent(t, root, "echo 'root:x:0:0:root:/root:/bin/sh'; echo 'ldapuser:*:65534:65534:LDAP:"+home+":/bin/sh'")
	userBinds(t, home, "vm", filepath.Join(home, "c.u64"))
	testfs.AsOtherUser(t, "printf 'abcdefgh' > "+filepath.Join(home, "c.u64"))
	rootDir := filepath.Join(root, "rootc")
	require.NoError(t, os.Mkdir(rootDir, 0o755))
	_, err := Open(filepath.Join(rootDir, "vm.u64"), "vm")
	require.ErrorIs(t, err, ErrNameBound)
	require.Contains(t, err.Error(), "ldapuser")
}

// Root's reading of the host's users (and their homes) before it binds a
// name ends with the caller's context: a directory service or home file
// system that does not answer does not hold the Open.
func TestBindingUserScanEndsWithContext(t *testing.T) {
	requireRoot(t)
	root, _ := hostWithNobody(t, "snapid-userdb-hang-")
	fakeGetent(t, root, "exec sleep 60")
	rootDir := filepath.Join(root, "rootc")
	require.NoError(t, os.Mkdir(rootDir, 0o755))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		g, err := OpenContext(ctx, filepath.Join(rootDir, "vm.u64"), "vm")
		if err == nil {
			g.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(20 * time.Second):
		t.Fatal("OpenContext outlived its context by 20 s while the user database did not answer")
	}
	_, err := os.Stat(filepath.Join(rootDir, "vm.u64"))
	require.ErrorIs(t, err, os.ErrNotExist, "the Open that ended made the counter")
}
