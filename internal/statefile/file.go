package statefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// SmallLimit is how much ReadSmall reads of a file.
const SmallLimit = 4096

// CheckRegular checks, on the opened descriptor fd, that it is a regular
// file and, when owners is not empty, that one of owners owns it. It
// returns the file's status.
func CheckRegular(fd int, owners ...uint32) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return st, err
	}
	// The owner first: what an untrusted user made is refused as theirs,
	// whatever it is.
	if len(owners) > 0 && !ownedBy(st.Uid, owners) {
		return st, fmt.Errorf("%w: uid %d (%s)", ErrWrongOwner, st.Uid, UserName(st.Uid))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return st, fmt.Errorf("%w (%s)", ErrNotRegular, Kind(st.Mode))
	}
	// One name only: a hard link another user made (in a directory it
	// can write, beside a counter) to a file of root's would otherwise
	// let root write or lock that file in its place, whatever
	// fs.protected_hardlinks says. The files this layer makes never have
	// two names once their creation returns (see linkNoReplace).
	if st.Nlink != 1 {
		return st, fmt.Errorf("%w: it has %d names (hard links); a state file has exactly one. "+
			"Find the others (find <file system> -xdev -inum %d), remove the one that is not the state file, and try again",
			ErrLinked, st.Nlink, st.Ino)
	}
	return st, nil
}

// linkNoReplace gives the file oldname in olddirfd the name newname in
// newdirfd, failing with EEXIST if newname exists, and removes oldname:
// one rename(RENAME_NOREPLACE), so that no one ever sees the file with
// two names. A file system without it (EINVAL) gets a link and an unlink
// of oldname: a reader may then see two names for an instant (and refuse
// the file, ErrLinked), or for good if the process dies in between.
func linkNoReplace(olddirfd int, oldname string, newdirfd int, newname string) error {
	err := ignoringEINTR(func() error { return unix.Renameat2(olddirfd, oldname, newdirfd, newname, unix.RENAME_NOREPLACE) })
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.ENOTSUP) {
		return err
	}
	if err := unix.Linkat(olddirfd, oldname, newdirfd, newname, 0); err != nil {
		return err
	}
	_ = unix.Unlinkat(olddirfd, oldname, 0)
	return nil
}

func ownedBy(uid uint32, owners []uint32) bool {
	for _, o := range owners {
		if uid == o {
			return true
		}
	}
	return false
}

// Kind names a file type for a message ("a FIFO", "a directory", …).
func Kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFLNK:
		return "a symbolic link"
	}
	return "not a regular file"
}

// openErr turns an open's ELOOP into ErrSymlink and EISDIR into
// ErrNotRegular, keeping the errno.
func openErr(err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%w: %w", ErrSymlink, err)
	case errors.Is(err, unix.EISDIR):
		return fmt.Errorf("%w: %w", ErrNotRegular, err)
	}
	return err
}

// ReadSmall reads up to SmallLimit bytes of the file at path and returns
// them with the file's size: opened O_NONBLOCK (a FIFO planted there
// neither blocks the open nor the read: it is refused as not regular
// before anything is read), O_NOFOLLOW unless follow, and checked to be a
// regular file (and owned by one of owners, if any) on the descriptor. A
// file shorter than the limit was read to its end, and its size is what
// was read.
func ReadSmall(path string, follow bool, owners ...uint32) ([]byte, int64, error) {
	return readSmallAt(unix.AT_FDCWD, path, follow, owners)
}

func readSmallAt(dirfd int, name string, follow bool, owners []uint32) ([]byte, int64, error) {
	return readSmallChecked(dirfd, name, follow, owners, nil)
}

// readSmallChecked is readSmallAt with a further check of the opened
// file's status (nil: none) before it is read.
func readSmallChecked(dirfd int, name string, follow bool, owners []uint32, check func(unix.Stat_t) error) ([]byte, int64, error) {
	flags := unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK | unix.O_NOCTTY
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := openat(dirfd, name, flags, 0)
	if err != nil {
		return nil, 0, &fs.PathError{Op: "open", Path: name, Err: openErr(err)}
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	st, err := CheckRegular(fd, owners...)
	if err == nil && check != nil {
		err = check(st)
	}
	if err != nil {
		return nil, 0, err
	}
	b, err := io.ReadAll(io.LimitReader(f, SmallLimit))
	if err != nil {
		return nil, 0, err
	}
	if len(b) < SmallLimit {
		return b, int64(len(b)), nil
	}
	return b, st.Size, nil
}

func openat(dirfd int, name string, flags int, mode uint32) (int, error) {
	var fd int
	err := ignoringEINTR(func() error {
		var err error
		fd, err = unix.Openat(dirfd, name, flags, mode)
		return err
	})
	return fd, err
}

// WriteTemp writes a new temporary file, sets its mode, syncs it (through
// fsys) and closes it.
func WriteTemp(fsys FS, f *os.File, b []byte, mode fs.FileMode) error {
	var err error
	if w, ok := fsys.(Writer); ok {
		var n int
		if n, err = w.WriteAt(f, b, 0); err == nil && n < len(b) {
			err = io.ErrShortWrite
		}
	} else {
		_, err = f.Write(b)
	}
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = fsys.SyncFile(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// SplitPath returns the directory (never empty) and base name of path.
func SplitPath(path string) (dir, base string) {
	dir, base = filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	return dir, base
}

// nameMax is the longest file name Linux's file systems take (NAME_MAX).
const nameMax = 255

// tempNameExtra is how much longer CreateAtomically's temporary name is
// than the name of the file it makes: a leading dot, ".tmp-", and up to
// ten digits.
const tempNameExtra = 1 + len(".tmp-") + 10

// CheckCreatable refuses (wrapping syscall.ENAMETOOLONG) a path whose file
// CreateAtomically could not make because its temporary name would be
// longer than a file name may be, so that a caller making several files
// can refuse before it makes any.
func CheckCreatable(path string) error {
	_, base := SplitPath(path)
	if n := len(base) + tempNameExtra; n > nameMax {
		return fmt.Errorf("its name is %d bytes, and the temporary file it is made from would have %d, past the %d a file name may have: %w",
			len(base), n, nameMax, syscall.ENAMETOOLONG)
	}
	return nil
}

// CreateAtomically creates path with content b: a temporary file in the
// same directory is written and synced, given its name without replacing
// anything (linkNoReplace with the real file system; a link, then the
// temporary name removed, through another FS), then the directory synced, which makes both the new name
// and the removal durable. It fails with fs.ErrExist if path exists (after
// syncing the directory, so that a file another process just created is
// durable before the caller relies on it); an existing file is never
// replaced.
func CreateAtomically(fsys FS, path string, b []byte, mode fs.FileMode) error {
	dir, base := SplitPath(path)
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return tempError(path, err)
	}
	tmpName := tmp.Name()
	removed := false
	defer func() {
		if !removed {
			_ = fsys.Remove(tmpName)
		}
	}()
	if err := WriteTemp(fsys, tmp, b, mode); err != nil {
		return tempError(path, err)
	}
	if _, real := fsys.(OS); real {
		err = linkNoReplace(unix.AT_FDCWD, tmpName, unix.AT_FDCWD, path)
		if errors.Is(err, unix.EEXIST) {
			err = fs.ErrExist
		} else if err != nil {
			err = &os.LinkError{Op: "link", Old: tmpName, New: path, Err: err}
		}
	} else if l, ok := fsys.(NoReplaceLinker); ok {
		err = l.LinkNoReplace(tmpName, path)
	} else {
		err = fsys.Link(tmpName, path)
	}
	// The temporary name goes before the directory is synced, so that the
	// sync covers its removal too.
	_ = fsys.Remove(tmpName)
	removed = true
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return tempError(path, err)
	}
	if serr := fsys.SyncDir(dir); serr != nil {
		return fmt.Errorf("sync directory %s: %w", dir, serr)
	}
	return err
}

// ReplaceAtomically replaces (or creates) path with content b: a synced
// temporary file renamed into place, then the directory synced. The
// temporary file is created exclusively, so a link planted there is not
// followed.
func ReplaceAtomically(fsys FS, path string, b []byte, mode fs.FileMode) error {
	dir, base := SplitPath(path)
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return tempError(path, err)
	}
	renamed := false
	defer func() {
		if !renamed {
			_ = fsys.Remove(tmp.Name())
		}
	}()
	if err := WriteTemp(fsys, tmp, b, mode); err != nil {
		return tempError(path, err)
	}
	if err := fsys.Rename(tmp.Name(), path); err != nil {
		return tempError(path, err)
	}
	renamed = true
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	return nil
}

// WriteInPlace writes b at offset 0 of f and, if sync, syncs it, through
// fsys (its Writer if it is one, and SyncFile).
func WriteInPlace(fsys FS, f *os.File, b []byte, sync bool) error {
	return WriteInPlaceAt(fsys, f, b, 0, sync)
}

// WriteInPlaceAt is WriteInPlace at offset off.
func WriteInPlaceAt(fsys FS, f *os.File, b []byte, off int64, sync bool) error {
	if fsys == nil {
		fsys = OS{}
	}
	var err error
	if w, ok := fsys.(Writer); ok {
		var n int
		if n, err = w.WriteAt(f, b, off); err == nil && n < len(b) {
			err = io.ErrShortWrite
		}
	} else {
		_, err = f.WriteAt(b, off)
	}
	if err != nil {
		return err
	}
	if sync {
		return fsys.SyncFile(f)
	}
	return nil
}

// tempError is err, which making the file at path through a temporary
// file beside it ended in, as an error on path: the temporary file's
// name (random, and removed by then) is only detail, so that the caller
// names the file it was making, not a file the user never made.
func tempError(path string, err error) error {
	_, base := SplitPath(path)
	isTemp := func(p string) bool { return strings.HasPrefix(filepath.Base(p), "."+base+".tmp-") }
	op, tmp := "create", ""
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe) && isTemp(pe.Path):
		op, tmp, err = pe.Op, filepath.Base(pe.Path), pe.Err
	case errors.As(err, &le) && isTemp(le.Old):
		op, tmp, err = le.Op, filepath.Base(le.Old), le.Err
	default:
		return err // names path already, or no file
	}
	if op == "createtemp" {
		op, tmp = "create", ""
	}
	return &fs.PathError{Op: op, Path: path, Err: &TempFileError{Name: tmp, Err: err}}
}

// TempFileError is an error of the temporary file (Name, "" if it could
// not be made) a state file is written to before it gets its name: the
// error it wraps, with the temporary file as detail.
type TempFileError struct {
	Name string
	Err  error
}

func (e *TempFileError) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("%v (making the temporary file it is written to first)", e.Err)
	}
	return fmt.Sprintf("%v (in the temporary file it is written to first, %s)", e.Err, e.Name)
}

func (e *TempFileError) Unwrap() error { return e.Err }
