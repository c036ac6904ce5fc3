package engine

import (
	"github.com/snapid/snapid/internal/errs"
)

// The engine's errors are package errs's, under the same names.
var (
	ErrInvalidName          = errs.ErrInvalidName
	ErrInvalidOption        = errs.ErrInvalidOption
	ErrExhausted            = errs.ErrExhausted
	ErrSequenceShort        = errs.ErrSequenceShort
	ErrNoSequence           = errs.ErrNoSequence
	ErrInvalidSequence      = errs.ErrInvalidSequence
	ErrSequencesUnsupported = errs.ErrSequencesUnsupported
	ErrNameTaken            = errs.ErrNameTaken
	ErrProbableClone        = errs.ErrProbableClone
	ErrRegistry             = errs.ErrRegistry
	ErrStrideMismatch       = errs.ErrStrideMismatch
	ErrInvalidID            = errs.ErrInvalidID
	ErrCorrupt              = errs.ErrCorrupt
	ErrNameMismatch         = errs.ErrNameMismatch
	ErrNameBound            = errs.ErrNameBound
	ErrNumberBound          = errs.ErrNumberBound
	ErrFormChanged          = errs.ErrFormChanged
	ErrNumberMismatch       = errs.ErrNumberMismatch
	ErrNotRegular           = errs.ErrNotRegular
	ErrSymlink              = errs.ErrSymlink
	ErrUntrustedOwner       = errs.ErrUntrustedOwner
	ErrReplaced             = errs.ErrReplaced
	ErrRolledBack           = errs.ErrRolledBack
	ErrInUse                = errs.ErrInUse
	ErrLowered              = errs.ErrLowered
	ErrClosed               = errs.ErrClosed
	ErrReleased             = errs.ErrReleased
	ErrReservationExhausted = errs.ErrReservationExhausted
	ErrLocked               = errs.ErrLocked
	ErrUntrustedDir         = errs.ErrUntrustedDir
	ErrUntrusted            = errs.ErrUntrusted
)

// The kinds of corrupt file (see package errs).
var (
	errCorruptSession = errs.ErrCorruptSession
	errCorruptNumber  = errs.ErrCorruptNumber
	errCorruptForms   = errs.ErrCorruptForms
	errCorruptBinding = errs.ErrCorruptBinding
)

// FileError records an error on a state file and the path it concerns (see
// package errs).
type FileError = errs.FileError

// SequenceExhaustedError is a sequence lease that cannot be had.
type SequenceExhaustedError = errs.SequenceExhaustedError

// lockError turns the lock layer's error into ErrLocked (see package errs).
func lockError(err error) error { return errs.LockError(err) }
