package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"time"
	"unsafe"

	"github.com/snapid/snapid/internal/statefile"
	"golang.org/x/sys/unix"
)

// CounterSize is the exact size of a counter file in bytes.
const CounterSize = 8

// MaxNumber is the largest number a counter can issue.
const MaxNumber = math.MaxUint64

// EncodeCounter returns the on-disk form of a counter whose last issued
// number is v: 8 bytes, unsigned little-endian (the bytes of Snap!'s
// counter.u64 on x86).
func EncodeCounter(v uint64) [CounterSize]byte {
	var b [CounterSize]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return b
}

// DecodeCounter decodes the content of a counter file. Anything but exactly
// 8 bytes is an error wrapping ErrCorrupt; in particular an empty or short
// file is never read as 0.
func DecodeCounter(b []byte) (uint64, error) {
	if len(b) != CounterSize {
		return 0, fmt.Errorf("%w: it is %d bytes, a counter file is exactly %d", ErrCorrupt, len(b), CounterSize)
	}
	return binary.LittleEndian.Uint64(b), nil
}

// counterFile is one open counter file. Every operation takes the
// exclusive flock on the counter file itself, so it is safe against other
// processes, Snap! servers included (and against other counterFiles in this
// process: flock locks belong to open file descriptions). It is not safe
// for concurrent use by goroutines: the Generator serialises calls with its
// own mutex, because a flock already held by a descriptor is granted again
// to the same descriptor.
//
// The lock is taken on the descriptor held open since Open, and after each
// lock the path is checked to still name that file: a counter removed or
// replaced (by rename) under a running program is reported as ErrReplaced
// rather than written to a file that other processes no longer lock.
// (gofrs/flock, used for the lock files beside the counter, re-opens the
// path with a new descriptor for every lock and closes it at unlock; for
// the counter, on the hot path, one flock on the held descriptor and one
// stat of the path do the same job in a third of the time.)
type counterFile struct {
	path   string
	cpath  *byte // path as a C string, for the identity check
	f      *os.File
	fd     int
	dev    uint64 // identity of f, for the replacement check
	ino    uint64
	follow bool
	sync   bool
	io     fileIO
	buf    [CounterSize + 1]byte // reads: one byte more than a counter holds
	wbuf   [CounterSize]byte     // writes
	broken error                 // set when a torn write could not be repaired
	high   uint64                // the highest value read or written: the counter must not go below it
	// durable is the highest value this process wrote and synced: the
	// counter is known to have reached it (the host's record's floor);
	// a value read may be another writer's whose sync failed.
	durable uint64
	log     *slog.Logger
	// form, when not nil, bounds every update: numbers past its limit
	// are refused before anything is taken (see advance). Set at Open,
	// then read-only.
	form *idForm
	// host is the host's record of the name: its mark must cover every
	// value a Generator's update stores (see hostRecord.cover). Set at
	// Open, before any update; nil on a counter opened to be read or
	// initialised, which advance is never called on.
	host *hostRecord
}

// openFlags are the flags for every open of an existing counter file.
func openFlags(follow bool) int {
	// O_NONBLOCK: opening a FIFO planted at the path must fail the
	// regular-file check, not wait for a writer. It changes nothing for
	// regular files.
	fl := os.O_RDWR | syscall.O_CLOEXEC | syscall.O_NONBLOCK
	if !follow {
		fl |= syscall.O_NOFOLLOW
	}
	return fl
}

// openCounter opens the counter file at path, creating it atomically with
// value 0 when it does not exist, and checks under the lock that it is a
// valid counter file. Nothing on disk is changed when it fails.
//
// Another user who can read the counter can flock it: the first lock
// waits at most as long as ctx allows (ErrLocked, naming the holder).
func openCounter(ctx context.Context, path string, o *options) (*counterFile, error) {
	if err := createIfMissing(path, 0, o); err != nil {
		return nil, err
	}
	c, err := openExisting(path, o)
	if err != nil {
		return nil, err
	}
	if err := statefile.Lock(ctx, c.fd, path); err != nil {
		c.close()
		return nil, &FileError{Op: "lock", Path: path, Err: lockError(err)}
	}
	err = c.checkIdentity()
	if err != nil {
		err = &FileError{Op: "lock", Path: path, Err: err}
	} else {
		_, err = c.load()
	}
	c.unlock()
	if err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// openExisting opens an existing counter file without reading it.
func openExisting(path string, o *options) (*counterFile, error) {
	return openExistingMode(path, o, openFlags(o.followSymlinks))
}

// openReadOnly opens an existing counter file for reading only (flock
// works on a read-only descriptor), so that a user who may read the
// counter but not write it can still see it.
func openReadOnly(path string, o *options) (*counterFile, error) {
	return openExistingMode(path, o, openFlags(o.followSymlinks)&^os.O_RDWR|os.O_RDONLY)
}

func openExistingMode(path string, o *options, flags int) (*counterFile, error) {
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		return nil, &FileError{Op: "open", Path: path, Err: classifyOpenError(err)}
	}
	// The type is checked on the opened descriptor: a FIFO or device
	// planted at the path is refused before anything reads or locks it.
	st, err := statefile.CheckRegular(int(f.Fd()))
	if err == nil {
		// The owner too: a counter another user can rewrite could be set
		// back and hand out ids again.
		err = statefile.CheckOwner(path, st)
	}
	if err == nil && !o.initDir {
		err = statefile.CheckDirOwner(path)
	}
	if err == nil && o.followSymlinks {
		err = statefile.CheckLink(path)
	}
	if err != nil {
		f.Close()
		return nil, &FileError{Op: "open", Path: path, Err: classifyOpenError(err)}
	}
	cpath, err := unix.BytePtrFromString(path)
	if err != nil {
		f.Close()
		return nil, &FileError{Op: "open", Path: path, Err: err}
	}
	return &counterFile{
		path:   path,
		cpath:  cpath,
		f:      f,
		fd:     int(f.Fd()),
		dev:    uint64(st.Dev),
		ino:    st.Ino,
		follow: o.followSymlinks,
		sync:   o.sync,
		io:     o.io,
		log:    o.logger,
	}, nil
}

// classifyOpenError turns the errno of an open into this package's errors.
func classifyOpenError(err error) error {
	switch {
	case errors.Is(err, statefile.ErrWrongOwner), errors.Is(err, statefile.ErrLinked):
		return fmt.Errorf("%w: %w", ErrUntrustedOwner, err)
	case errors.Is(err, statefile.ErrUnsafeDir):
		return fmt.Errorf("%w: %w", ErrUntrustedDir, err)
	case errors.Is(err, statefile.ErrSymlink):
		return fmt.Errorf("%w: %w", ErrSymlink, err)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%w: %w", ErrSymlink, err)
	case errors.Is(err, statefile.ErrNotRegular), errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("%w: %w", ErrNotRegular, err)
	}
	return err
}

// createIfMissing creates the counter file holding value v if nothing is at
// path. The file appears complete or not at all: a temporary file in the
// same directory is written and synced, then linked into place (link fails
// if another process created the counter first, and that process's file is
// kept), then the directory is synced. An existing file is never replaced,
// so a lock held on it stays valid.
func createIfMissing(path string, v uint64, o *options) error {
	// Nothing is made in a directory another user owns (but by Init, to
	// give a service its counter), or below one.
	if err := checkCounterPath(path, o); err != nil {
		return &FileError{Op: "create", Path: path, Err: err}
	}
	b := EncodeCounter(v)
	err := createIfAbsent(path, b[:], o)
	if errors.Is(err, fs.ErrNotExist) {
		// Name the missing directory, not the temporary file that could
		// not be made in it.
		if dir := filepath.Dir(path); !dirExists(dir) {
			return &FileError{Op: "create", Path: path, Err: missingDirError(dir)}
		}
	}
	return err
}

// missingDirError is the error for a counter whose directory dir does not
// exist: it says what to do (nothing makes the directory: its owner and
// mode are the caller's choice).
func missingDirError(dir string) error {
	return fmt.Errorf("the directory %s does not exist: %w; create it first, owned by the user the programs "+
		"using the counter run as (e.g. install -d -m 0700 %s)", dir, fs.ErrNotExist, dir)
}

// checkCounterPath checks the directories leading to the counter at path
// (statefile.CheckDirOwner; CheckDirsForInit for Init) and, if links are
// followed, the link there (statefile.CheckLink).
func checkCounterPath(path string, o *options) error {
	check := statefile.CheckDirOwner
	if o.initDir {
		check = statefile.CheckDirsForInit
	}
	err := check(path)
	if err == nil && o.followSymlinks {
		err = statefile.CheckLink(path)
	}
	if err != nil {
		return classifyOpenError(err)
	}
	return nil
}

func dirExists(dir string) bool {
	st, err := os.Stat(dir)
	return err == nil && st.IsDir()
}

// splitPath returns the directory (never empty) and base name of path.
func splitPath(path string) (dir, base string) { return statefile.SplitPath(path) }

// lockUnless takes the exclusive flock and checks that the path still
// names the locked file; on success the caller must call unlock. An
// uncontended lock costs one flock call. While another process (any
// user who can read the counter) holds the lock, it polls, backing off
// from 20µs to 200µs, and gives up with stop's error as soon as stop
// returns one (every caller left, the Generator closed): no update waits
// in the kernel where nothing can end the wait.
func (c *counterFile) lockUnless(stop func() error) error {
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
			return &FileError{Op: "lock", Path: c.path, Err: err}
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
	if err := c.checkIdentity(); err != nil {
		c.unlock()
		return &FileError{Op: "lock", Path: c.path, Err: err}
	}
	return nil
}

// lockContext is lock waiting no longer than ctx allows: past it, the
// error is ErrLocked naming the holder. A ctx that is never done waits
// in the kernel, as lock does.
func (c *counterFile) lockContext(ctx context.Context) error {
	if c.broken != nil {
		return c.broken
	}
	if ctx.Done() == nil {
		if err := ignoringEINTR(func() error { return unix.Flock(c.fd, unix.LOCK_EX) }); err != nil {
			return &FileError{Op: "lock", Path: c.path, Err: err}
		}
	} else if err := statefile.Lock(ctx, c.fd, c.path); err != nil {
		return &FileError{Op: "lock", Path: c.path, Err: lockError(err)}
	}
	if err := c.checkIdentity(); err != nil {
		c.unlock()
		return &FileError{Op: "lock", Path: c.path, Err: err}
	}
	return nil
}

// checkIdentity checks that the path still names the open file. It asks
// statx for the inode number alone (the device comes with every answer):
// asking for timestamps, as stat does, costs more than the rest of the check,
// and on kernels with fine-grained timestamps makes every later write record
// a new modification time that fdatasync then carries. The path is converted
// once, at open, so the check allocates nothing.
func (c *counterFile) checkIdentity() error {
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
		return fmt.Errorf("%w: %w", ErrReplaced, errno)
	case unix.Mkdev(stx.Dev_major, stx.Dev_minor) != c.dev || stx.Ino != c.ino:
		return ErrReplaced
	}
	return nil
}

func (c *counterFile) unlock() {
	// Unlocking a held flock on an open descriptor cannot fail short of
	// a bad descriptor; closing the descriptor would release it anyway.
	_ = ignoringEINTR(func() error { return unix.Flock(c.fd, unix.LOCK_UN) })
}

func ignoringEINTR(fn func() error) error {
	for {
		if err := fn(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// withLock runs fn while holding the lock.
func (c *counterFile) withLock(fn func() error) error {
	return c.withLockContext(context.Background(), fn)
}

// withLockContext is withLock waiting for the lock no longer than ctx
// allows (see lockContext).
func (c *counterFile) withLockContext(ctx context.Context, fn func() error) error {
	if err := c.lockContext(ctx); err != nil {
		return err
	}
	defer c.unlock()
	return fn()
}

// load reads and decodes the counter; the caller holds the lock. Reading
// one byte more than a counter file holds detects a long file in the same
// system call.
func (c *counterFile) load() (uint64, error) {
	n, err := c.io.ReadAt(c.f, c.buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, &FileError{Op: "read", Path: c.path, Err: err}
	}
	if n == len(c.buf) {
		size := "more than 8"
		if st, err := c.f.Stat(); err == nil {
			size = fmt.Sprint(st.Size())
		}
		return 0, &FileError{Op: "read", Path: c.path, Err: fmt.Errorf(
			"%w: it is %s bytes, a counter file is exactly %d", ErrCorrupt, size, CounterSize)}
	}
	v, err := DecodeCounter(c.buf[:n])
	if err != nil {
		return 0, &FileError{Op: "read", Path: c.path, Err: err}
	}
	if v > c.high {
		c.high = v
	}
	return v, nil
}

// store writes v in place at offset 0 and, when sync is on, waits for
// fdatasync; the caller holds the lock.
func (c *counterFile) store(v uint64) error {
	return c.storeSynced(v, c.sync)
}

// storeSynced is store, waiting for fdatasync when sync says so. Only a
// sync that follows this process's own write counts as durable (see
// durable): after a sync of another's write failed, its pages are clean,
// and a sync alone reports success without writing them.
func (c *counterFile) storeSynced(v uint64, sync bool) error {
	b := c.wbuf[:] // a field, so that passing it through fileIO allocates nothing
	binary.LittleEndian.PutUint64(b, v)
	if n, err := c.io.WriteAt(c.f, b, 0); err != nil || n != CounterSize {
		if err == nil {
			err = io.ErrShortWrite
		}
		if n > 0 && n < CounterSize {
			// A torn write leaves some bytes of v and some of the old
			// value, which may read lower than both. Write all of v again
			// (its numbers are not handed out; they are only skipped); if
			// that fails too, refuse every later update of this file.
			if n2, err2 := c.io.WriteAt(c.f, b, 0); err2 != nil || n2 != CounterSize {
				c.broken = &FileError{Op: "write", Path: c.path, Err: fmt.Errorf(
					"%w: a torn write could not be repaired (%d of 8 bytes written); check the file before using it again", ErrCorrupt, n2)}
			}
		}
		return &FileError{Op: "write", Path: c.path, Err: err}
	}
	if sync {
		if err := c.io.Sync(c.f); err != nil {
			return &FileError{Op: "sync", Path: c.path, Err: err}
		}
		c.durable = max(c.durable, v)
	}
	c.high = max(c.high, v)
	return nil
}

// readContext is read waiting for the lock no longer than ctx allows.
func (c *counterFile) readContext(ctx context.Context) (v uint64, err error) {
	err = c.withLockContext(ctx, func() error {
		v, err = c.load()
		return err
	})
	return v, err
}

// advance reserves k numbers (k >= 1) and returns the first of them. The
// numbers are only returned after the new value is written (and synced,
// when sync is on); on any error nothing is reserved. With decimal, k is
// a count of ids of the decimal form: the update takes as many numbers as
// hold k that do not end in 0 (see decimalSpan). Numbers past the form's
// bound (c.form) are refused as ErrExhausted, and nothing is taken: a
// request that does not fit whole takes nothing.
//
// hook, when not nil, decides where to count from (see advanceHook).
// Without it, a counter found below a value this counterFile read or wrote
// before (restored from a backup or copied over while in use) is raised
// back above it: every number this process knows to be issued is at or
// below that value. The update that raises it is the one that issues the
// next numbers, so the raise is synced before any of them is returned.
func (c *counterFile) advance(k uint64, decimal bool, hook advanceHook, gone, closed func() bool) (first uint64, err error) {
	stop := func() error {
		if gone != nil && gone() {
			return errCallersLeft // its callers left while the lock was held elsewhere
		}
		if closed != nil && closed() {
			return ErrClosed
		}
		return nil
	}
	if err := c.lockUnless(stop); err != nil {
		return 0, err
	}
	defer c.unlock()
	if err := stop(); err != nil {
		return 0, err
	}
	cur, err := c.load()
	if err != nil {
		return 0, err
	}
	// How far it is known to have gone: what this process saw, and the
	// host's record (see hostRecord.check).
	high := c.high
	if c.host != nil {
		up, err := c.host.check(cur)
		if err != nil {
			return 0, err
		}
		high = max(high, up)
	}
	if err := c.fits(cur, k, decimal); err != nil {
		return 0, err // before the registry is asked for room
	}
	base := cur
	switch {
	case hook != nil:
		// A decimal request's numbers are not known before base is: the
		// registry is asked for room for the most it can take.
		if base, err = hook.check(cur, spanBound(k, decimal), high); err != nil {
			return 0, err
		}
	case cur < high:
		base = high
		c.log.Error("snapid: the counter went backwards while in use (restored from a backup or copied over?); "+
			"raising it above the highest value this process read or wrote, and above the host's record of how far the name's programs went "+
			"when it went below the record's floor. A process that started since may have issued numbers again if it went back less than a step",
			"path", c.path, "counter", cur, "to", base)
	}
	if err := c.fits(base, k, decimal); err != nil {
		return 0, err
	}
	if decimal {
		k, _ = decimalSpan(base, k)
	}
	if !c.sync && cur > c.durable && c.host.due(base+k) {
		// Sync off: the counter is written again and synced once a step,
		// as the record is written, so that the record's floor moves
		// with it (a counter restored or zeroed below it is refused).
		if err := c.storeSynced(cur, true); err != nil {
			return 0, err
		}
	}
	if err := c.host.cover(c.durable, cur, base+k); err != nil {
		return 0, err
	}
	if err := c.store(base + k); err != nil {
		return 0, err
	}
	if k > c.host.step {
		// A jump of more than a step: the record's floor follows at
		// once, so that the counter is never more than about a step
		// above what a restore is judged against.
		if !c.sync {
			if err := c.io.Sync(c.f); err != nil { // of this process's own write, just made
				return 0, &FileError{Op: "sync", Path: c.path, Err: err}
			}
			c.durable = max(c.durable, base+k)
		}
		if err := c.host.raiseFloor(c.durable); err != nil {
			return 0, err
		}
	}
	if hook != nil {
		hook.committed(base + k)
	}
	return base + 1, nil
}

// advanceHook lets the registry take part in a counter update, under the
// counter's lock.
type advanceHook interface {
	// check sees the current value before anything is written and returns
	// the value to count from: cur, or a higher value to skip to (after a
	// roll-back), or an error to refuse. high is the highest value this
	// counterFile read or wrote before: cur below it was rolled back.
	check(cur, k, high uint64) (base uint64, err error)
	// committed is told the value written, once it is written (and synced).
	committed(v uint64)
}

func (c *counterFile) close() error {
	return c.f.Close()
}
