package snapid_test

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The filesystem root is no binding directory: WithBindingDir("/") and
// SNAPID_BINDING_DIR=/ are refused before anything is written (root would
// otherwise write /<name> and /.lock).
func TestBindingDirFilesystemRootRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "counter.u64")
	cleanRootBinding(t, "rootdirvm")
	for _, bad := range []string{"/", "//", "/.", "/tmp/.."} {
		_, err := Open(path, "rootdirvm", WithBindingDir(bad))
		require.ErrorIs(t, err, ErrInvalidOption, bad)
		assert.Contains(t, err.Error(), "filesystem root")
	}
	t.Setenv("SNAPID_BINDING_DIR", "/")
	_, err := Open(path, "rootdirvm")
	require.ErrorIs(t, err, ErrInvalidOption)
	assert.Contains(t, err.Error(), "SNAPID_BINDING_DIR")
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, ents, "nothing created")
	_, err = os.Lstat("/rootdirvm")
	assert.ErrorIs(t, err, os.ErrNotExist, "a binding written at the filesystem root")
}

// cleanRootBinding removes, after the test, what a refused binding
// directory "/" would have written (with the defect back, as root): the
// binding of name and the lock, if the test made them.
func cleanRootBinding(t *testing.T, name string) {
	_, lockErr := os.Lstat("/.lock")
	t.Cleanup(func() {
		os.Remove("/" + name)
		if os.IsNotExist(lockErr) {
			os.Remove("/.lock")
		}
	})
}
