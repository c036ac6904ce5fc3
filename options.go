package snapid

import (
	"fmt"
	"io/fs"
	"log/slog"
)

// An Option configures Open, Init, Repair and ReadCounter.
type Option func(*options) error

type options struct {
	sync           bool
	block          uint64
	fileMode       fs.FileMode
	followSymlinks bool
	logger         *slog.Logger
	io             fileIO
}

func defaultOptions() options {
	return options{
		sync:     true,
		fileMode: 0o600,
		logger:   slog.New(slog.DiscardHandler),
		io:       osIO{},
	}
}

func buildOptions(opts []Option) (options, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}

// WithSync turns fdatasync after each counter update on (the default) or
// off. With sync on, a number is handed out only after the counter value
// covering it is on stable storage, so ids survive an OS crash or a power
// loss. With sync off they survive a killed process, not a crashed host.
func WithSync(on bool) Option {
	return func(o *options) error {
		o.sync = on
		return nil
	}
}

// WithBlock turns on block mode: the Generator reserves n numbers at a time
// with one locked (and synced) update and serves them from memory. Numbers
// then increase per process, not host-wide, and a process that exits or
// crashes leaves the rest of its block unused (a gap, never a repeat).
// The next block is reserved in the background when half of the current one
// is used. n must be at least 1.
func WithBlock(n uint64) Option {
	return func(o *options) error {
		if n == 0 {
			return fmt.Errorf("snapid: %w: WithBlock(0): a block holds at least 1 number", ErrInvalidOption)
		}
		o.block = n
		return nil
	}
}

// WithFileMode sets the permission bits of a counter file the call creates
// (default 0600). It has no effect on an existing file.
func WithFileMode(mode fs.FileMode) Option {
	return func(o *options) error {
		if mode&^fs.ModePerm != 0 {
			return fmt.Errorf("snapid: %w: WithFileMode(%v): only permission bits are allowed", ErrInvalidOption, mode)
		}
		o.fileMode = mode
		return nil
	}
}

// WithFollowSymlinks lets the counter path be a symbolic link. By default a
// symbolic link at the counter path is refused with ErrSymlink, so that a
// link planted there cannot redirect writes to another file.
func WithFollowSymlinks(on bool) Option {
	return func(o *options) error {
		o.followSymlinks = on
		return nil
	}
}

// WithLogger sets the logger for notices (a counter raised, a background
// reservation that failed). The default discards them.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("snapid: %w: WithLogger(nil)", ErrInvalidOption)
		}
		o.logger = l
		return nil
	}
}

// withIO replaces the counter file's I/O (tests inject faults with it).
func withIO(io fileIO) Option {
	return func(o *options) error {
		o.io = io
		return nil
	}
}
