package counterfile

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
	"unsafe"

	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/internal/statefile"
	"golang.org/x/sys/unix"
)

// File is one open counter file. Every operation takes the exclusive flock
// on the counter file itself, so it is safe against other processes, Snap!
// servers included (and against other Files in this process: flock locks
// belong to open file descriptions). It is not safe for concurrent use by
// goroutines: its user serialises calls with its own mutex, because a
// flock already held by a descriptor is granted again to the same
// descriptor.
//
// The lock is taken on the descriptor held open since Open, and after each
// lock the path is checked to still name that file: a counter removed or
// replaced (by rename) under a running program is reported as
// errs.ErrReplaced rather than written to a file that other processes no
// longer lock. (gofrs/flock, used for the lock files beside the counter,
// re-opens the path with a new descriptor for every lock and closes it at
// unlock; for the counter, on the hot path, one flock on the held
// descriptor and one stat of the path do the same job in a third of the
// time.)
type File struct {
	path   string
	cpath  *byte // path as a C string, for the identity check
	f      *os.File
	fd     int
	dev    uint64 // identity of f, for the replacement check
	ino    uint64
	follow bool
	sync   bool
	io     IO
	buf    [Size + 1]byte // reads: one byte more than a counter holds
	wbuf   [Size]byte     // writes
	broken error          // set when a torn write could not be repaired
	high   uint64         // the highest value read or written: the counter must not go below it
	// durable is the highest value this process wrote and synced: the
	// counter is known to have reached it (the host's record's floor);
	// a value read may be another writer's whose sync failed.
	durable uint64
}

// Options are how a File is opened.
type Options struct {
	// Follow lets the path be a symbolic link (checked by
	// statefile.CheckLink); otherwise a link there is refused.
	Follow bool
	// InitDir skips the check of the directories above the counter
	// (statefile.CheckDirOwner): Init makes a counter in a directory root
	// gives to a service, and checks the directories its own way.
	InitDir bool
	// Sync makes Store wait for fdatasync.
	Sync bool
	// IO is the file's I/O; nil is OSIO.
	IO IO
}

// OpenFlags are the flags for every open of an existing state file.
func OpenFlags(follow bool) int {
	// O_NONBLOCK: opening a FIFO planted at the path must fail the
	// regular-file check, not wait for a writer. It changes nothing for
	// regular files.
	fl := os.O_RDWR | syscall.O_CLOEXEC | syscall.O_NONBLOCK
	if !follow {
		fl |= syscall.O_NOFOLLOW
	}
	return fl
}

// Open opens an existing counter file without reading it.
func Open(path string, o Options) (*File, error) {
	return openMode(path, o, OpenFlags(o.Follow))
}

// OpenReadOnly opens an existing counter file for reading only (flock
// works on a read-only descriptor), so that a user who may read the
// counter but not write it can still see it.
func OpenReadOnly(path string, o Options) (*File, error) {
	return openMode(path, o, OpenFlags(o.Follow)&^os.O_RDWR|os.O_RDONLY)
}

func openMode(path string, o Options, flags int) (*File, error) {
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		return nil, &errs.FileError{Op: "open", Path: path, Err: errs.OpenError(err)}
	}
	// The type is checked on the opened descriptor: a FIFO or device
	// planted at the path is refused before anything reads or locks it.
	st, err := statefile.CheckRegular(int(f.Fd()))
	if err == nil {
		// The owner too: a counter another user can rewrite could be set
		// back and hand out ids again.
		err = statefile.CheckOwner(path, st)
	}
	if err == nil && !o.InitDir {
		err = statefile.CheckDirOwner(path)
	}
	if err == nil && o.Follow {
		err = statefile.CheckLink(path)
	}
	if err != nil {
		f.Close()
		return nil, &errs.FileError{Op: "open", Path: path, Err: errs.OpenError(err)}
	}
	cpath, err := unix.BytePtrFromString(path)
	if err != nil {
		f.Close()
		return nil, &errs.FileError{Op: "open", Path: path, Err: err}
	}
	fio := o.IO
	if fio == nil {
		fio = OSIO{}
	}
	return &File{
		path:   path,
		cpath:  cpath,
		f:      f,
		fd:     int(f.Fd()),
		dev:    uint64(st.Dev),
		ino:    st.Ino,
		follow: o.Follow,
		sync:   o.Sync,
		io:     fio,
	}, nil
}

// Path is the path the File was opened at.
func (c *File) Path() string { return c.path }

// Fd is the File's descriptor.
func (c *File) Fd() int { return c.fd }

// Dev and Ino are the identity of the open file: its device and inode.
func (c *File) Dev() uint64 { return c.dev }

// Ino is the open file's inode number (see Dev).
func (c *File) Ino() uint64 { return c.ino }

// Synced reports whether Store waits for fdatasync.
func (c *File) Synced() bool { return c.sync }

// High is the highest value this File read or wrote: the counter must not
// go below it.
func (c *File) High() uint64 { return c.high }

// Durable is the highest value this File wrote and synced.
func (c *File) Durable() uint64 { return c.durable }

// LockUnless takes the exclusive flock and checks that the path still
// names the locked file; on success the caller must call Unlock. An
// uncontended lock costs one flock call. While another process (any
// user who can read the counter) holds the lock, it polls, backing off
// from 20µs to 200µs, and gives up with stop's error as soon as stop
// returns one (every caller left, the Generator closed): no update waits
// in the kernel where nothing can end the wait.
func (c *File) LockUnless(stop func() error) error {
	if c.broken != nil {
		return c.broken
	}
	wait := 20 * time.Microsecond
	for {
		err := unix.Flock(c.fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			return &errs.FileError{Op: "lock", Path: c.path, Err: err}
		}
		if err := stop(); err != nil {
			return err
		}
		// A real pause, not the Generator's clock: it paces polls of a
		// lock held for microseconds and decides nothing; stop ends the
		// wait.
		time.Sleep(wait)
		// At most 200µs: another snapid process holds the lock for
		// microseconds (or an fdatasync), and a waiter sleeping longer
		// keeps losing it to processes that come back at once.
		wait = min(2*wait, 200*time.Microsecond)
	}
	if err := c.CheckIdentity(); err != nil {
		c.Unlock()
		return &errs.FileError{Op: "lock", Path: c.path, Err: err}
	}
	return nil
}

// LockContext is the lock waiting no longer than ctx allows: past it, the
// error is errs.ErrLocked naming the holder. A ctx that is never done
// waits in the kernel.
func (c *File) LockContext(ctx context.Context) error {
	if c.broken != nil {
		return c.broken
	}
	if ctx.Done() == nil {
		if err := IgnoringEINTR(func() error { return unix.Flock(c.fd, unix.LOCK_EX) }); err != nil {
			return &errs.FileError{Op: "lock", Path: c.path, Err: err}
		}
	} else if err := statefile.Lock(ctx, c.fd, c.path); err != nil {
		return &errs.FileError{Op: "lock", Path: c.path, Err: errs.LockError(err)}
	}
	if err := c.CheckIdentity(); err != nil {
		c.Unlock()
		return &errs.FileError{Op: "lock", Path: c.path, Err: err}
	}
	return nil
}

// TryWithLock runs fn under the lock if it can be had at once; otherwise
// it returns the flock's error (EWOULDBLOCK).
func (c *File) TryWithLock(fn func() error) error {
	if c.broken != nil {
		return c.broken
	}
	if err := unix.Flock(c.fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return err
	}
	defer c.Unlock()
	if err := c.CheckIdentity(); err != nil {
		return err
	}
	return fn()
}

// CheckIdentity checks that the path still names the open file. It asks
// statx for the inode number alone (the device comes with every answer):
// asking for timestamps, as stat does, costs more than the rest of the check,
// and on kernels with fine-grained timestamps makes every later write record
// a new modification time that fdatasync then carries. The path is converted
// once, at open, so the check allocates nothing.
func (c *File) CheckIdentity() error {
	flags := unix.AT_SYMLINK_NOFOLLOW | unix.AT_STATX_DONT_SYNC
	if c.follow {
		flags = unix.AT_STATX_DONT_SYNC
	}
	var stx unix.Statx_t
	dirfd := unix.AT_FDCWD
	_, _, errno := unix.Syscall6(unix.SYS_STATX, uintptr(dirfd), uintptr(unsafe.Pointer(c.cpath)),
		uintptr(flags), uintptr(unix.STATX_INO), uintptr(unsafe.Pointer(&stx)), 0)
	switch {
	case errno != 0:
		return fmt.Errorf("%w: %w", errs.ErrReplaced, errno)
	case unix.Mkdev(stx.Dev_major, stx.Dev_minor) != c.dev || stx.Ino != c.ino:
		return errs.ErrReplaced
	}
	return nil
}

// Unlock releases the lock.
func (c *File) Unlock() {
	// Unlocking a held flock on an open descriptor cannot fail short of
	// a bad descriptor; closing the descriptor would release it anyway.
	_ = IgnoringEINTR(func() error { return unix.Flock(c.fd, unix.LOCK_UN) })
}

// WithLock runs fn while holding the lock.
func (c *File) WithLock(fn func() error) error {
	return c.WithLockContext(context.Background(), fn)
}

// WithLockContext is WithLock waiting for the lock no longer than ctx
// allows (see LockContext).
func (c *File) WithLockContext(ctx context.Context, fn func() error) error {
	if err := c.LockContext(ctx); err != nil {
		return err
	}
	defer c.Unlock()
	return fn()
}

// Load reads and decodes the counter; the caller holds the lock. Reading
// one byte more than a counter file holds detects a long file in the same
// system call.
func (c *File) Load() (uint64, error) {
	n, err := c.io.ReadAt(c.f, c.buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, &errs.FileError{Op: "read", Path: c.path, Err: err}
	}
	if n == len(c.buf) {
		size := "more than 8"
		if st, err := c.f.Stat(); err == nil {
			size = fmt.Sprint(st.Size())
		}
		return 0, &errs.FileError{Op: "read", Path: c.path, Err: fmt.Errorf(
			"%w: it is %s bytes, a counter file is exactly %d", errs.ErrCorrupt, size, Size)}
	}
	v, err := Decode(c.buf[:n])
	if err != nil {
		return 0, &errs.FileError{Op: "read", Path: c.path, Err: err}
	}
	if v > c.high {
		c.high = v
	}
	return v, nil
}

// Store writes v in place at offset 0 and, when sync is on, waits for
// fdatasync; the caller holds the lock.
func (c *File) Store(v uint64) error {
	return c.StoreSynced(v, c.sync)
}

// StoreSynced is Store, waiting for fdatasync when sync says so. Only a
// sync that follows this process's own write counts as durable (see
// Durable): after a sync of another's write failed, its pages are clean,
// and a sync alone reports success without writing them.
func (c *File) StoreSynced(v uint64, sync bool) error {
	b := c.wbuf[:] // a field, so that passing it through IO allocates nothing
	binary.LittleEndian.PutUint64(b, v)
	if n, err := c.io.WriteAt(c.f, b, 0); err != nil || n != Size {
		if err == nil {
			err = io.ErrShortWrite
		}
		if n > 0 && n < Size {
			// A torn write leaves some bytes of v and some of the old
			// value, which may read lower than both. Write all of v again
			// (its numbers are not handed out; they are only skipped); if
			// that fails too, refuse every later update of this file.
			if n2, err2 := c.io.WriteAt(c.f, b, 0); err2 != nil || n2 != Size {
				// The torn value may read lower than numbers handed
				// out: the file is made one byte too long, so that no
				// process reads it as a counter until it is repaired.
				_ = c.f.Truncate(Size + 1)
				c.broken = &errs.FileError{Op: "write", Path: c.path, Err: fmt.Errorf(
					"%w: a torn write could not be repaired (%d of 8 bytes written), and the file was made one byte too long so that no program reads it; "+
						"check it and repair it (snapctl repair) before using it again", errs.ErrCorrupt, n2)}
			}
		}
		return &errs.FileError{Op: "write", Path: c.path, Err: err}
	}
	if sync {
		if err := c.io.Sync(c.f); err != nil {
			return &errs.FileError{Op: "sync", Path: c.path, Err: err}
		}
		c.durable = max(c.durable, v)
	}
	c.high = max(c.high, v)
	return nil
}

// SyncWritten syncs the write of v this File just made (Store with sync
// off) and counts v durable; the caller holds the lock.
func (c *File) SyncWritten(v uint64) error {
	if err := c.io.Sync(c.f); err != nil {
		return &errs.FileError{Op: "sync", Path: c.path, Err: err}
	}
	c.durable = max(c.durable, v)
	return nil
}

// Rewrite writes v over whatever the file holds, cuts it to 8 bytes and
// syncs it, whatever Sync says; the caller holds the lock. It returns up to
// 64 bytes of what the file held before. The value is written before the
// file is cut: a crash in between leaves a file that is still too long,
// and so still refused, never a short or zeroed one that reads as a low
// value.
func (c *File) Rewrite(v uint64) (previous []byte, err error) {
	prev := make([]byte, 64)
	n, err := c.io.ReadAt(c.f, prev, 0)
	if err != nil && err != io.EOF {
		return nil, &errs.FileError{Op: "repair", Path: c.path, Err: err}
	}
	b := Encode(v)
	if n, err := c.io.WriteAt(c.f, b[:], 0); err != nil || n != Size {
		if err == nil {
			err = io.ErrShortWrite
		}
		return nil, &errs.FileError{Op: "repair", Path: c.path, Err: err}
	}
	if err := c.f.Truncate(Size); err != nil {
		return nil, &errs.FileError{Op: "repair", Path: c.path, Err: err}
	}
	if err := c.io.Sync(c.f); err != nil {
		return nil, &errs.FileError{Op: "repair", Path: c.path, Err: err}
	}
	return prev[:n], nil
}

// ReadContext reads the counter under the lock, waiting for it no longer
// than ctx allows.
func (c *File) ReadContext(ctx context.Context) (v uint64, err error) {
	err = c.WithLockContext(ctx, func() error {
		v, err = c.Load()
		return err
	})
	return v, err
}

// ReadAt, WriteAt and Sync are the File's I/O for a caller keeping a
// record of its own in the file (a sequence's lease file): the caller
// holds the lock, and Load, Store and Durable know nothing of what they do.
func (c *File) ReadAt(b []byte, off int64) (int, error) { return c.io.ReadAt(c.f, b, off) }

// WriteAt writes b at off (see ReadAt).
func (c *File) WriteAt(b []byte, off int64) (int, error) { return c.io.WriteAt(c.f, b, off) }

// Sync syncs the file's data (see ReadAt); it counts nothing durable.
func (c *File) Sync() error { return c.io.Sync(c.f) }

// Stat is the open file's fstat.
func (c *File) Stat() (os.FileInfo, error) { return c.f.Stat() }

// Options are the options the File was opened with.
func (c *File) Options() Options { return Options{Follow: c.follow, Sync: c.sync, IO: c.io} }

// Close closes the descriptor, releasing the lock if held.
func (c *File) Close() error {
	return c.f.Close()
}
