package hoststate

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/snapid/snapid/internal/errs"
	"golang.org/x/sys/unix"
)

// Hold is a process's hold on its name's record while it issues from
// the counter the record names: the record's handle, the mark this
// process last wrote and synced (updates up to it need no write), and
// whether this process holds the record's shared presence lock (see
// Enter), which keeps any other process from setting the mark back
// under it. Every change of the record a process makes while it holds
// it goes through Update or Cover, which keep the mark this process
// trusts and the record's in one place.
type Hold struct {
	h        *Handle
	mu       sync.Mutex
	mark     uint64 // the mark this process last wrote and synced
	dev, ino uint64 // the counter's identity
	step     uint64 // how far the mark goes ahead of the counter
	present  bool
}

// NewHold returns the hold on h's record for the counter of device dev
// and inode ino, its mark kept step numbers ahead of the counter. It
// reads nothing and takes no lock.
func NewHold(h *Handle, dev, ino, step uint64) *Hold {
	return &Hold{h: h, dev: dev, ino: ino, step: step}
}

// Step is how far the mark goes ahead of the counter.
func (hd *Hold) Step() uint64 { return hd.step }

// Handle is the record's handle.
func (hd *Hold) Handle() *Handle { return hd.h }

// LockWait bounds every wait for a record's write lock: a program holds
// it for one read and one write (a sync), so a longer wait is a process
// holding it on purpose, and the caller gets errs.ErrLocked instead of
// hanging, whatever its context.
const LockWait = 10 * time.Second

// WriteLock takes h's write lock (see Handle.WriteLock), waiting no
// longer than ctx allows, and never longer than LockWait.
func WriteLock(ctx context.Context, h *Handle) (unlock func(), err error) {
	ctx, cancel := context.WithTimeout(ctx, LockWait)
	defer cancel()
	unlock, err = h.WriteLock(ctx)
	if err != nil {
		return unlock, &errs.FileError{Op: "record", Path: h.Path(), Err: fmt.Errorf("%w: %w", errs.ErrLocked, err)}
	}
	return unlock, nil
}

// Enter makes this process present: first reports whether no other
// process held the record (its exclusive try succeeded; the caller holds
// the counter's lock, which every opener takes), then the shared
// presence lock is taken, waiting as long as ctx allows for a Release or
// a closer holding it exclusively.
func (hd *Hold) Enter(ctx context.Context) (first bool, err error) {
	first = hd.h.Lock(true)
	if err := hd.h.LockShared(ctx); err != nil {
		return first, &errs.FileError{Op: "record", Path: hd.h.Path(), Err: fmt.Errorf("%w: waiting for the name's presence lock (a Release, or a program closing): %w", errs.ErrInUse, err)}
	}
	// A record moved (or removed) before this process became present is
	// no longer the one every program of the name meets at: refused.
	var st unix.Stat_t
	if err := unix.Fstat(int(hd.h.f.Fd()), &st); err != nil || st.Nlink == 0 {
		_ = unix.Flock(int(hd.h.f.Fd()), unix.LOCK_UN)
		return false, &errs.FileError{Op: "record", Path: hd.h.Path(), Err: fmt.Errorf(
			"%w: the name's record was moved or removed as this program opened it; open the name again", errs.ErrInUse)}
	}
	hd.mu.Lock()
	hd.present = true
	hd.mu.Unlock()
	return first, nil
}

// Last reports whether this process is the last present one: it was
// present and now holds the presence lock alone, exclusively.
func (hd *Hold) Last() bool {
	hd.mu.Lock()
	present := hd.present
	hd.mu.Unlock()
	return present && hd.h.Lock(true)
}

// Update is the read-modify-write of every change of the record but the
// hot path's (Cover): under the hold's mutex and the record's write lock
// it reads the record again and gives it to fn; when fn reports write,
// the record as fn left it is written and synced, and its mark becomes
// the one this process trusts.
func (hd *Hold) Update(ctx context.Context, fn func(r *Record) (write bool, err error)) error {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	return hd.updateLocked(ctx, fn)
}

// updateLocked is Update; the caller holds hd.mu.
func (hd *Hold) updateLocked(ctx context.Context, fn func(r *Record) (write bool, err error)) error {
	unlock, err := WriteLock(ctx, hd.h)
	if err != nil {
		return err
	}
	defer unlock()
	r, err := hd.h.Read()
	if err != nil {
		return &errs.FileError{Op: "record", Path: hd.h.Path(), Err: err}
	}
	write, err := fn(&r)
	if err != nil || !write {
		return err
	}
	if err := hd.h.Write(r); err != nil {
		return &errs.FileError{Op: "record", Path: hd.h.Path(), Err: err}
	}
	hd.mark = r.Mark
	return nil
}

// Check runs under the counter's lock before every update from cur. The
// record is read again only when it changed (one write a step of each
// process, see Cover), and given to also (nil: none), which may refuse
// the update. A record whose mark was lowered under this process (a
// Repair vouching for a lower value) lowers the mark this process
// trusts, so that its next update writes the record again before going
// past the record's. A counter below the record's floor went back
// (restored or copied over in place while this process runs) further
// than what this process saw itself can tell: Check returns the record's
// mark, at or above every number any program of the name may have
// handed out, to raise it to (0: no raise).
func (hd *Hold) Check(cur uint64, also func(r Record) error) (raise uint64, err error) {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	same, err := hd.h.Unchanged()
	if err != nil {
		return 0, &errs.FileError{Op: "record", Path: hd.h.Path(), Err: err}
	}
	r := hd.h.Record()
	if !same {
		if r, err = hd.h.Read(); err != nil {
			return 0, &errs.FileError{Op: "record", Path: hd.h.Path(), Err: err}
		}
	}
	if also != nil {
		if err := also(r); err != nil {
			return 0, err
		}
	}
	if r.Mark < hd.mark {
		hd.mark = r.Mark
	}
	if cur < r.Floor && r.Dev == hd.dev && r.Ino == hd.ino {
		return max(r.Floor, r.Mark), nil
	}
	return 0, nil
}

// Due reports whether Cover(…, upTo) writes the record.
func (hd *Hold) Due(upTo uint64) bool {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	return !hd.present || upTo > hd.mark
}

// Cover makes the record's mark cover upTo before the counter is stored
// at it (the caller holds the counter's lock): a write only when the
// counter passes the mark this process last wrote, which then goes a
// step ahead, and the floor to base, the highest value this process
// synced.
func (hd *Hold) Cover(base, cur, upTo uint64) error {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	if hd.present && upTo <= hd.mark {
		return nil
	}
	return hd.updateLocked(context.Background(), func(r *Record) (bool, error) {
		if r.Dev != hd.dev || r.Ino != hd.ino {
			// The name went with another counter (a replacement raised
			// past the mark): this one hands out nothing above it.
			return false, &errs.FileError{Op: "record", Path: hd.h.Path(), Err: fmt.Errorf("%w: the host's record of the name now names another counter file (%s)", errs.ErrNameBound, r.Path)}
		}
		if r.Released {
			return false, &errs.FileError{Op: "record", Path: hd.h.Path(), Err: fmt.Errorf("%w: %q was released on this host while this process used it", errs.ErrReleased, r.Name)}
		}
		// Written even when the record read covers upTo already: what
		// was read may be a write whose sync failed (visible, not
		// durable, and a later sync may report success without writing
		// it), so a process issues only under a mark it wrote and
		// synced itself: one write a step for each process.
		r.Floor = max(r.Floor, base)
		// A step ahead of the counter as it was (cur), and at least
		// upTo: a crash leaves a gap of at most a step.
		r.Mark = max(r.Mark, upTo)
		if cur <= math.MaxUint64-hd.step {
			r.Mark = max(r.Mark, cur+hd.step)
		} else {
			r.Mark = math.MaxUint64
		}
		return true, nil
	})
}

// RaiseFloor records v, a value synced to the counter, as the floor (the
// caller holds the counter's lock).
func (hd *Hold) RaiseFloor(v uint64) error {
	return hd.Update(context.Background(), func(r *Record) (bool, error) {
		if r.Dev != hd.dev || r.Ino != hd.ino || r.Floor >= v {
			return false, nil
		}
		r.Floor = v
		r.Mark = max(r.Mark, v)
		return true, nil
	})
}

// Read reads the record again.
func (hd *Hold) Read() (Record, error) {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	r, err := hd.h.Read()
	if err != nil {
		return Record{}, &errs.FileError{Op: "record", Path: hd.h.Path(), Err: err}
	}
	return r, nil
}
