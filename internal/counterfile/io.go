package counterfile

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// IO is the I/O a File does on its descriptor once open, behind one
// interface that tests and the simulator replace to inject write and sync
// failures.
type IO interface {
	ReadAt(f *os.File, b []byte, off int64) (int, error)
	WriteAt(f *os.File, b []byte, off int64) (int, error)
	Sync(f *os.File) error
}

// OSIO calls pread, pwrite and fdatasync on the descriptor directly: a
// counter file is a regular file (checked at open), so it never takes the
// runtime's poller, and os.File's reference counting and retry loops would
// only add to every update. A read shorter than b means the end of the
// file (io.EOF), as with os.File.ReadAt.
type OSIO struct{}

// ReadAt is pread.
func (OSIO) ReadAt(f *os.File, b []byte, off int64) (int, error) {
	var n int
	err := IgnoringEINTR(func() (err error) { n, err = unix.Pread(int(f.Fd()), b, off); return err })
	switch {
	case err != nil:
		return 0, err
	case n < len(b):
		return n, io.EOF
	}
	return n, nil
}

// WriteAt is pwrite.
func (OSIO) WriteAt(f *os.File, b []byte, off int64) (int, error) {
	var n int
	err := IgnoringEINTR(func() (err error) { n, err = unix.Pwrite(int(f.Fd()), b, off); return err })
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Sync is fdatasync.
func (OSIO) Sync(f *os.File) error {
	return IgnoringEINTR(func() error { return unix.Fdatasync(int(f.Fd())) })
}

// IgnoringEINTR calls fn again for as long as it fails with EINTR.
func IgnoringEINTR(fn func() error) error {
	for {
		if err := fn(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
