package snapid_test

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/require"
)

// Review: a user's node number binding blocks root only through a
// counter file of that user's (docs/security.md, "What a user can still
// block"), but a user's stride file blocks root through nothing: any user
// writes ~/.local/state/snapid/names/.stride with another stride (no
// counter, no binding, no ids ever issued) and every striped Open of
// root's without a registry is refused with ErrStrideMismatch, restarts
// of a counter root has used for long included, for as long as the file
// is there (numberbinding.go, checkUsersStride via bindStride's
// otherRealmStride). The message tells root "this host's striped ids use
// stride 7 ... use 7 (the stride belongs to the cluster)": the user's
// number, presented as the host's. The same file with bad content is
// ErrCorruptBinding for root.
func TestReviewUserStrideFileBlocksRootRestarts(t *testing.T) {
	requireRoot(t)
	root, home := hostWithNobody(t, "snapid-review-stride-")
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
}
