package engine

import (
	"github.com/snapid/snapid/internal/counterfile"
)

// fileIO is the I/O a counter file does on its descriptor after it is open
// (see counterfile.IO). Tests replace it to inject write and sync failures.
type fileIO = counterfile.IO

// osIO is the real I/O: pread, pwrite and fdatasync.
type osIO = counterfile.OSIO

// ignoringEINTR calls fn again for as long as it fails with EINTR.
func ignoringEINTR(fn func() error) error { return counterfile.IgnoringEINTR(fn) }
