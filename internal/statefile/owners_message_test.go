package statefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The refusal of a counter below a directory another user owns names the
// owners the directories may have: for root, root once (not "root or
// root"); for another user, root or that user.
func TestWrongOwnerAdviceNamesRootOnce(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to give a directory to another user")
	}
	other := filepath.Join(t.TempDir(), "other")
	require.NoError(t, os.MkdirAll(filepath.Join(other, "sub"), 0o755))
	require.NoError(t, os.Chown(other, 65534, 65534))
	for _, tc := range []struct {
		name, path string
	}{
		{"passed through", filepath.Join(other, "sub", "counter.u64")},
		{"the counter's directory", filepath.Join(other, "counter.u64")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckDirOwner(tc.path)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrWrongOwner), "%v", err)
			assert.NotContains(t, err.Error(), "root or root")
			assert.Contains(t, err.Error(), "owned by root")
			assert.Equal(t, 1, strings.Count(err.Error(), "owned by root"), "%v", err)
		})
	}
	assert.Equal(t, "root or "+UserName(65534), trustedOwners(65534))
}
