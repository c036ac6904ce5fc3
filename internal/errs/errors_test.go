package errs

import (
	"errors"
	"io/fs"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A FileError about a file beside a counter names the counter, and the
// file only as detail; one about the counter (or with no counter given)
// names its file. The cause matches through it either way.
func TestFileErrorNamesTheCounter(t *testing.T) {
	t.Parallel()
	const counter = "/var/lib/snapid/cms/counter.u64"
	for _, tc := range []struct {
		name string
		err  *FileError
		want string
	}{
		{"the counter", &FileError{Op: "read", Path: counter, Err: syscall.EIO},
			"snapid: read /var/lib/snapid/cms/counter.u64: input/output error"},
		{"a file beside it", &FileError{Op: "read", Path: counter + ".mark", Counter: counter, Err: syscall.EIO},
			"snapid: read /var/lib/snapid/cms/counter.u64: counter.u64.mark: input/output error"},
		{"a file beside it, its own op", &FileError{Op: "create", Path: counter + ".owner", Counter: counter,
			Err: &fs.PathError{Op: "sync", Path: counter + ".owner", Err: syscall.EIO}},
			"snapid: create /var/lib/snapid/cms/counter.u64: counter.u64.owner: sync: input/output error"},
		{"a file elsewhere", &FileError{Op: "read", Path: "/var/lib/snapid/records/cms_1", Counter: counter, Err: syscall.EIO},
			"snapid: read /var/lib/snapid/cms/counter.u64: /var/lib/snapid/records/cms_1: input/output error"},
		{"no counter given", &FileError{Op: "read", Path: counter + ".mark", Err: syscall.EIO},
			"snapid: read /var/lib/snapid/cms/counter.u64.mark: input/output error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.want, tc.err.Error())
			assert.ErrorIs(t, tc.err, syscall.EIO)
		})
	}
}

// Beside names the counter of a FileError about another file, and
// leaves the counter's own errors and other errors as they are.
func TestBeside(t *testing.T) {
	t.Parallel()
	const counter = "/c/counter.u64"
	beside := &FileError{Op: "read", Path: counter + ".mark", Err: syscall.EIO}
	assert.Equal(t, counter, asFileError(Beside(counter, beside)).Counter)
	own := &FileError{Op: "read", Path: counter, Err: syscall.EIO}
	assert.Empty(t, asFileError(Beside(counter, own)).Counter)
	other := errors.New("no file")
	assert.Equal(t, other, Beside(counter, other))
	assert.NoError(t, Beside(counter, nil))
}

func asFileError(err error) *FileError {
	var fe *FileError
	errors.As(err, &fe)
	return fe
}
