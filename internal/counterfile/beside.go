package counterfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/internal/statefile"
)

// CreateBeside creates the file at path holding b, with mode (see
// statefile.CreateAtomically), if nothing is there: a file beside the
// counter, made as the counter is. A file another process
// created first is kept; whatever is at path, usable or not, is left for
// the open that follows to judge. A file that is there already may have
// been linked by a process killed before its directory sync, or whose
// directory sync failed: the directory is synced again, so that its name
// is durable before anything is issued from it.
func CreateBeside(fsys statefile.FS, path string, b []byte, mode fs.FileMode) error {
	_, err := CreateBesideNew(fsys, path, b, mode)
	return err
}

// CreateBesideNew is CreateBeside reporting whether this call made the
// file (false: something was at path already, or another process made
// it first), so that an Open refused afterwards can tell what it made.
func CreateBesideNew(fsys statefile.FS, path string, b []byte, mode fs.FileMode) (created bool, err error) {
	if _, err := os.Lstat(path); err == nil {
		dir, _ := statefile.SplitPath(path)
		if err := fsys.SyncDir(dir); err != nil {
			return false, &errs.FileError{Op: "open", Path: path, Err: fmt.Errorf("sync directory: %w", err)}
		}
		return false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	err = statefile.CreateAtomically(fsys, path, b, mode)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, &errs.FileError{Op: "create", Path: path, Err: err}
	}
	return true, nil
}

// CheckBeside checks a file beside the counter that is only locked, never
// read (the presence file, a sequence's refill lock): a regular file
// trusted as the counter is (statefile.CheckOwner), checked on a
// descriptor opened without following a link and without blocking. It is
// opened again by name to be locked; no other user can replace it in
// between, since the directory is checked (statefile.CheckDirOwner) and,
// if sticky, lets only the file's owner rename it.
func CheckBeside(path string, follow bool) error {
	f, err := os.OpenFile(path, OpenFlags(follow)&^os.O_RDWR|os.O_RDONLY, 0)
	if err != nil {
		return &errs.FileError{Op: "open", Path: path, Err: errs.OpenError(err)}
	}
	defer f.Close()
	st, err := statefile.CheckRegular(int(f.Fd()))
	if err == nil {
		err = statefile.CheckOwner(path, st)
	}
	if err != nil {
		return &errs.FileError{Op: "open", Path: path, Err: errs.OpenError(err)}
	}
	return nil
}
