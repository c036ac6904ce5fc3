package statefile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Dir is a directory opened once, level by level from the root with
// O_DIRECTORY|O_NOFOLLOW, whose files are reached by *at calls on its
// descriptor: nothing another user renames or links in place of a level
// above it redirects them.
type Dir struct {
	fd   int
	path string
	fs   FS
	st   unix.Stat_t
}

// DirOptions says how OpenDir walks to the directory and what it trusts.
type DirOptions struct {
	// Create makes missing levels with mode Perm (each new level fsynced
	// into its parent, through FS, before the next is made).
	Create bool
	Perm   uint32
	// Owners are the users a level may belong to; empty trusts every
	// owner. A level (the directory itself included) owned by another
	// user is refused with ErrWrongOwner. A level others can write is
	// refused with ErrUnsafeDir unless it has the sticky bit (as /tmp
	// has: its entries can then only be renamed by their owners, who
	// are checked in turn); the directory itself is refused with
	// ErrUnsafeDir when group or others can write it, sticky or not.
	Owners []uint32
	// AllowSticky accepts a directory itself writable by others when it
	// has the sticky bit (its entries can only be replaced by their
	// owners), for a reader that trusts only entries owned by Owners.
	AllowSticky bool
	// FS is the seam (nil: OS).
	FS FS
}

// OpenDir opens the absolute directory path. Every level is opened with
// openat(O_DIRECTORY|O_NOFOLLOW) under the one before, so a symbolic link
// at any level is refused (ErrSymlink), and checked on its descriptor.
func OpenDir(path string, o DirOptions) (*Dir, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("%s: not an absolute path", path)
	}
	if o.FS == nil {
		o.FS = OS{}
	}
	path = filepath.Clean(path)
	fd, st, err := openRoot()
	if err != nil {
		return nil, err
	}
	cur := "/"
	parts := pathLevels(path)
	for i, name := range parts {
		next := filepath.Join(cur, name)
		if !trusted(st, o.Owners) && !sticky(st) {
			unix.Close(fd)
			return nil, levelErr(cur, st, o.Owners)
		}
		nfd, err := openLevel(fd, cur, name, next, o)
		if err != nil {
			return nil, err
		}
		fd, cur = nfd, next
		if err := checkLevel(fd, cur, &st, o.Owners, i == len(parts)-1); err != nil {
			return nil, err
		}
	}
	if writableByOthers(st) && !(o.AllowSticky && sticky(st)) {
		unix.Close(fd)
		return nil, levelErr(cur, st, o.Owners)
	}
	return &Dir{fd: fd, path: cur, fs: o.FS, st: st}, nil
}

// openRoot opens the root directory and returns its descriptor and
// status.
func openRoot() (int, unix.Stat_t, error) {
	fd, err := openat(unix.AT_FDCWD, "/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, unix.Stat_t{}, &fs.PathError{Op: "open", Path: "/", Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, err
	}
	return fd, st, nil
}

// pathLevels returns the names of the levels of the clean absolute path
// below the root, none for the root itself.
func pathLevels(path string) []string {
	if path == "/" {
		return nil
	}
	return strings.Split(strings.TrimPrefix(path, "/"), "/")
}

// openLevel opens the directory name (whose path is next) under fd, the
// level at path cur, without following a symbolic link, making it first
// if it is missing and o.Create is set. It closes fd whatever happens. A
// symbolic link in name's place is refused with ErrSymlink.
func openLevel(fd int, cur, name, next string, o DirOptions) (int, error) {
	nfd, err := openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) && o.Create {
		if merr := makeLevel(fd, cur, name, next, o); merr != nil {
			unix.Close(fd)
			return -1, merr
		}
		nfd, err = openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	unix.Close(fd)
	if err != nil {
		return -1, openLevelErr(next, err)
	}
	return nfd, nil
}

// makeLevel makes the directory name (whose path is next) under fd, the
// level at path cur, with mode o.Perm, and syncs fd if it made it. A
// level that already exists (made meanwhile) is no error.
func makeLevel(fd int, cur, name, next string, o DirOptions) error {
	merr := unix.Mkdirat(fd, name, o.Perm)
	if merr == nil {
		// The new level's name is durable before anything is
		// made in it.
		if serr := syncDirFd(o.FS, fd, cur); serr != nil {
			return fmt.Errorf("sync directory %s: %w", cur, serr)
		}
	} else if !errors.Is(merr, unix.EEXIST) {
		return &fs.PathError{Op: "mkdir", Path: next, Err: merr}
	}
	return nil
}

// openLevelErr is the error of opening the level at path next, which
// failed with err: ErrSymlink if a symbolic link is in its place.
func openLevelErr(next string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		var lst unix.Stat_t
		if unix.Lstat(next, &lst) == nil && lst.Mode&unix.S_IFMT == unix.S_IFLNK {
			return &fs.PathError{Op: "open", Path: next, Err: fmt.Errorf("%w (owned by %s)", ErrSymlink, UserName(lst.Uid))}
		}
	}
	return &fs.PathError{Op: "open", Path: next, Err: err}
}

// checkLevel reads the status of fd, the level at path cur, into st and
// refuses the level if it does not belong to owners or if, not being the
// last, others can write it and it is not sticky. It closes fd when it
// returns an error.
func checkLevel(fd int, cur string, st *unix.Stat_t, owners []uint32, last bool) error {
	if err := unix.Fstat(fd, st); err != nil {
		unix.Close(fd)
		return err
	}
	if !trusted(*st, owners) || (!last && writableByOthers(*st) && !sticky(*st)) {
		unix.Close(fd)
		return levelErr(cur, *st, owners)
	}
	return nil
}

func trusted(st unix.Stat_t, owners []uint32) bool {
	return len(owners) == 0 || ownedBy(st.Uid, owners)
}

func writableByOthers(st unix.Stat_t) bool { return st.Mode&0o022 != 0 }
func sticky(st unix.Stat_t) bool           { return st.Mode&unix.S_ISVTX != 0 }

func levelErr(path string, st unix.Stat_t, owners []uint32) error {
	if !trusted(st, owners) {
		return &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: it belongs to %s", ErrWrongOwner, UserName(st.Uid))}
	}
	return &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w (mode %#o, owned by %s)", ErrUnsafeDir, st.Mode&0o7777, UserName(st.Uid))}
}

func syncDirFd(fsys FS, fd int, path string) error {
	if _, ok := fsys.(OS); ok {
		return fsync(fd)
	}
	return fsys.SyncDir(path)
}

// Path is the directory's path.
func (d *Dir) Path() string { return d.path }

// Owner is the uid owning the directory.
func (d *Dir) Owner() uint32 { return d.st.Uid }

// Mode is the directory's permission bits (with sticky, setuid, setgid).
func (d *Dir) Mode() uint32 { return d.st.Mode & 0o7777 }

// Close releases the descriptor.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// Sync fsyncs the directory (through the seam; see FS).
func (d *Dir) Sync() error { return syncDirFd(d.fs, d.fd, d.path) }

func (d *Dir) join(name string) string { return filepath.Join(d.path, name) }

func (d *Dir) check(op, name, to string) error {
	if c, ok := d.fs.(Checker); ok {
		t := ""
		if to != "" {
			t = d.join(to)
		}
		return c.Check(op, d.join(name), t)
	}
	return nil
}

// ReadFile reads up to SmallLimit bytes of the file name in d without
// following a link and without blocking, refusing anything but a regular
// file owned by one of owners (any owner if none).
func (d *Dir) ReadFile(name string, owners ...uint32) ([]byte, unix.Stat_t, error) {
	fd, err := openat(d.fd, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, unix.Stat_t{}, &fs.PathError{Op: "open", Path: d.join(name), Err: openErr(err)}
	}
	f := os.NewFile(uintptr(fd), d.join(name))
	defer f.Close()
	st, err := CheckRegular(fd, owners...)
	if err != nil {
		return nil, st, &fs.PathError{Op: "open", Path: d.join(name), Err: err}
	}
	b := make([]byte, SmallLimit+1)
	n, err := f.ReadAt(b, 0)
	if n > SmallLimit {
		return nil, st, &fs.PathError{Op: "read", Path: d.join(name), Err: ErrTooLarge}
	}
	if err != nil && n < len(b) && !errors.Is(err, errEOF) {
		return nil, st, err
	}
	return b[:n], st, nil
}

// writeTemp creates a temporary file in d holding b with mode, synced.
func (d *Dir) writeTemp(base string, b []byte, mode uint32) (string, error) {
	var raw [8]byte
	_, _ = rand.Read(raw[:])
	tmp := "." + base + ".tmp-" + hex.EncodeToString(raw[:])
	fd, err := openat(d.fd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return "", tempError(d.join(base), &fs.PathError{Op: "create", Path: d.join(tmp), Err: err})
	}
	f := os.NewFile(uintptr(fd), d.join(tmp))
	if err := WriteTemp(d.fs, f, b, fs.FileMode(mode)); err != nil {
		_ = unix.Unlinkat(d.fd, tmp, 0)
		return "", tempError(d.join(base), err)
	}
	return tmp, nil
}

// Create creates name in d holding b (a synced temporary file linked into
// place, the temporary name removed, the directory synced). It fails with
// fs.ErrExist if name exists, which is never replaced.
func (d *Dir) Create(name string, b []byte, mode uint32) error {
	return d.CreateOwned(name, b, mode, -1, -1)
}

// Replace puts b at name in d, replacing what is there (a synced
// temporary file renamed into place, then the directory synced).
func (d *Dir) Replace(name string, b []byte, mode uint32) error {
	tmp, err := d.writeTemp(name, b, mode)
	if err != nil {
		return err
	}
	if err := d.check("rename", tmp, name); err != nil {
		_ = unix.Unlinkat(d.fd, tmp, 0)
		return err
	}
	if err := unix.Renameat(d.fd, tmp, d.fd, name); err != nil {
		_ = unix.Unlinkat(d.fd, tmp, 0)
		return &fs.PathError{Op: "rename", Path: d.join(name), Err: err}
	}
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", d.path, err)
	}
	return nil
}

// Remove removes name from d and syncs d.
func (d *Dir) Remove(name string) error {
	if err := d.check("remove", name, ""); err != nil {
		return err
	}
	if err := unix.Unlinkat(d.fd, name, 0); err != nil {
		return &fs.PathError{Op: "remove", Path: d.join(name), Err: err}
	}
	return d.Sync()
}

// OpenLockFile opens (creating it with mode if missing) the lock file
// name in d without following a link and without blocking, and checks on
// the descriptor that it is a regular file owned by one of owners.
func (d *Dir) OpenLockFile(name string, mode uint32, owners ...uint32) (*os.File, error) {
	fd, err := openat(d.fd, name, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, mode)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: d.join(name), Err: openErr(err)}
	}
	if _, err := CheckRegular(fd, owners...); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: d.join(name), Err: err}
	}
	return os.NewFile(uintptr(fd), d.join(name)), nil
}

// OpenExisting opens the existing file name in d for reading (to lock
// it: flock works on a read-only descriptor) without creating it,
// following a link or blocking, and checks on the descriptor that it is a
// regular file with one link owned by one of owners.
func (d *Dir) OpenExisting(name string, owners ...uint32) (*os.File, error) {
	fd, err := openat(d.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: d.join(name), Err: openErr(err)}
	}
	if _, err := CheckRegular(fd, owners...); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: d.join(name), Err: err}
	}
	return os.NewFile(uintptr(fd), d.join(name)), nil
}

// MoveAside renames name in d to a new name starting with prefix (".",
// so never a node name) and returns that name: what is there, whatever it
// is (a directory, a FIFO), is kept, out of the way. It never replaces.
func (d *Dir) MoveAside(name, prefix string) (string, error) {
	var raw [8]byte
	_, _ = rand.Read(raw[:])
	aside := prefix + name + "-" + hex.EncodeToString(raw[:])
	if err := d.check("rename", name, aside); err != nil {
		return "", err
	}
	err := ignoringEINTR(func() error { return unix.Renameat2(d.fd, name, d.fd, aside, unix.RENAME_NOREPLACE) })
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		err = unix.Renameat(d.fd, name, d.fd, aside) // the name is random: nothing is there
	}
	if err != nil {
		return "", &fs.PathError{Op: "rename", Path: d.join(name), Err: err}
	}
	if err := d.Sync(); err != nil {
		return "", fmt.Errorf("sync directory %s: %w", d.path, err)
	}
	return aside, nil
}

// Names returns the names of the entries of d (neither "." nor "..").
func (d *Dir) Names() ([]string, error) {
	fd, err := openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: d.path, Err: err}
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	return f.Readdirnames(-1)
}

// Lstat returns the status of name in d, not following a link.
func (d *Dir) Lstat(name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return st, &fs.PathError{Op: "stat", Path: d.join(name), Err: err}
	}
	return st, nil
}

// Tighten sets the mode of the directory name in d to mode if it is a
// directory owned by owner (opened without following a link, changed on
// its descriptor), and returns its mode before.
func (d *Dir) Tighten(name string, owner, mode uint32) (uint32, error) {
	fd, err := openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &fs.PathError{Op: "open", Path: d.join(name), Err: openErr(err)}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	if st.Uid != owner {
		return 0, &fs.PathError{Op: "chmod", Path: d.join(name), Err: fmt.Errorf("%w: it belongs to %s", ErrWrongOwner, UserName(st.Uid))}
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return 0, &fs.PathError{Op: "chmod", Path: d.join(name), Err: err}
	}
	return st.Mode & 0o7777, fsync(fd)
}

// OpenFile opens the existing file name in d, for reading and writing when
// write is set, without following a link or blocking, and checks on the
// descriptor that it is a regular file with one name (any owner: the
// caller judges the owner from the returned status).
func (d *Dir) OpenFile(name string, write bool) (*os.File, unix.Stat_t, error) {
	flags := unix.O_RDONLY
	if write {
		flags = unix.O_RDWR
	}
	fd, err := openat(d.fd, name, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, unix.Stat_t{}, &fs.PathError{Op: "open", Path: d.join(name), Err: openErr(err)}
	}
	st, err := CheckRegular(fd)
	if err != nil {
		unix.Close(fd)
		return nil, st, &fs.PathError{Op: "open", Path: d.join(name), Err: err}
	}
	return os.NewFile(uintptr(fd), d.join(name)), st, nil
}

// CreateOwned is Create giving the new file the owner uid and group gid
// first (-1 keeps the creator's); an owner or group the creator cannot
// give is an error, and nothing is created.
func (d *Dir) CreateOwned(name string, b []byte, mode uint32, uid, gid int) error {
	tmp, err := d.writeTemp(name, b, mode)
	if err != nil {
		return err
	}
	if uid >= 0 || gid >= 0 {
		// chown may clear set-id bits but never the permission bits.
		if err := unix.Fchownat(d.fd, tmp, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			_ = unix.Unlinkat(d.fd, tmp, 0)
			return tempError(d.join(name), &fs.PathError{Op: "chown", Path: d.join(tmp), Err: err})
		}
	}
	err = d.check("link", tmp, name)
	if err == nil {
		err = linkNoReplace(d.fd, tmp, d.fd, name)
		if errors.Is(err, unix.EEXIST) {
			err = fs.ErrExist
		} else if err != nil {
			err = &fs.PathError{Op: "link", Path: d.join(name), Err: err}
		}
	}
	_ = unix.Unlinkat(d.fd, tmp, 0)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if serr := d.Sync(); serr != nil {
		return fmt.Errorf("sync directory %s: %w", d.path, serr)
	}
	return err
}

// FS returns the seam the Dir's operations go through.
func (d *Dir) FS() FS { return d.fs }

// Fd returns the directory's descriptor, for *at calls the layer has no
// method for; it stays the Dir's.
func (d *Dir) Fd() int { return d.fd }
