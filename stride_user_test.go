package snapid_test

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A user's stride file counts against root only while it goes with a
// counter file of that user's (through one of its node number bindings):
// a user with no counter, no binding and no ids who writes
// ~/.local/state/snapid/names/.stride with another stride (7) does not
// block root's striped restarts (stride 10), nor does the same file with
// content that cannot be parsed. TestStrideRootChecksUsers covers the
// user with a counter, which is refused.
func TestStrideUserFileWithoutCounterBlocksNothing(t *testing.T) {
	requireRoot(t)
	root, home := hostWithNobody(t, "snapid-stride-")
	rootCounter := filepath.Join(root, "rootc", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(rootCounter), 0o700))
	open := func() error {
		g, err := Open(rootCounter, "vm", WithSync(false), WithFormat(FormatStriped), WithStride(10), WithNodeNumber(3))
		if err == nil {
			_, err = g.UniqueUint64()
			require.NoError(t, err)
			require.NoError(t, g.Close())
		}
		return err
	}
	require.NoError(t, open(), "root's service runs with stride 10")

	names := filepath.Join(home, ".local", "state", "snapid", "names")
	testfs.AsOtherUser(t, "mkdir -p "+names+" && chmod 700 "+filepath.Join(home, ".local", "state", "snapid")+" "+names+
		" && printf 'snapid-stride 1\\n7\\n' > "+filepath.Join(names, ".stride"))
	// The user has no counter and no binding at all.
	entries, err := os.ReadDir(names)
	require.NoError(t, err)
	require.Len(t, entries, 1)

	err = open()
	if err != nil {
		t.Logf("root's restart: %v", err)
	}
	require.NoError(t, err, "a user with no counter and no ids blocks root's restarts with a stride file")

	testfs.AsOtherUser(t, "printf 'garbage\\n' > "+filepath.Join(names, ".stride"))
	require.NoError(t, open(), "a user's stride file that cannot be parsed blocks root's restarts")
}

// Without a registry, root's first striped Open checks the users' .stride
// files as well as the host-wide one: a user's node using stride 5 and
// root's using stride 10 on one host never issue the same integer.
func TestStrideRootChecksUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run another user")
	}
	root, home := hostWithNobody(t, "snapid-stride-")

	// The user's node "vm", number 1, stride 5, has issued 6, 11 and 16
	// (counter 3), as its own Open would have recorded it.
	userCounter := filepath.Join(home, "c.u64")
	names := filepath.Join(home, ".local", "state", "snapid", "names")
	testfs.AsOtherUser(t, "mkdir -p "+names+" && chmod 700 "+filepath.Join(home, ".local", "state", "snapid")+" "+names+
		" && printf '\\0\\0\\0\\0\\0\\0\\0\\3' > "+userCounter+
		" && printf 'snapid-binding 1\\n\"%s\"\\n' "+userCounter+" > "+filepath.Join(names, "vm")+
		" && printf 'snapid-number 1\\nvm\\n' > "+filepath.Join(names, "1")+
		" && printf 'snapid-stride 1\\n5\\n' > "+filepath.Join(names, ".stride"))

	rootCounter := filepath.Join(root, "rootc", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(rootCounter), 0o700))
	g, err := Open(rootCounter, "db", WithFormat(FormatStriped), WithNodeNumber(6), WithStride(10))
	if err != nil {
		require.ErrorIs(t, err, ErrStrideMismatch)
		return
	}
	defer g.Close()
	v, err := g.UniqueUint64()
	require.NoError(t, err)
	userIDs := map[uint64]bool{1*5 + 1: true, 2*5 + 1: true, 3*5 + 1: true}
	assert.False(t, userIDs[v], "root's first striped id %d (node 6, stride 10) is one the user's node 1 (stride 5) issued", v)
}
