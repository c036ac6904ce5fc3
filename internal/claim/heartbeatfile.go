package claim

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/snapid/snapid/internal/counterfile"
	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/internal/statefile"
	"golang.org/x/sys/unix"
)

// heartbeatLockWait bounds the wait for the record's byte lock, which a
// running process holds for one read and one write.
const heartbeatLockWait = 50 * time.Millisecond

// The heartbeat file beside the counter: its record (format in
// heartbeatloop.go's comment), how it is opened, read, written under its byte
// lock, and rejoined when it is replaced.

// openHeartbeat opens the heartbeat file beside the counter at
// counterPath, checked like the mark file; if it is absent, it creates it
// when create is set, and returns nil otherwise. Open creates it only once
// the name's claim or join stands, so that an Open refused before (a
// counter of another name) leaves nothing behind.
func openHeartbeat(counterPath string, o FileOptions, create bool) (*os.File, error) {
	path := counterPath + HeartbeatSuffix
	if create {
		if err := counterfile.CreateBeside(o.FS, path, nil, o.Mode); err != nil {
			return nil, errs.Beside(counterPath, err)
		}
	}
	f, err := os.OpenFile(path, counterfile.OpenFlags(o.Follow), 0)
	if !create && errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &errs.FileError{Op: "open", Path: path, Err: heartbeatFileError(err), Counter: counterPath}
	}
	st, err := statefile.CheckRegular(int(f.Fd()))
	if err == nil {
		err = statefile.CheckOwner(path, st)
	}
	if err != nil {
		f.Close()
		return nil, &errs.FileError{Op: "open", Path: path, Err: heartbeatFileError(err), Counter: counterPath}
	}
	return f, nil
}

// heartbeatFileError classifies an error opening the heartbeat file as
// classifyOpenError does (errs.ErrNotRegular, errs.ErrSymlink, ...), in a message
// that names the heartbeat file, not the counter, and says what to do.
func heartbeatFileError(err error) error {
	c := errs.OpenError(err)
	var what string
	switch {
	case errors.Is(c, errs.ErrSymlink):
		what = "is a symbolic link"
	case errors.Is(err, unix.EISDIR):
		what = "is a directory"
	case errors.Is(c, errs.ErrNotRegular):
		what = "is " + err.Error() // "is not a regular file (a FIFO)"
	default:
		return c
	}
	return &heartbeatFileErr{
		msg: fmt.Sprintf("the heartbeat file %s: remove it, and the next Open makes it again", what),
		err: c,
	}
}

// heartbeatFileErr is heartbeatFileError's error: its own message, and
// the classified error to match.
type heartbeatFileErr struct {
	msg string
	err error
}

func (e *heartbeatFileErr) Error() string { return e.msg }
func (e *heartbeatFileErr) Unwrap() error { return e.err }

// readHeartbeat reads the record; a missing, short or foreign one is ok
// false.
func (h *Files) ReadHeartbeat() (Heartbeat, bool) {
	if h.hb == nil {
		return Heartbeat{}, false
	}
	b := make([]byte, HeartbeatSize+1)
	n, err := h.io().ReadAt(h.hb, b, 0)
	if err != nil && n != HeartbeatSize {
		return Heartbeat{}, false
	}
	return DecodeHeartbeat(b[:n])
}

// WriteHeartbeat writes the record in place, unsynced.
func (h *Files) WriteHeartbeat(r Heartbeat) error {
	if h.hb == nil {
		return nil
	}
	if _, err := h.io().WriteAt(h.hb, EncodeHeartbeat(r), 0); err != nil {
		return &errs.FileError{Op: "write", Path: h.hb.Name(), Err: err, Counter: h.counterPath}
	}
	return nil
}

// TryHeartbeatRole takes the host's heartbeat role if no other process
// holds it. It never waits.
func (h *Files) TryHeartbeatRole() bool {
	if h.hb == nil {
		return false
	}
	for {
		err := unix.Flock(int(h.hb.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			return err == nil
		}
	}
}

// EnsureHeartbeat creates and opens the heartbeat file if this process
// has not opened it yet.
func (h *Files) EnsureHeartbeat() error {
	if h.hb != nil {
		return nil
	}
	f, err := openHeartbeat(h.counterPath, h.opts, true)
	if err != nil {
		return err
	}
	h.hb = f
	return nil
}

// FindHeartbeat opens the heartbeat file if this process has not and it
// exists now: a process that opened the host's files before the first
// process's claim made it finds it once that claim stands.
func (h *Files) FindHeartbeat() error {
	if h.hb != nil {
		return nil
	}
	f, err := openHeartbeat(h.counterPath, h.opts, false)
	if err != nil {
		return err
	}
	h.hb = f
	return nil
}

// RejoinHeartbeat checks that the heartbeat file this process has open is
// still the one at its path. If it was removed or replaced (an operator's
// rm, a process that found it missing and made it again), the host's
// processes would split in two, each half with a record and a holder of
// its own; so this process opens the file at the path (making it if it is
// missing, checked as at Open) and puts it in place of the one it had,
// under the same descriptor number (dup3), so that any use of the file in
// flight sees one or the other whole. The role held on the old file goes
// with it. What the old record said for session (the last refresh and
// try, and "taken") is carried into the new one. It reports whether the
// file was replaced; a file at the path that cannot be opened (a FIFO,
// another user's) is an error, and the old file is kept.
func (h *Files) RejoinHeartbeat(session uint64) (bool, error) {
	if h.hb == nil {
		return false, nil
	}
	if moved, err := h.heartbeatMoved(); err != nil || !moved {
		return false, err
	}
	old, oldOK := h.ReadHeartbeat()
	f, err := openHeartbeat(h.counterPath, h.opts, true)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := unix.Dup3(int(f.Fd()), int(h.hb.Fd()), unix.O_CLOEXEC); err != nil {
		return false, &errs.FileError{Op: "reopen", Path: h.hb.Name(), Err: err, Counter: h.counterPath}
	}
	if !oldOK || old.Session != session {
		return true, nil
	}
	return true, h.carryHeartbeat(session, old)
}

// heartbeatMoved reports whether the heartbeat file this process has open
// is no longer the one at its path (removed, or another file there).
func (h *Files) heartbeatMoved() (bool, error) {
	var open, at unix.Stat_t
	if err := unix.Fstat(int(h.hb.Fd()), &open); err != nil {
		return false, &errs.FileError{Op: "stat", Path: h.hb.Name(), Err: err, Counter: h.counterPath}
	}
	stat := unix.Lstat
	if h.opts.Follow {
		stat = unix.Stat
	}
	err := stat(h.hb.Name(), &at)
	switch {
	case err == nil && at.Dev == open.Dev && at.Ino == open.Ino:
		return false, nil
	case err != nil && !errors.Is(err, unix.ENOENT):
		return false, &errs.FileError{Op: "stat", Path: h.hb.Name(), Err: err, Counter: h.counterPath}
	}
	return true, nil
}

// carryHeartbeat carries what the old record said for session (the last
// refresh and try, and "taken") into the record of the file now open,
// where it is later than what that one says.
func (h *Files) carryHeartbeat(session uint64, old Heartbeat) error {
	return h.UpdateHeartbeat(session, func(rec *Heartbeat) bool {
		if rec.Last >= old.Last && rec.Tried >= old.Tried && (rec.Taken || !old.Taken) {
			return false
		}
		if old.Tried > rec.Tried {
			rec.Tried, rec.Retry = old.Tried, old.Retry
		}
		rec.Last = max(rec.Last, old.Last)
		rec.Taken = rec.Taken || old.Taken
		return true
	})
}

// DropHeartbeatRole gives up the heartbeat role, if this process holds
// it, so that another process takes it at its next poll.
func (h *Files) DropHeartbeatRole() {
	if h.hb != nil {
		_ = unix.Flock(int(h.hb.Fd()), unix.LOCK_UN)
	}
}

// UpdateHeartbeat reads the record and has fn change it, then writes it
// if fn says to, holding a write lock on the record's bytes: a process's
// update never lands between another's read and write. fn gets the record
// if it is session's, else a new one for session.
func (h *Files) UpdateHeartbeat(session uint64, fn func(rec *Heartbeat) (write bool)) error {
	if h.hb == nil {
		return nil
	}
	fd := int(h.hb.Fd())
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: HeartbeatSize}
	// Never wait without end: a process stopped (SIGSTOP, a hung write)
	// while it holds these bytes would otherwise stop every other
	// process's refresh of last-seen. Past heartbeatLockWait the update
	// fails, and the refresh is sent without it.
	for deadline := h.clock().Now().Add(heartbeatLockWait); ; {
		err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &lk)
		if err == nil {
			break
		}
		busy := errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES)
		switch {
		case errors.Is(err, unix.EINTR):
		case busy && h.clock().Now().Before(deadline):
			h.clock().Sleep(100 * time.Microsecond)
		case busy:
			// Held past any update's length: a stopped process, or
			// another user's read lock. Updating without the lock keeps
			// the record moving (else every process would find it stale
			// and refresh at every poll); what it risks is losing a
			// "taken" written at the same moment, which the host's other
			// processes then learn at their own next refresh.
			return h.applyHeartbeat(session, fn)
		default:
			return &errs.FileError{Op: "lock", Path: h.hb.Name(), Err: err, Counter: h.counterPath}
		}
	}
	defer func() {
		un := unix.Flock_t{Type: unix.F_UNLCK, Whence: 0, Start: 0, Len: HeartbeatSize}
		_ = unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &un)
	}()
	return h.applyHeartbeat(session, fn)
}

// applyHeartbeat is UpdateHeartbeat's read, change and write. A record
// with bytes past its 40 (damage, or another user's writing) is cut back
// to them, so that it reads as a record again.
func (h *Files) applyHeartbeat(session uint64, fn func(rec *Heartbeat) (write bool)) error {
	rec, ok := h.ReadHeartbeat()
	if !ok || rec.Session != session {
		rec = Heartbeat{Session: session}
	}
	if !fn(&rec) {
		return nil
	}
	if err := h.WriteHeartbeat(rec); err != nil {
		return err
	}
	if st, err := h.hb.Stat(); err == nil && st.Size() != HeartbeatSize {
		if err := h.hb.Truncate(HeartbeatSize); err != nil {
			return &errs.FileError{Op: "truncate", Path: h.hb.Name(), Err: err, Counter: h.counterPath}
		}
	}
	return nil
}
