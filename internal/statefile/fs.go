package statefile

import (
	"os"

	"golang.org/x/sys/unix"
)

// FS is the file-system seam: syncing a new file, linking, renaming and
// removing names, and syncing a directory. OS does the real work; tests
// and the power-loss simulator wrap it to record the order of operations
// and to inject failures.
//
// Under a Dir, links, renames and removals are *at calls the Dir makes
// itself (a path would be resolved again, through whatever another user
// put in its way); a seam that also implements Checker is asked first and
// can fail them. A directory sync under a Dir goes through the seam's
// SyncDir with the directory's path when the seam is not OS (so that a
// test counts and fails syncs level by level), and is an fsync of the
// held descriptor otherwise.
type FS interface {
	SyncFile(f *os.File) error // fsync of a new file, before it gets its name
	Link(oldname, newname string) error
	Rename(oldname, newname string) error
	Remove(name string) error
	SyncDir(dir string) error
}

// Checker is implemented by a seam that injects faults into the *at
// operations under a Dir: op is "link", "rename" or "remove", path and to
// the joined paths. An error stops the operation and is returned.
type Checker interface {
	Check(op, path, to string) error
}

// Writer is implemented by a seam that also makes the content writes of
// state files (a new file's content before it is synced and named, an
// in-place rewrite): a pwrite of b at off. Without it they are the
// file's own writes. It is the counter's I/O seam's WriteAt, so one value
// can be both.
type Writer interface {
	WriteAt(f *os.File, b []byte, off int64) (int, error)
}

// NoReplaceLinker is implemented by a seam that gives a file its name
// without replacing anything and removes the temporary name in one step,
// as OS does (rename with RENAME_NOREPLACE): CreateAtomically then never
// leaves the file with two names, even if the process dies there. A seam
// without it gets Link, then Remove of the temporary name.
type NoReplaceLinker interface {
	LinkNoReplace(oldname, newname string) error
}

// OS is the real file system.
type OS struct{}

func (OS) SyncFile(f *os.File) error            { return f.Sync() }
func (OS) Link(oldname, newname string) error   { return os.Link(oldname, newname) }
func (OS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }
func (OS) Remove(name string) error             { return os.Remove(name) }
func (OS) SyncDir(dir string) error             { return SyncDirPath(dir) }

// SyncDirPath fsyncs the directory at dir, opened without following a
// link at its last component.
func SyncDirPath(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	if err := fsync(fd); err != nil {
		return &os.PathError{Op: "sync", Path: dir, Err: err}
	}
	return nil
}

func fsync(fd int) error { return ignoringEINTR(func() error { return unix.Fsync(fd) }) }

// ignoringEINTR retries fn while it is interrupted by a signal.
func ignoringEINTR(fn func() error) error {
	for {
		if err := fn(); err != unix.EINTR {
			return err
		}
	}
}
