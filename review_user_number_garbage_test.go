package snapid_test

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/require"
)

// Review: "a node number the user bound to one of its names blocks root's
// Opens with that number only while that name goes with a counter file of
// the user's" (docs/security.md). A user with no counter at all writes a
// number binding 5 -> x and, for x, a name binding root cannot parse:
// nameInUse (numberbinding.go) answers "unreadable: it may be in use"
// before it looks for the user's counter, so every Open of root's with
// node number 5 is refused (ErrNumberBound), restarts included, for as
// long as the two files are there.
func TestReviewUserGarbageBindingBlocksRootNumber(t *testing.T) {
	requireRoot(t)
	root, home := hostWithNobody(t, "snapid-review-numgarbage-")
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

// Review: one file is enough: a number binding in the registry's format
// (a third line with a counter path, "a number a registry gave: the
// name's for good") is ErrNumberBound for root before anything looks at
// whether the user has that counter (readNumberBinding). The user has no
// counter, no registry, and issued nothing.
func TestReviewUserRegistryStyleNumberBindingBlocksRoot(t *testing.T) {
	requireRoot(t)
	root, home := hostWithNobody(t, "snapid-review-numreg-")
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

// Review (holds): the same for a name binding root
// cannot parse, named like root's name, in a user's directory.
func TestReviewUserGarbageNameBinding(t *testing.T) {
	requireRoot(t)
	root, home := hostWithNobody(t, "snapid-review-namegarbage-")
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
