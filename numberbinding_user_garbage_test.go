package snapid_test

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/require"
)

// A node number a user bound to one of its names blocks root's Opens with
// that number only while that name goes with a counter file of the
// user's (docs/security.md): a user with no counter at all who writes a
// number binding 5 -> x and, for x, a name binding root cannot parse
// blocks nothing.
func TestNumberBindingUserGarbageNameBlocksNothing(t *testing.T) {
	requireRoot(t)
	root, home := hostWithNobody(t, "snapid-numgarbage-")
	rootCounter := filepath.Join(root, "rootc", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(rootCounter), 0o700))
	open := func() error {
		g, err := Open(rootCounter, "vm", WithSync(false), WithFormat(FormatDecimal), WithNodeNumber(5))
		if err == nil {
			_, err = g.UniqueID()
			require.NoError(t, err)
			require.NoError(t, g.Close())
		}
		return err
	}
	require.NoError(t, open(), "root's service runs with node number 5")

	names := filepath.Join(home, ".local", "state", "snapid", "names")
	testfs.AsOtherUser(t, "mkdir -p "+names+" && chmod 700 "+filepath.Join(home, ".local", "state", "snapid")+" "+names+
		" && printf 'snapid-number 1\\nx\\n' > "+filepath.Join(names, "5")+
		" && printf 'garbage\\n' > "+filepath.Join(names, "x"))

	err := open()
	if err != nil {
		t.Logf("root's restart: %v", err)
	}
	require.NoError(t, err, "a user with no counter blocks root's node number with two files")
}

// A number binding in the registry's format (a third line with a counter
// path) in a user's directory counts against root only while that counter
// is a counter file of the user's: a user with no counter, no registry
// and no ids blocks nothing with it.
func TestNumberBindingUserRegistryStyleWithoutCounterBlocksNothing(t *testing.T) {
	requireRoot(t)
	root, home := hostWithNobody(t, "snapid-numreg-")
	rootCounter := filepath.Join(root, "rootc", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(rootCounter), 0o700))
	open := func() error {
		g, err := Open(rootCounter, "vm", WithSync(false), WithFormat(FormatDecimal), WithNodeNumber(5))
		if err == nil {
			require.NoError(t, g.Close())
		}
		return err
	}
	require.NoError(t, open(), "root's service runs with node number 5")
	names := filepath.Join(home, ".local", "state", "snapid", "names")
	testfs.AsOtherUser(t, "mkdir -p "+names+" && chmod 700 "+filepath.Join(home, ".local", "state", "snapid")+" "+names+
		" && printf 'snapid-number 1\\nx\\n\"/nonexistent/c.u64\"\\n' > "+filepath.Join(names, "5"))
	err := open()
	if err != nil {
		t.Logf("root's restart: %v", err)
	}
	require.NoError(t, err, "one file of a user with no counter blocks root's node number")
}

// The same for a name binding root cannot parse, or a FIFO, named like
// root's name, in a user's directory: it blocks nothing.
func TestBindingUserGarbageNameBlocksNothing(t *testing.T) {
	requireRoot(t)
	root, home := hostWithNobody(t, "snapid-namegarbage-")
	rootCounter := filepath.Join(root, "rootc", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(rootCounter), 0o700))
	names := filepath.Join(home, ".local", "state", "snapid", "names")
	testfs.AsOtherUser(t, "mkdir -p "+names+" && chmod 700 "+filepath.Join(home, ".local", "state", "snapid")+" "+names+
		" && printf 'garbage\\n' > "+filepath.Join(names, "vm")+" && mkfifo "+filepath.Join(names, "db"))
	for _, name := range []string{"vm", "db"} {
		g, err := Open(rootCounter+"."+name, name, WithSync(false))
		if err != nil {
			t.Logf("%s: %v", name, err)
		} else {
			require.NoError(t, g.Close())
		}
		require.NoError(t, err, "a user with no counter blocks root's name %s", name)
	}
}
