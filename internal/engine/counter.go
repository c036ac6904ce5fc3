package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/snapid/snapid/internal/alloc"
	"github.com/snapid/snapid/internal/counterfile"
	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/internal/idform"
	"github.com/snapid/snapid/internal/statefile"
)

// CounterSize is the exact size of a counter file in bytes.
const CounterSize = counterfile.Size

// MaxNumber is the largest number a counter can issue.
const MaxNumber = idform.MaxNumber

// EncodeCounter returns the on-disk form of a counter whose last issued
// number is v (see counterfile.Encode).
func EncodeCounter(v uint64) [CounterSize]byte { return counterfile.Encode(v) }

// DecodeCounter decodes the content of a counter file (see
// counterfile.Decode).
func DecodeCounter(b []byte) (uint64, error) { return counterfile.Decode(b) }

// counterFile is a Generator's counter file (package counterfile: the
// descriptor, its lock, identity check and I/O) with what bounds its
// updates: the id form's limit and the host's record of the name (see
// advance).
type counterFile struct {
	*counterfile.File
	log *slog.Logger
	// form, when not nil, bounds every update: numbers past its limit
	// are refused before anything is taken (see advance). Set at Open,
	// then read-only.
	form *idform.Form
	// host is the host's record of the name: its mark must cover every
	// value a Generator's update stores (see hoststate.Hold.Cover). Set at
	// Open, before any update; nil on a counter opened to be read or
	// initialised, which advance is never called on.
	host *hostRecord
	// made: the Open that opened it made the file (see unmakeRefused).
	made bool
}

// fileOptions are the counterfile options o gives.
func fileOptions(o *options) counterfile.Options {
	return counterfile.Options{Follow: o.followSymlinks, InitDir: o.initDir, Sync: o.sync, IO: o.io}
}

// openFlags are the flags for every open of an existing state file.
func openFlags(follow bool) int { return counterfile.OpenFlags(follow) }

// classifyOpenError turns the errno of an open into this package's errors.
func classifyOpenError(err error) error { return errs.OpenError(err) }

// openCounter opens the counter file at path, creating it atomically with
// value 0 when it does not exist, and checks under the lock that it is a
// valid counter file. Nothing on disk is changed when it fails.
//
// Another user who can read the counter can flock it: the first lock
// waits at most as long as ctx allows (ErrLocked, naming the holder).
func openCounter(ctx context.Context, path string, o *options) (*counterFile, error) {
	made, err := createIfMissing(path, 0, o)
	if err != nil {
		return nil, err
	}
	c, err := openExisting(path, o)
	if err != nil {
		return nil, err
	}
	c.made = made
	if err := statefile.Lock(ctx, c.Fd(), path); err != nil {
		c.Close()
		return nil, &FileError{Op: "lock", Path: path, Err: lockError(err)}
	}
	err = c.CheckIdentity()
	if err != nil {
		err = &FileError{Op: "lock", Path: path, Err: err}
	} else {
		_, err = c.Load()
	}
	c.Unlock()
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// openExisting opens an existing counter file without reading it.
func openExisting(path string, o *options) (*counterFile, error) {
	f, err := counterfile.Open(path, fileOptions(o))
	if err != nil {
		return nil, err
	}
	return &counterFile{File: f, log: o.logger}, nil
}

// openReadOnly opens an existing counter file for reading only (flock
// works on a read-only descriptor), so that a user who may read the
// counter but not write it can still see it.
func openReadOnly(path string, o *options) (*counterFile, error) {
	f, err := counterfile.OpenReadOnly(path, fileOptions(o))
	if err != nil {
		return nil, err
	}
	return &counterFile{File: f, log: o.logger}, nil
}

// createIfMissing creates the counter file holding value v if nothing is at
// path. The file appears complete or not at all: a temporary file in the
// same directory is written and synced, then linked into place (link fails
// if another process created the counter first, and that process's file is
// kept), then the directory is synced. An existing file is never replaced,
// so a lock held on it stays valid. made reports whether this call made
// the file.
func createIfMissing(path string, v uint64, o *options) (made bool, err error) {
	// Nothing is made in a directory another user owns (but by Init, to
	// give a service its counter), or below one.
	if err := checkCounterPath(path, o); err != nil {
		return false, &FileError{Op: "create", Path: path, Err: err}
	}
	b := EncodeCounter(v)
	made, err = counterfile.CreateBesideNew(o.fs, path, b[:], o.fileMode)
	if errors.Is(err, fs.ErrNotExist) {
		// Name the missing directory, not the temporary file that could
		// not be made in it.
		if dir := filepath.Dir(path); !dirExists(dir) {
			return false, &FileError{Op: "create", Path: path, Err: missingDirError(dir)}
		}
	}
	return made, err
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

// advance reserves k numbers (k >= 1) and returns the first of them. The
// numbers are only returned after the new value is written (and synced,
// when sync is on); on any error nothing is reserved. With decimal, k is
// a count of ids of the decimal form: the update takes as many numbers as
// hold k that do not end in 0 (see idform.DecimalSpan). Numbers past the form's
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
			return alloc.ErrCallersLeft // its callers left while the lock was held elsewhere
		}
		if closed != nil && closed() {
			return ErrClosed
		}
		return nil
	}
	if err := c.LockUnless(stop); err != nil {
		return 0, err
	}
	defer c.Unlock()
	if err := stop(); err != nil {
		return 0, err
	}
	cur, err := c.Load()
	if err != nil {
		return 0, err
	}
	// How far it is known to have gone: what this process saw, and the
	// host's record (see hostRecord.check and hoststate.Hold.Check).
	high := c.High()
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
		// The hook chooses base, and counts the request's numbers from it
		// as the update below does (idform.Span).
		if base, err = hook.Check(cur, k, decimal, high); err != nil {
			return 0, err
		}
	case cur < high:
		base = high
		c.log.Error("snapid: the counter went backwards while in use (restored from a backup or copied over?); "+
			"raising it above the highest value this process read or wrote, and above the host's record of how far the name's programs went "+
			"when it went below the record's floor. A process that started since may have issued numbers again if it went back less than a step",
			"path", c.Path(), "counter", cur, "to", base)
	}
	if err := c.fits(base, k, decimal); err != nil {
		return 0, err
	}
	k, _ = idform.Span(base, k, decimal) // fits: it does not pass 2^64-1
	if !c.Synced() && cur > c.Durable() && c.host.Due(base+k) {
		// Sync off: the counter is written again and synced once a step,
		// as the record is written, so that the record's floor moves
		// with it (a counter restored or zeroed below it is refused).
		if err := c.StoreSynced(cur, true); err != nil {
			return 0, err
		}
	}
	if err := c.host.Cover(c.Durable(), cur, base+k); err != nil {
		return 0, err
	}
	if hook != nil {
		if err := hook.Commit(base + k); err != nil {
			return 0, err
		}
	}
	if err := c.Store(base + k); err != nil {
		return 0, err
	}
	if k > c.host.Step() {
		// A jump of more than a step: the record's floor follows at
		// once, so that the counter is never more than about a step
		// above what a restore is judged against.
		if !c.Synced() {
			if err := c.SyncWritten(base + k); err != nil { // of this process's own write, just made
				return 0, err
			}
		}
		if err := c.host.RaiseFloor(c.Durable()); err != nil {
			return 0, err
		}
	}
	return base + 1, nil
}

// advanceHook lets the registry take part in a counter update, under the
// counter's lock.
type advanceHook interface {
	// check sees the current value before anything is written and returns
	// the value to count from: cur, or a higher value to skip to (after a
	// roll-back), or an error to refuse. The request takes
	// idform.Span(base, k, decimal) numbers after base. high is the
	// highest value this counterFile read or wrote before: cur below it
	// was rolled back.
	Check(cur, k uint64, decimal bool, high uint64) (base uint64, err error)
	// Commit is told the value about to be written, before it is; an
	// error fails the update.
	Commit(v uint64) error
}

// fits refuses, as ErrExhausted, k numbers (decimal: k decimal ids) after
// base that would pass the form's bound or 2^64-1.
func (c *counterFile) fits(base, k uint64, decimal bool) error {
	return idform.Fits(c.Path(), c.form, base, k, decimal)
}
