package statefile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckCreatable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	longest := strings.Repeat("n", nameMax-tempNameExtra)
	require.NoError(t, CheckCreatable(filepath.Join(dir, longest)))
	require.NoError(t, CreateAtomically(OS{}, filepath.Join(dir, longest), nil, 0o600), "the longest name CheckCreatable takes is made")
	// One byte longer is refused: its temporary name could pass 255 bytes
	// (whether it does depends on the random digits os.CreateTemp picks).
	err := CheckCreatable(filepath.Join(dir, longest+"n"))
	require.ErrorIs(t, err, syscall.ENAMETOOLONG)
	// A name whose temporary name passes 255 bytes whatever the digits
	// cannot be made.
	require.Error(t, CreateAtomically(OS{}, filepath.Join(dir, strings.Repeat("n", nameMax-len(".")-len(".tmp-"))), nil, 0o600))
}

// failingFS fails the sync of a new file (as a full disk would) or the
// renaming and linking of it into place.
type failingFS struct {
	OS
	op string // "sync", "rename" or "link"
}

func (f failingFS) SyncFile(file *os.File) error {
	if f.op == "sync" {
		return &os.PathError{Op: "sync", Path: file.Name(), Err: syscall.ENOSPC}
	}
	return f.OS.SyncFile(file)
}

func (f failingFS) Rename(oldname, newname string) error {
	if f.op == "rename" {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: syscall.EIO}
	}
	return f.OS.Rename(oldname, newname)
}

func (f failingFS) Link(oldname, newname string) error {
	if f.op == "link" {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: syscall.EIO}
	}
	return f.OS.Link(oldname, newname)
}

// An error making a state file names that file, not the temporary file
// it is written to first (random, and removed by then), which is only
// detail after the cause; the cause still matches, and the temporary
// file is gone.
func TestTemporaryFileErrorsNameTheFile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		make   func(dir, path string, fsys FS) error
		op     string
		errno  syscall.Errno
		wantOp string
	}{
		{"create, sync fails", func(_, path string, fsys FS) error { return CreateAtomically(fsys, path, []byte("x"), 0o600) }, "sync", syscall.ENOSPC, "sync"},
		{"create, link fails", func(_, path string, fsys FS) error { return CreateAtomically(fsys, path, []byte("x"), 0o600) }, "link", syscall.EIO, "link"},
		{"replace, sync fails", func(_, path string, fsys FS) error { return ReplaceAtomically(fsys, path, []byte("x"), 0o600) }, "sync", syscall.ENOSPC, "sync"},
		{"replace, rename fails", func(_, path string, fsys FS) error { return ReplaceAtomically(fsys, path, []byte("x"), 0o600) }, "rename", syscall.EIO, "rename"},
		{"create in a directory, sync fails", func(dir, path string, fsys FS) error {
			d, err := OpenDir(dir, DirOptions{FS: fsys})
			if err != nil {
				return err
			}
			defer d.Close()
			return d.Create(filepath.Base(path), []byte("x"), 0o600)
		}, "sync", syscall.ENOSPC, "sync"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "counter.u64")
			err := tc.make(dir, path, failingFS{op: tc.op})
			require.ErrorIs(t, err, tc.errno)
			var pe *fs.PathError
			require.True(t, errors.As(err, &pe), "%v", err)
			assert.Equal(t, path, pe.Path, "the error names the file being made")
			assert.Equal(t, tc.wantOp, pe.Op)
			msg := err.Error()
			cause := strings.Index(msg, tc.errno.Error())
			require.GreaterOrEqual(t, cause, 0, msg)
			assert.NotContains(t, msg[:cause], ".tmp-", "the temporary file is only detail, after the cause: %s", msg)
			ents, err := os.ReadDir(dir)
			require.NoError(t, err)
			assert.Empty(t, ents, "the temporary file is removed")
		})
	}
}
