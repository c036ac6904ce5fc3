package statefile

import (
	"errors"
	"fmt"
)

// Sentinel errors of the layer; callers match them with errors.Is and
// wrap them into their own.
var (
	// ErrNotRegular: the path names something other than a regular file
	// (a FIFO, a device, a directory, a socket).
	ErrNotRegular = errors.New("not a regular file")
	// ErrSymlink: a symbolic link where none is followed.
	ErrSymlink = errors.New("a symbolic link, which is not followed")
	// ErrWrongOwner: the file or directory is owned by a user it must
	// not be trusted from.
	ErrWrongOwner = errors.New("owned by a user not trusted with it")
	// ErrUnsafeDir: a directory others than its owner can write, where
	// they could replace what is in it.
	ErrUnsafeDir = errors.New("writable by users other than its owner")
	// ErrLocked: a lock was held by another process for as long as the
	// caller's context allowed.
	ErrLocked = errors.New("locked by another process")
	// ErrLinked: a file with more than one name (hard link), which
	// another user could have made to a file of someone else's.
	ErrLinked = errors.New("a file with more than one name")
	// ErrTooLarge: a file larger than the reader accepts.
	ErrTooLarge = errors.New("larger than such a file can be")
)

// LockedError is a lock another process held for as long as the caller's
// context allowed: it matches ErrLocked, names the holder, and wraps the
// context's cause.
type LockedError struct {
	Path   string
	Holder string // "held by pid 123 (snapctl, user nobody)", or "holder unknown"
	Cause  error  // the context's cause
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("%s: %v (%s) for as long as allowed: %v", e.Path, ErrLocked, e.Holder, e.Cause)
}

// Is makes errors.Is(err, ErrLocked) hold.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

func (e *LockedError) Unwrap() error { return e.Cause }
