package powerfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// created records a new file or directory (not durable until synced).
func (f *FS) created(ino uint64, dir bool, mode uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o := &object{dir: dir, mode: mode & 0o7777}
	if dir {
		o.entries = map[string]*object{}
	}
	f.byIno[ino] = o
}

// object returns the object of a backing inode; the caller holds mu.
func (f *FS) object(ino uint64, dir bool) *object {
	o, ok := f.byIno[ino]
	if !ok {
		// Not seen created: it cannot have been synced.
		o = &object{dir: dir, mode: 0o600}
		if dir {
			o.entries = map[string]*object{}
		}
		f.byIno[ino] = o
	}
	return o
}

// syncFile makes the content of the file open as fd durable. Syncs are
// serialised (under mu, content read included), so that a sync that
// returns has recorded content at least as new as any sync before it.
func (f *FS) syncFile(ino uint64, fd int, withMode bool) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return gofs.ToErrno(err)
	}
	b := make([]byte, st.Size)
	n, err := syscall.Pread(fd, b, 0)
	if errors.Is(err, syscall.EBADF) {
		// Opened write-only: read the same file through a new descriptor
		// (this works for a file without a name too).
		var r *os.File
		if r, err = os.Open(fmt.Sprintf("/proc/self/fd/%d", fd)); err == nil {
			n, err = r.ReadAt(b, 0)
			if errors.Is(err, io.EOF) {
				err = nil
			}
			r.Close()
		}
	}
	if err != nil {
		return gofs.ToErrno(err)
	}
	o := f.object(ino, false)
	o.content, o.synced = b[:n], true
	if withMode {
		o.mode = st.Mode & 0o7777
	}
	return 0
}

// syncDir makes the entries of the directory at path durable.
func (f *FS) syncDir(path string) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return gofs.ToErrno(err)
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return gofs.ToErrno(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	o := f.object(st.Ino, true)
	m := make(map[string]*object, len(ents))
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			return gofs.ToErrno(err)
		}
		m[e.Name()] = f.object(info.Sys().(*syscall.Stat_t).Ino, info.IsDir())
	}
	o.entries = m
	return 0
}
