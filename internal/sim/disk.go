package sim

import (
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/snapid/snapid/internal/statefile"
	"golang.org/x/sys/unix"
)

// disk is one simulated host's storage: the real files in a directory of
// their own (on tmpfs when there is one), and beside them what a power cut
// would leave. It is both seams of the library (the counter and lease
// files' I/O, and the file-system layer), so it sees every write, fsync,
// link, rename, removal and directory sync the library makes there.
//
// What survives a power cut is kept the way a journalling file system
// keeps it: a file's content is durable as of its last fsync (by inode),
// a directory's entries as of its last directory fsync (name to inode).
// In forget mode a cut puts every file and directory back to exactly
// that; in keep-some mode each file's content and each name independently
// either survives as it is now or goes back (the page cache flushed some
// of it, as it does). Directories themselves are never lost (the
// simulator makes them before the history starts, except the bindings
// directory, whose levels the library syncs into their parents).
//
// Faults are armed by the history: the n-th next write, fsync, directory
// sync, link or rename on this host fails (EIO or ENOSPC) without doing
// anything. A failed fsync makes nothing durable, and, as on Linux since
// the pages it failed to write are marked clean, a later fsync of the
// file reports success without making them durable either, until the
// file is written again (its modification time moves); the data stays
// visible until a cut.
type disk struct {
	root string

	mu      sync.Mutex
	content map[uint64][]byte            // inode → content as of its last fsync
	entries map[string]map[string]uint64 // directory → name → inode, as of its last directory sync
	fault   armed[error]                 // the next operation of a kind that fails (write, sync, syncdir, link, rename)
	lied    map[uint64]unix.Timespec     // inode → its modification time when an fsync of it failed
	lies    int                          // fsyncs that reported success with nothing written
	slow    atomic.Pointer[slowFlush]    // set during a burst: counter writes wait for callers to queue (groups.go)
	freeze  freezer                      // a power cut or kill at the k-th call (freeze.go)
	// hbFailed: a fault hit a write of the host's heartbeat record (its
	// processes may then not have been told what it would have said).
	hbFailed atomic.Bool
}

func newDisk(root string) *disk {
	return &disk{root: root, content: map[uint64][]byte{}, entries: map[string]map[string]uint64{}, lied: map[uint64]unix.Timespec{}}
}

// hit reports whether an operation of kind op fails now, and with what.
func (d *disk) hit(op string) error {
	err, _ := d.fault.hit(op)
	return err
}

// ReadAt, WriteAt and Sync are the counter and lease files' I/O.

func (d *disk) ReadAt(f *os.File, b []byte, off int64) (int, error) {
	n, err := unix.Pread(int(f.Fd()), b, off)
	if err == nil && n < len(b) {
		return n, io.EOF
	}
	return n, err
}

func (d *disk) WriteAt(f *os.File, b []byte, off int64) (int, error) {
	if err := d.hit("write"); err != nil {
		if strings.HasSuffix(f.Name(), ".heartbeat") {
			d.hbFailed.Store(true)
		}
		return 0, &fs.PathError{Op: "write", Path: f.Name(), Err: err}
	}
	d.pauseFlush(f)
	n, err := unix.Pwrite(int(f.Fd()), b, off)
	if n > 0 {
		// Written again: its pages are dirty, and the next fsync writes
		// them (a modification time, coarse as the clock's tick, may not
		// have moved).
		var st unix.Stat_t
		if unix.Fstat(int(f.Fd()), &st) == nil {
			d.mu.Lock()
			delete(d.lied, st.Ino)
			d.mu.Unlock()
		}
	}
	return n, err
}

func (d *disk) Sync(f *os.File) error { return d.sync(f) }

// sync is an fsync of f: it fails if a fault says so (and marks the
// file's pages clean), else records the file as durable as it is now.
func (d *disk) sync(f *os.File) error {
	if err := d.hit("sync"); err != nil {
		var st unix.Stat_t
		if unix.Fstat(int(f.Fd()), &st) == nil {
			d.mu.Lock()
			d.lied[st.Ino] = st.Mtim
			d.mu.Unlock()
		}
		return &fs.PathError{Op: "sync", Path: f.Name(), Err: err}
	}
	return d.keep(int(f.Fd()))
}

// keep records the file open at fd as durable as it is now, unless an
// fsync of it failed and it was not written since (its pages are clean:
// nothing is written, and the fsync reports success).
func (d *disk) keep(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	d.mu.Lock()
	if at, lied := d.lied[st.Ino]; lied && at == st.Mtim {
		d.lies++
		d.mu.Unlock()
		return nil
	}
	delete(d.lied, st.Ino)
	d.mu.Unlock()
	// Read through /proc: the descriptor may be write-only (a new
	// temporary file).
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.content[st.Ino] = b
	d.mu.Unlock()
	return nil
}

// SyncFile, Link, Rename, Remove and SyncDir are the file-system layer.

func (d *disk) SyncFile(f *os.File) error { return d.sync(f) }

func (d *disk) Link(oldname, newname string) error {
	if err := d.hit("link"); err != nil {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: err}
	}
	return os.Link(oldname, newname)
}

// LinkNoReplace names a new file as the real file system does
// (statefile.NoReplaceLinker): one rename that never replaces, so the
// file never has two names.
func (d *disk) LinkNoReplace(oldname, newname string) error {
	if err := d.hit("link"); err != nil {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: err}
	}
	if err := unix.Renameat2(unix.AT_FDCWD, oldname, unix.AT_FDCWD, newname, unix.RENAME_NOREPLACE); err != nil {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: err}
	}
	return nil
}

func (d *disk) Rename(oldname, newname string) error {
	if err := d.hit("rename"); err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	return os.Rename(oldname, newname)
}

func (d *disk) Remove(name string) error { return os.Remove(name) }

func (d *disk) SyncDir(dir string) error {
	if err := d.hit("syncdir"); err != nil {
		return &fs.PathError{Op: "sync", Path: dir, Err: err}
	}
	ents, err := listDir(filepath.Clean(dir))
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.entries[filepath.Clean(dir)] = ents
	d.mu.Unlock()
	return nil
}

// Check fails links and renames made under a statefile.Dir (bindings).
func (d *disk) Check(op, path, to string) error {
	switch op {
	case "link", "rename":
		if err := d.hit(op); err != nil {
			return &fs.PathError{Op: op, Path: path, Err: err}
		}
	}
	return nil
}

var _ statefile.FS = (*disk)(nil)
var _ statefile.NoReplaceLinker = (*disk)(nil)
var _ statefile.Checker = (*disk)(nil)

// listDir returns the names in dir and their inodes (a directory's with
// dirBit).
func listDir(dir string) (map[string]uint64, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	m := make(map[string]uint64, len(des))
	for _, de := range des {
		if ino, isDir, err := isDirEntry(dir, de.Name()); err == nil {
			if isDir {
				ino |= dirBit
			}
			m[de.Name()] = ino
		}
	}
	return m, nil
}

// settle records everything under the root as durable as it is now: the
// state after the simulator made the host, and after a cut (whatever
// survived is what the next boot finds, on disk).
func (d *disk) settle() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.content = map[uint64][]byte{}
	d.entries = map[string]map[string]uint64{}
	d.lied = map[uint64]unix.Timespec{}
	return walkTree(d.root, d.entries, d.content)
}

// walkTree reads every directory under root into entries (its names, by
// inode) and every file's content into content (by inode).
func walkTree(root string, entries map[string]map[string]uint64, content map[uint64][]byte) error {
	return filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil || !de.IsDir() {
			return err
		}
		ents, err := listDir(p)
		if err != nil {
			return err
		}
		entries[p] = ents
		for name, ino := range ents {
			if ino&dirBit != 0 {
				continue
			}
			b, err := os.ReadFile(filepath.Join(p, name))
			if err != nil {
				return err
			}
			content[ino] = b
		}
		return nil
	})
}

// powerCut puts the host's files back to what a power cut now leaves
// (cut.go); every process of the host must be gone already. keepSome:
// each name and each file's content may survive as it is now, go back,
// or (content) be torn, drawn from rng, instead of all going back.
func (d *disk) powerCut(rng *rand.Rand, keepSome bool) error {
	st, err := d.capture()
	if err != nil {
		return err
	}
	return d.applyCut(st, rng, keepSome)
}

// rewrite puts a file holding exactly b at p: in place, keeping its inode,
// as a power cut leaves a file that existed (the host's record of a name
// knows its counter by device and inode); a new file otherwise.
func rewrite(p string, b []byte) error {
	if st, err := os.Lstat(p); err == nil && st.Mode().IsRegular() {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return fmt.Errorf("power cut: %w", err)
		}
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("power cut: %w", err)
		}
		return nil
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		return fmt.Errorf("power cut: %w", err)
	}
	return nil
}
