package snapid_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A counter whose directory does not exist is refused with the directory
// named and what to do (create it: install -d -m 0700 DIR), for Open
// (which binds the name first) and Init, and nothing is made.
func TestMissingDirectorySaysCreateIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(path string) error
	}{
		{"Open", func(path string) error {
			g, err := Open(path, "web_1", WithBindingDir(filepath.Join(t.TempDir(), "names")))
			if err == nil {
				g.Close()
			}
			return err
		}},
		{"Init", func(path string) error { _, err := Init(path, 1); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dir := filepath.Join(base, "cms")
			err := tc.open(filepath.Join(dir, "counter.u64"))
			require.Error(t, err)
			assert.True(t, errors.Is(err, fs.ErrNotExist), "%v", err)
			var fe *FileError
			assert.True(t, errors.As(err, &fe), "%v", err)
			assert.Contains(t, err.Error(), "the directory "+dir+" does not exist")
			assert.Contains(t, err.Error(), "create it first")
			assert.Contains(t, err.Error(), "install -d -m 0700 "+dir)
			_, serr := os.Stat(dir)
			assert.ErrorIs(t, serr, fs.ErrNotExist, "nothing made")
		})
	}
}
