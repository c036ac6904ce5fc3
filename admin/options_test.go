package admin_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// WithOwner is for Init and Repair: every other call refuses it, and
// changes nothing.
func TestWithOwnerRefusedOutsideInitAndRepair(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "counter.u64")
	_, err := admin.Init(path, 1)
	require.NoError(t, err)
	own := admin.WithOwner(os.Getuid(), -1)
	reg := registrytest.NewRegistry()
	_, err = admin.Release(context.Background(), reg, path, "web_1", own)
	require.ErrorIs(t, err, snapid.ErrInvalidOption)
	_, err = admin.ReadCounter(path, own)
	require.ErrorIs(t, err, snapid.ErrInvalidOption)
	_, err = admin.ReadHostFiles(path, own)
	require.ErrorIs(t, err, snapid.ErrInvalidOption)
	_, err = admin.OwnerToken(path, own)
	require.ErrorIs(t, err, snapid.ErrInvalidOption)
	_, _, _, _, err = admin.ReadNodeNumber(path, own)
	require.ErrorIs(t, err, snapid.ErrInvalidOption)
}
