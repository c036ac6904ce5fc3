package counterfile

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapid/snapid/internal/errs"
	"github.com/stretchr/testify/require"
)

// newCounter writes a counter holding v in a directory of the test's and
// returns its path.
func newCounter(t *testing.T, v uint64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "counter.u64")
	b := Encode(v)
	require.NoError(t, os.WriteFile(path, b[:], 0o600))
	return path
}

// open opens path with o, closing it when the test ends.
func open(t *testing.T, path string, o Options) *File {
	t.Helper()
	f, err := Open(path, o)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

// A value stored is the value loaded, by this File and by another on the
// same path; High follows both, Durable only what this File synced.
func TestStoreLoad(t *testing.T) {
	t.Parallel()
	path := newCounter(t, 41)
	f := open(t, path, Options{})
	require.NoError(t, f.WithLock(func() error {
		v, err := f.Load()
		require.Equal(t, uint64(41), v)
		return err
	}))
	require.Equal(t, uint64(41), f.High())
	require.Zero(t, f.Durable(), "read, not synced by this File")

	require.NoError(t, f.WithLock(func() error { return f.Store(50) }))
	require.Equal(t, uint64(50), f.High())
	require.Zero(t, f.Durable(), "sync off: not durable")
	require.NoError(t, f.WithLock(func() error { return f.SyncWritten(50) }))
	require.Equal(t, uint64(50), f.Durable())

	s := open(t, path, Options{Sync: true})
	v, err := s.ReadContext(context.Background())
	require.NoError(t, err)
	require.Equal(t, uint64(50), v)
	require.NoError(t, s.WithLock(func() error { return s.Store(60) }))
	require.Equal(t, uint64(60), s.Durable(), "sync on: durable once stored")
}

// A file that is not exactly 8 bytes is ErrCorrupt naming the file, never
// a value.
func TestLoadRefusesAnotherSize(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 7, 9} {
		path := filepath.Join(t.TempDir(), "counter.u64")
		require.NoError(t, os.WriteFile(path, make([]byte, n), 0o600))
		f := open(t, path, Options{})
		_, err := f.ReadContext(context.Background())
		require.ErrorIs(t, err, errs.ErrCorrupt, "%d bytes", n)
		var fe *errs.FileError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, path, fe.Path)
	}
}

// What is not the counter is refused at Open: a missing file, a symbolic
// link unless followed, a directory.
func TestOpenRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := Open(filepath.Join(dir, "missing"), Options{})
	require.ErrorIs(t, err, fs.ErrNotExist)

	target := newCounter(t, 1)
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(target, link))
	_, err = Open(link, Options{})
	require.ErrorIs(t, err, errs.ErrSymlink)
	require.ErrorIs(t, err, errs.ErrUntrusted)
	f, err := Open(link, Options{Follow: true})
	require.NoError(t, err)
	f.Close()

	_, err = Open(dir, Options{})
	require.ErrorIs(t, err, errs.ErrUntrusted)
}

// A counter replaced at its path (renamed over) while open is ErrReplaced
// at the next lock: nothing is written to a file others no longer lock.
func TestLockRefusesAReplacedFile(t *testing.T) {
	t.Parallel()
	path := newCounter(t, 5)
	f := open(t, path, Options{})
	other := filepath.Join(filepath.Dir(path), "other")
	b := Encode(9)
	require.NoError(t, os.WriteFile(other, b[:], 0o600))
	require.NoError(t, os.Rename(other, path))
	err := f.WithLock(func() error { return f.Store(6) })
	require.ErrorIs(t, err, errs.ErrReplaced)
	err = f.LockUnless(func() error { return nil })
	require.ErrorIs(t, err, errs.ErrReplaced)
	err = f.TryWithLock(func() error { return nil })
	require.ErrorIs(t, err, errs.ErrReplaced)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, b[:], got, "the new file is not written")
}

// tornIO writes only part of the first write, and of the second too when
// both is set.
type tornIO struct {
	OSIO
	writes int
	both   bool
}

func (x *tornIO) WriteAt(f *os.File, b []byte, off int64) (int, error) {
	x.writes++
	if x.writes == 1 || x.both && x.writes == 2 {
		n, err := OSIO{}.WriteAt(f, b[:3], off)
		if err != nil {
			return n, err
		}
		return n, errors.New("torn")
	}
	return OSIO{}.WriteAt(f, b, off)
}

// A torn write is written again whole; if that fails too, the File
// refuses every later update as ErrCorrupt.
func TestTornWrite(t *testing.T) {
	t.Parallel()
	path := newCounter(t, 0x0101010101010101)
	x := &tornIO{}
	f := open(t, path, Options{IO: x})
	err := f.WithLock(func() error { return f.Store(0x0202020202020202) })
	require.Error(t, err, "the write failed")
	v, err := f.ReadContext(context.Background())
	require.NoError(t, err)
	require.Equal(t, uint64(0x0202020202020202), v, "written again whole")

	path = newCounter(t, 0x0101010101010101)
	other := open(t, path, Options{})
	f = open(t, path, Options{IO: &tornIO{both: true}})
	require.Error(t, f.WithLock(func() error { return f.Store(0x0202020202020202) }))
	err = f.WithLock(func() error { return nil })
	require.ErrorIs(t, err, errs.ErrCorrupt)
	require.ErrorIs(t, f.LockUnless(func() error { return nil }), errs.ErrCorrupt)
	// The torn value (lower than both) is read by no other File: the
	// file is one byte too long until it is repaired.
	_, err = other.ReadContext(context.Background())
	require.ErrorIs(t, err, errs.ErrCorrupt)
}

// shortIO writes only half of every write, reporting no error.
type shortIO struct{ OSIO }

func (shortIO) WriteAt(f *os.File, b []byte, off int64) (int, error) {
	return OSIO{}.WriteAt(f, b[:len(b)/2], off)
}

// A Rewrite whose write is short fails: it never reports a value the file
// does not hold.
func TestRewriteShortWriteFails(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "counter.u64")
	require.NoError(t, os.WriteFile(path, make([]byte, 16), 0o600))
	f := open(t, path, Options{IO: shortIO{}})
	err := f.WithLock(func() error { _, err := f.Rewrite(3 << 32); return err })
	require.ErrorIs(t, err, io.ErrShortWrite)
}

// Rewrite writes over whatever the file holds, cuts it to 8 bytes and
// returns what it held.
func TestRewrite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "counter.u64")
	require.NoError(t, os.WriteFile(path, []byte("not a counter at all"), 0o600))
	f := open(t, path, Options{})
	var prev []byte
	require.NoError(t, f.WithLock(func() (err error) { prev, err = f.Rewrite(99); return err }))
	require.Equal(t, "not a counter at all", string(prev))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	b := Encode(99)
	require.Equal(t, b[:], got)
}
