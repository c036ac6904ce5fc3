package hoststate

import (
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

// Sync makes the place's entries durable: a record found there may have
// been made by an Open whose own sync of the place failed.
func (p *Place) Sync() error { return p.dir.Sync() }
