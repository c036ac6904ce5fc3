// Package errs holds the errors of every layer in one place: the values
// callers match with errors.Is (the root package and the engine give them
// under the same names), FileError naming the file an error concerns, and
// the kinds of corrupt file, each matching ErrCorrupt.
package errs

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"

	"github.com/snapid/snapid/internal/statefile"
	"github.com/snapid/snapid/registry"
)

// Errors a registry returns too, defined with the registry interface
// (package registry); the same values, for errors.Is.
var (
	ErrInvalidName          = registry.ErrInvalidName
	ErrInvalidOption        = registry.ErrInvalidOption
	ErrExhausted            = registry.ErrExhausted
	ErrSequenceShort        = registry.ErrSequenceShort
	ErrNoSequence           = registry.ErrNoSequence
	ErrInvalidSequence      = registry.ErrInvalidSequence
	ErrSequencesUnsupported = registry.ErrSequencesUnsupported
	ErrNameTaken            = registry.ErrNameTaken
	ErrProbableClone        = registry.ErrProbableClone
	ErrRegistry             = registry.ErrRegistry
	ErrStrideMismatch       = registry.ErrStrideMismatch
)

// The kinds of corrupt file, each matching ErrCorrupt (corruptError): the
// code that reads a file tells them apart; callers see ErrCorrupt and the
// file's path.
var (
	// ErrCorruptOwner is returned for an owner token file (<counter>.owner)
	// that does not hold 32 lower-case hex digits and a newline. Nothing is
	// written anywhere, the registry included.
	ErrCorruptOwner error = &corruptError{"corrupt owner token file"}

	// ErrCorruptMark is returned for a mark file (<counter>.mark) that is
	// neither empty nor 16 bytes. Nothing is written anywhere, the registry
	// included.
	ErrCorruptMark error = &corruptError{"corrupt mark file"}

	// ErrCorruptSession is returned to a process joining its host's claim
	// when the session file (<counter>.session) is not in the format this
	// version writes (see the list of files in hostfiles.go), was written by
	// an earlier version, or names another owner token. The first process of
	// a host does not read the file: it replaces it.
	ErrCorruptSession error = &corruptError{"corrupt session file"}

	// ErrCorruptNumber is returned by Open for a number file an earlier
	// version kept beside the counter (<counter>.number) that cannot be
	// read, when it is to be taken into the host's record of the name.
	// Nothing is issued until it is removed.
	ErrCorruptNumber error = &corruptError{"corrupt number file"}

	// ErrCorruptForms is returned by Open when both copies of the form
	// history an earlier version kept beside the counter (<counter>.forms,
	// <counter>.forms.copy: the striped and decimal forms it issued under)
	// are damaged, when they are to be taken into the host's record of the
	// name. One damaged copy beside a whole one is read from the whole one.
	ErrCorruptForms error = &corruptError{"corrupt form history"}

	// ErrCorruptBinding is returned by Open without a registry when the
	// name's binding file (see DefaultBindingDir) is not one this version
	// writes, or is a symbolic link. Nothing is created or written.
	ErrCorruptBinding error = &corruptError{"corrupt name binding file"}

	// ErrCorruptLease is returned for a sequence lease file
	// (<counter>.seq.<sequence>) that is not in the format this version
	// writes, fails its checksum, or belongs to another node name or owner
	// token. Nothing is written anywhere.
	ErrCorruptLease error = &corruptError{"corrupt sequence lease file"}
)

// SequenceExhaustedError is a sequence lease that cannot be had (see
// registry.SequenceExhaustedError).
type SequenceExhaustedError = registry.SequenceExhaustedError

// Errors returned by this package. Match them with errors.Is: the values
// returned are usually wrapped with more detail (the path, the name, the
// value that was refused).
var (
	// ErrInvalidID is returned by ParseID for a string that is not an id
	// in any form (see Format).
	ErrInvalidID = errors.New("invalid id")

	// ErrCorrupt is returned for a state file that is not as this
	// version writes it: a counter file whose size is not exactly 8 bytes,
	// or a file beside it (owner token, mark, session, sequence lease), the
	// host's record of a name, or a file an earlier version kept. The
	// error is a *FileError naming the file, and says what is wrong with
	// it. The file is left exactly as it was, and nothing is written
	// anywhere, the registry included.
	ErrCorrupt = errors.New("corrupt counter file")

	// ErrNameMismatch is returned by Open when other processes of the host
	// use the counter under another node name: one counter file serves
	// one name. The error names the name the counter is in use under.
	ErrNameMismatch = errors.New("counter in use under another node name")

	// ErrNameBound is returned by Open when the host's record of the name
	// (see DefaultBindingDir) names another counter file, or a counter
	// that is not there now or was replaced: two counter files under one
	// name would issue the same ids.
	ErrNameBound = errors.New("node name in use on this host with another counter file")

	// ErrNumberBound is returned by Open without a registry when the host
	// uses the node number (WithNodeNumber) under another node name that
	// is in use: two names under one number hand out the same numeric ids.
	ErrNumberBound = errors.New("node number in use on this host under another node name")

	// ErrFormChanged is returned by a striped Generator's calls once
	// another Generator opened its counter with another stride or node
	// number (and raised the counter past this one's ids): striped ids of
	// two forms meet, so two never issue from one counter at once.
	// Nothing is issued; open the counter again with its form.
	ErrFormChanged = errors.New("the counter's striped form changed")

	// ErrNumberMismatch is returned by Open when the node number the
	// registry holds for the name is not the one the host's record of the
	// name holds or given with WithNodeNumber: ids of two numbers under
	// one name, or one number under two names, could meet. Nothing is
	// issued.
	ErrNumberMismatch = errors.New("node number does not match")

	// ErrNotRegular is returned when the counter's path, or the path of
	// a file beside it (the error names which), names a directory, a
	// device, a FIFO or anything else that is not a regular file.
	ErrNotRegular error = &kindError{"not a regular file", ErrUntrusted}

	// ErrSymlink is returned when the counter's path, or the path of a
	// file beside it (the error names which), is a symbolic link and
	// following links was not asked for.
	ErrSymlink error = &kindError{"a symbolic link", ErrUntrusted}

	// ErrUntrustedOwner is returned when the counter file, or a file
	// beside it (.owner, .mark, .session, sequence leases), is
	// owned by a user other than the one running, and that user does not
	// own a directory holding it that only its owner can write: another
	// user could have planted or rewritten it (in /tmp, say). The error
	// names the owner. It is also returned for such a file with more than
	// one name (a hard link, which another user could have made to a file
	// of someone else's). Nothing is written.
	ErrUntrustedOwner error = &kindError{"counter state of another user refused", ErrUntrusted}

	// ErrReplaced is returned when the counter file was removed or replaced
	// by another file while a Generator had it open. A replaced file would
	// leave lockers of the old file unprotected, so the Generator stops.
	ErrReplaced = errors.New("counter file was removed or replaced while in use")

	// ErrRolledBack is returned by Open when the counter file holds less
	// than the host's record of its name says it reached: it was restored
	// from a backup, copied over or zeroed. Nothing is issued from it.
	ErrRolledBack = errors.New("counter file below what it had reached")

	// ErrInUse is returned by operations that need every process of the
	// host to have stopped using the counter (Release, Repair).
	ErrInUse = errors.New("counter in use by a running process")

	// ErrLowered is returned by operations that would lower the counter
	// without an explicit repair.
	ErrLowered = errors.New("refusing to lower the counter")

	// ErrClosed is returned by a Generator after Close.
	ErrClosed = errors.New("generator closed")

	// ErrReleased is returned by Open with a registry on a host that
	// released the name (Release, snapctl release): the host's processes
	// refuse it until it is claimed again on purpose (WithReclaim, snapctl
	// register), so that a routine start cannot take back a name meant for
	// another host.
	ErrReleased = errors.New("node name released by this host")

	// ErrReservationExhausted is returned when every number the registry
	// reserved for this host is used and no more could be reserved (the
	// registry is unreachable or refused).
	ErrReservationExhausted = errors.New("reserved range used up and the registry did not extend it")

	// ErrLocked is returned when a lock on a state file (the counter, the
	// name bindings' lock) was held by another process for as long as the
	// caller's context allowed; the error names the holder and wraps the
	// context's error.
	ErrLocked = errors.New("state file locked by another process")

	// ErrUntrustedDir is returned when a directory of name bindings, or
	// one above it, is owned by a user it cannot be trusted from, is a
	// symbolic link, or can be written by other users: they could replace
	// the bindings in it. It is also returned when the counter's own
	// directory, or one above it, can be written by users other than its
	// owner without being sticky: they could remove or swap the counter.
	// (A directory above the counter's owned by another user is
	// ErrUntrustedOwner.) The error names the directory and its owner.
	ErrUntrustedDir error = &kindError{"directory not safe from other users", ErrUntrusted}

	// ErrUntrusted is matched by ErrNotRegular, ErrSymlink,
	// ErrUntrustedOwner and ErrUntrustedDir: a state file, or a directory
	// holding one, that another user could have planted, redirected or
	// could replace. The error names the file or directory and says which.
	ErrUntrusted = errors.New("state not safe from other users")
)

// kindError is an error value of its own that also matches a broader one
// (errors.Is(ErrSymlink, ErrUntrusted)), with its own message.
type kindError struct {
	msg string
	of  error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.of }

// FileError records an error on the counter file and the path it concerns.
// Its Unwrap method returns the cause, so errors.Is(err, ErrCorrupt) and
// errors.Is(err, fs.ErrNotExist) work through it.
type FileError struct {
	Op   string // what was being done: "open", "create", "read", "write", "sync", "lock"
	Path string
	Err  error
	// Counter, for a file beside a counter (Path is then that file's
	// path, the mark or the owner token, say), is the counter's path:
	// the message names the counter, and the file beside it as detail.
	Counter string
}

func (e *FileError) Error() string {
	inner := e.Err
	// "open P: no such file", not "open P: open P: no such file".
	if pe, ok := inner.(*fs.PathError); ok && pe.Path == e.Path {
		inner = pe.Err
		if pe.Op != e.Op {
			inner = fmt.Errorf("%s: %w", pe.Op, pe.Err)
		}
	}
	if e.Counter != "" && e.Counter != e.Path {
		file := e.Path
		if filepath.Dir(file) == filepath.Dir(e.Counter) {
			file = filepath.Base(file)
		}
		return fmt.Sprintf("snapid: %s %s: %s: %v", e.Op, e.Counter, file, inner)
	}
	return fmt.Sprintf("snapid: %s %s: %v", e.Op, e.Path, inner)
}

func (e *FileError) Unwrap() error { return e.Err }

// Beside returns err with counter named as the counter of its FileError
// (see FileError.Counter) when that error is about another file (one
// beside the counter) and names no counter yet; any other error as it
// is.
func Beside(counter string, err error) error {
	var fe *FileError
	if errors.As(err, &fe) && fe.Counter == "" && fe.Path != counter {
		fe.Counter = counter
	}
	return err
}

// corruptError is a corrupt file beside the counter: its own error, which
// also matches ErrCorrupt.
type corruptError struct{ msg string }

func (e *corruptError) Error() string { return e.msg }

func (e *corruptError) Is(target error) bool { return target == ErrCorrupt }

// LockError turns the layer's lock error into this package's, saying once
// what happened (the path is the caller's to name).
func LockError(err error) error {
	var le *statefile.LockedError
	if errors.As(err, &le) {
		return fmt.Errorf("%w (%s) for as long as allowed: %w", ErrLocked, le.Holder, le.Cause)
	}
	if errors.Is(err, statefile.ErrLocked) {
		return fmt.Errorf("%w: %w", ErrLocked, err)
	}
	return err
}

// OpenError turns the error of opening or checking a state file into
// this package's: a file or directory another user could have planted or
// could replace is ErrUntrusted (ErrUntrustedOwner, ErrUntrustedDir,
// ErrSymlink, ErrNotRegular); anything else is returned as it is.
func OpenError(err error) error {
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
