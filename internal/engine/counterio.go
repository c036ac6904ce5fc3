package engine

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// The I/O a counter file does on its descriptor once open, behind one
// interface that tests and the simulator replace.

// fileIO is the I/O a counterFile does on its descriptor after it is open.
// Tests replace it to inject write and sync failures.
type fileIO interface {
	ReadAt(f *os.File, b []byte, off int64) (int, error)
	WriteAt(f *os.File, b []byte, off int64) (int, error)
	Sync(f *os.File) error
}

// osIO calls pread, pwrite and fdatasync on the descriptor directly: a
// counter file is a regular file (checked at open), so it never takes the
// runtime's poller, and os.File's reference counting and retry loops would
// only add to every update. A read shorter than b means the end of the
// file (io.EOF), as with os.File.ReadAt.
type osIO struct{}

func (osIO) ReadAt(f *os.File, b []byte, off int64) (int, error) {
	var n int
	err := ignoringEINTR(func() (err error) { n, err = unix.Pread(int(f.Fd()), b, off); return err })
	switch {
	case err != nil:
		return 0, err
	case n < len(b):
		return n, io.EOF
	}
	return n, nil
}

func (osIO) WriteAt(f *os.File, b []byte, off int64) (int, error) {
	var n int
	err := ignoringEINTR(func() (err error) { n, err = unix.Pwrite(int(f.Fd()), b, off); return err })
	if err != nil {
		return 0, err
	}
	return n, nil
}

func (osIO) Sync(f *os.File) error {
	return ignoringEINTR(func() error { return unix.Fdatasync(int(f.Fd())) })
}
