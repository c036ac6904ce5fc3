package hoststate

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/snapid/snapid/internal/statefile"
	"golang.org/x/sys/unix"
)

// dirFd and chmodAt reach a directory's descriptor through statefile.
func dirFd(d *statefile.Dir) int { return d.Fd() }

func chmodAt(d *statefile.Dir, name string, mode uint32) error {
	return unix.Fchmodat(d.Fd(), name, mode, 0)
}

// Volatile reports whether the place is on a file system whose content
// does not outlive the mount (tmpfs, ramfs): records there are lost at a
// reboot or an unmount, and a place found empty on one may hide the
// host's real place under it.
func (p *Place) Volatile() (bool, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(dirFd(p.dir), &st); err != nil {
		return false, err
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC, nil
}

// Sync makes the place durable, its entries and its own entry in its
// parent: what is found there may have been made by an Open whose own
// sync failed.
func (p *Place) Sync() error {
	if err := p.dir.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", p.Path(), err)
	}
	// And the place's own entry: an Open whose sync of it failed may
	// have made it.
	fsys := p.dir.FS()
	if fsys == nil {
		fsys = statefile.OS{}
	}
	if parent := filepath.Dir(p.Path()); parent != p.Path() {
		if err := fsys.SyncDir(parent); err != nil {
			return fmt.Errorf("sync directory %s: %w", parent, err)
		}
	}
	return nil
}

// WriteLock takes the record's write lock, an open file description lock
// on its first byte (apart from the presence flock), and returns what
// lets it go: a read and the write that follows it are one step for every
// program of the host, also for two using two counter files under the
// name (a replacement taking it over, while the old file's programs run).
// A program holds it for one read and one write; WriteLock waits for it no
// longer than ctx allows (a process that can open the record could hold
// it for ever), and then returns an error wrapping ctx's cause.
func (h *Handle) WriteLock(ctx context.Context) (unlock func(), err error) {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 1}
	wait := 50 * time.Microsecond
	for {
		err = unix.FcntlFlock(h.f.Fd(), unix.F_OFD_SETLK, &lk)
		if err == unix.EINTR {
			continue
		}
		if err != unix.EAGAIN && err != unix.EACCES {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return func() {}, &fs.PathError{Op: "lock", Path: h.f.Name(), Err: fmt.Errorf(
				"another process holds the record's write lock (a program of the name holds it for one read and one write): %w", context.Cause(ctx))}
		case <-t.C:
		}
		wait = min(wait*2, 10*time.Millisecond)
	}
	if err != nil {
		return func() {}, &fs.PathError{Op: "lock", Path: h.f.Name(), Err: err}
	}
	return func() {
		un := unix.Flock_t{Type: unix.F_UNLCK, Whence: 0, Start: 0, Len: 1}
		_ = unix.FcntlFlock(h.f.Fd(), unix.F_OFD_SETLK, &un)
	}, nil
}
