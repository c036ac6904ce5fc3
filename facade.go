package snapid

// The names below are those of package internal/engine, where the
// library's code lives.

import (
	"context"
	"io/fs"
	"log/slog"
	"time"

	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
)

type (
	FileError              = engine.FileError
	Format                 = engine.Format
	Generator              = engine.Generator
	Histogram              = engine.Histogram
	HostInfo               = engine.HostInfo
	ID                     = engine.ID
	Option                 = engine.Option
	RegistryCalls          = engine.RegistryCalls
	RegistryStats          = engine.RegistryStats
	ReservationStatus      = engine.ReservationStatus
	Sequence               = engine.Sequence
	SequenceExhaustedError = engine.SequenceExhaustedError
	SequenceLeaseState     = engine.SequenceLeaseState
	SequenceOption         = engine.SequenceOption
	SequenceStats          = engine.SequenceStats
	Stats                  = engine.Stats
)

const (
	FormatDecimal  = engine.FormatDecimal
	FormatName     = engine.FormatName
	FormatStriped  = engine.FormatStriped
	MaxSafeInteger = engine.MaxSafeInteger
)

var (
	ErrClosed               = engine.ErrClosed
	ErrCorrupt              = engine.ErrCorrupt
	ErrExhausted            = engine.ErrExhausted
	ErrFormChanged          = engine.ErrFormChanged
	ErrInUse                = engine.ErrInUse
	ErrInvalidID            = engine.ErrInvalidID
	ErrInvalidName          = engine.ErrInvalidName
	ErrInvalidOption        = engine.ErrInvalidOption
	ErrLocked               = engine.ErrLocked
	ErrNameBound            = engine.ErrNameBound
	ErrNameMismatch         = engine.ErrNameMismatch
	ErrNameTaken            = engine.ErrNameTaken
	ErrNoSequence           = engine.ErrNoSequence
	ErrNotRegular           = engine.ErrNotRegular
	ErrNumberBound          = engine.ErrNumberBound
	ErrNumberMismatch       = engine.ErrNumberMismatch
	ErrProbableClone        = engine.ErrProbableClone
	ErrRegistry             = engine.ErrRegistry
	ErrReleased             = engine.ErrReleased
	ErrReplaced             = engine.ErrReplaced
	ErrReservationExhausted = engine.ErrReservationExhausted
	ErrRolledBack           = engine.ErrRolledBack
	ErrSequenceShort        = engine.ErrSequenceShort
	ErrSequencesUnsupported = engine.ErrSequencesUnsupported
	ErrStrideMismatch       = engine.ErrStrideMismatch
	ErrSymlink              = engine.ErrSymlink
	ErrUntrustedDir         = engine.ErrUntrustedDir
	ErrUntrustedOwner       = engine.ErrUntrustedOwner
)

func LocalHostInfo() HostInfo { return engine.LocalHostInfo() }

func NameFromHostname(h string) (name string, changed string, err error) {
	return engine.NameFromHostname(h)
}

func Open(counterPath string, name string, opts ...Option) (*Generator, error) {
	return engine.Open(counterPath, name, opts...)
}

func OpenContext(ctx context.Context, counterPath string, name string, opts ...Option) (*Generator, error) {
	return engine.OpenContext(ctx, counterPath, name, opts...)
}

func ParseFormat(s string) (Format, error) { return engine.ParseFormat(s) }

func ParseID(s string) (ID, error) { return engine.ParseID(s) }

func SequenceBlock(n uint64) SequenceOption { return engine.SequenceBlock(n) }

func SequenceLeaseSize(n uint64) SequenceOption { return engine.SequenceLeaseSize(n) }

func ValidateName(s string) error { return engine.ValidateName(s) }

func WithBindingDir(dir string) Option { return engine.WithBindingDir(dir) }

func WithBlock(n uint64) Option { return engine.WithBlock(n) }

func WithCPUShards(on bool) Option { return engine.WithCPUShards(on) }

func WithCloneWindow(d time.Duration) Option { return engine.WithCloneWindow(d) }

func WithFileMode(mode fs.FileMode) Option { return engine.WithFileMode(mode) }

func WithFollowSymlinks(on bool) Option { return engine.WithFollowSymlinks(on) }

func WithFormat(f Format) Option { return engine.WithFormat(f) }

func WithHeartbeat(d time.Duration) Option { return engine.WithHeartbeat(d) }

func WithHostInfo(h HostInfo) Option { return engine.WithHostInfo(h) }

func WithLogger(l *slog.Logger) Option { return engine.WithLogger(l) }

func WithMaxID(max uint64) Option { return engine.WithMaxID(max) }

func WithNodeNumber(n uint64) Option { return engine.WithNodeNumber(n) }

func WithOutageHorizon(d time.Duration) Option { return engine.WithOutageHorizon(d) }

func WithOwner(uid int, gid int) Option { return engine.WithOwner(uid, gid) }

func WithReclaim() Option { return engine.WithReclaim() }

func WithRegistry(r registry.Registry) Option { return engine.WithRegistry(r) }

func WithRegistryTimeout(d time.Duration) Option { return engine.WithRegistryTimeout(d) }

func WithReserveStep(n uint64) Option { return engine.WithReserveStep(n) }

func WithStride(s uint64) Option { return engine.WithStride(s) }

func WithSync(on bool) Option { return engine.WithSync(on) }

func WithTakeover(floor uint64) Option { return engine.WithTakeover(floor) }
