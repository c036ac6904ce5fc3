package snapid_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/require"
)

// userBinds has nobody bind name, in its own bindings directory, to the
// path bound (nothing is made there).
func userBinds(t *testing.T, home, name, bound string) {
	t.Helper()
	names := filepath.Join(home, ".local", "state", "snapid", "names")
	testfs.AsOtherUser(t, "mkdir -p "+names+" && chmod 700 "+filepath.Join(home, ".local", "state", "snapid")+" "+names+
		" && printf 'snapid-binding 1\\n\"%s\"\\n' "+bound+" > "+filepath.Join(names, name)+" && touch "+filepath.Join(names, ".lock"))
}

// A user's binding blocks root's Open of a name only while it goes with a
// counter file of that user's (a regular file of 8 bytes the user owns):
// one to a directory (its home), a file of another size, or a file of
// root's does not, so a user cannot block root's restarts with a binding
// to whatever exists.
func TestBindingUserBindingToNonCounterIgnored(t *testing.T) {
	requireRoot(t)
	root, home := hostWithNobody(t, "snapid-noncounter-")
	short := filepath.Join(home, "short")
	testfs.AsOtherUser(t, "printf abc > "+short)
	rootsFile := filepath.Join(root, "roots")
	c := EncodeCounter(5)
	require.NoError(t, os.WriteFile(rootsFile, c[:], 0o644))
	rootDir := filepath.Join(root, "rootc")
	require.NoError(t, os.Mkdir(rootDir, 0o755))
	for name, bound := range map[string]string{"home": home, "short": short, "roots": rootsFile} {
		userBinds(t, home, name, bound)
		g, err := Open(filepath.Join(rootDir, name+".u64"), name)
		require.NoError(t, err, "a binding to %s is no counter of the user's", bound)
		require.NoError(t, g.Close())
	}
	// A counter of the user's does block it.
	counter := filepath.Join(home, "c.u64")
	testfs.AsOtherUser(t, "printf 'abcdefgh' > "+counter)
	userBinds(t, home, "vm", counter)
	_, err := Open(filepath.Join(rootDir, "vm.u64"), "vm")
	require.ErrorIs(t, err, ErrNameBound)
}

// A user's binding whose counter does not exist counts while that user
// holds its bindings lock (its Open may be making the counter): root's
// Open waits for the lock at most the bound, then refuses naming the user;
// once the lock is free, the binding (left by an Open that was killed) no
// longer counts.
func TestBindingUserBindingWithoutCounterCountsWhileLocked(t *testing.T) {
	requireRoot(t)
	root, home := hostWithNobody(t, "snapid-userlock-")
	ExportUserLockWait(t, time.Second)
	userBinds(t, home, "vm", filepath.Join(home, "vm.u64"))
	rootDir := filepath.Join(root, "rootc")
	require.NoError(t, os.Mkdir(rootDir, 0o755))
	lock := filepath.Join(home, ".local", "state", "snapid", "names", ".lock")
	holder := testfs.HoldFlockCancel(t, lock)
	_, err := Open(filepath.Join(rootDir, "vm.u64"), "vm")
	require.ErrorIs(t, err, ErrNameBound)
	require.ErrorIs(t, err, ErrLocked)
	require.Contains(t, err.Error(), "nobody")
	_, serr := os.Stat(filepath.Join(rootDir, "vm.u64"))
	require.ErrorIs(t, serr, os.ErrNotExist, "the refused Open made the counter")
	holder()
	g, err := Open(filepath.Join(rootDir, "vm.u64"), "vm")
	require.NoError(t, err, "no Open of the user's is making the counter")
	require.NoError(t, g.Close())
}

// The same for node numbers: a user's binding of a number to a name whose
// binding leads to anything but a counter file of that user's (its home,
// here) does not block root's Opens with that number.
func TestNumberBindingUserToNonCounterIgnored(t *testing.T) {
	requireRoot(t)
	root, home := hostWithNobody(t, "snapid-numnoncounter-")
	userBinds(t, home, "x", home)
	names := filepath.Join(home, ".local", "state", "snapid", "names")
	testfs.AsOtherUser(t, "printf 'snapid-number 1\\nx\\n' > "+filepath.Join(names, "7"))
	rootDir := filepath.Join(root, "rootc")
	require.NoError(t, os.Mkdir(rootDir, 0o755))
	g, err := Open(filepath.Join(rootDir, "db.u64"), "db", WithFormat(FormatDecimal), WithNodeNumber(7))
	require.NoError(t, err, "a user's number binding to a name bound to its home blocks root")
	require.NoError(t, g.Close())
}
