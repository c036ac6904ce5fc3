package statefile

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// countingFS counts directory syncs per path.
type countingFS struct {
	OS
	mu    sync.Mutex
	syncs map[string]int
}

func (c *countingFS) SyncDir(dir string) error {
	c.mu.Lock()
	c.syncs[dir]++
	c.mu.Unlock()
	return c.OS.SyncDir(dir)
}

// A FIFO with a writer held open, a device, a directory: every read
// returns at once with ErrNotRegular; a link is refused.
func TestReadsRefuseWhatIsNotARegularFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o644))
	// A writer held open (O_RDWR does not wait for a reader).
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	require.NoError(t, err)
	defer w.Close()
	_, err = w.Write([]byte("x"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "file"), []byte("ok"), 0o600))
	require.NoError(t, os.Symlink(filepath.Join(dir, "file"), filepath.Join(dir, "link")))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o700))
	d, err := OpenDir(dir, DirOptions{})
	require.NoError(t, err)
	defer d.Close()
	for _, tc := range []struct {
		name string
		want error
	}{
		{"fifo", ErrNotRegular},
		{"sub", ErrNotRegular},
		{"link", ErrSymlink},
		{"missing", fs.ErrNotExist},
		{"file", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			b, _, err := ReadSmall(filepath.Join(dir, tc.name), false)
			b2, _, err2 := d.ReadFile(tc.name)
			assert.Less(t, time.Since(start), time.Second, "a read blocked")
			if tc.want == nil {
				require.NoError(t, err)
				require.NoError(t, err2)
				assert.Equal(t, "ok", string(b))
				assert.Equal(t, "ok", string(b2))
				return
			}
			assert.ErrorIs(t, err, tc.want)
			assert.ErrorIs(t, err2, tc.want)
		})
	}
	// /dev/null is a device.
	_, _, err = ReadSmall("/dev/null", false)
	assert.ErrorIs(t, err, ErrNotRegular)
}

// A file or directory owned by another user is refused when owners are
// given.
func TestOwnerChecks(t *testing.T) {
	t.Parallel()
	testfs.RequireRoot(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(p, []byte("x"), 0o644))
	require.NoError(t, os.Chown(p, 65534, 65534))
	_, _, err := ReadSmall(p, false, 0)
	assert.ErrorIs(t, err, ErrWrongOwner)
	_, _, err = ReadSmall(p, false, 0, 65534)
	assert.NoError(t, err)
	d, err := OpenDir(dir, DirOptions{Owners: []uint32{0}})
	require.NoError(t, err)
	_, _, err = d.ReadFile("f", 0)
	assert.ErrorIs(t, err, ErrWrongOwner)
	_, err = d.OpenLockFile("f", 0o600, 0)
	assert.ErrorIs(t, err, ErrWrongOwner)
	require.NoError(t, d.Close())

	other := filepath.Join(dir, "other")
	require.NoError(t, os.Mkdir(other, 0o755))
	require.NoError(t, os.Chown(other, 65534, 65534))
	_, err = OpenDir(other, DirOptions{Owners: []uint32{0}})
	assert.ErrorIs(t, err, ErrWrongOwner)
	_, err = OpenDir(filepath.Join(other, "below"), DirOptions{Owners: []uint32{0}, Create: true, Perm: 0o755})
	assert.ErrorIs(t, err, ErrWrongOwner)
	_, err = os.Stat(filepath.Join(other, "below"))
	assert.ErrorIs(t, err, fs.ErrNotExist, "nothing made under a refused level")
}

// A directory others can write is refused; a symbolic link at any level
// is refused.
func TestOpenDirRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	require.NoError(t, os.Mkdir(open, 0o700))
	require.NoError(t, os.Chmod(open, 0o777))
	real := filepath.Join(dir, "real")
	require.NoError(t, os.MkdirAll(filepath.Join(real, "names"), 0o700))
	require.NoError(t, os.Symlink(real, filepath.Join(dir, "link")))
	require.NoError(t, os.Symlink(filepath.Join(real, "names"), filepath.Join(dir, "names")))
	for _, tc := range []struct {
		path string
		want error
	}{
		{open, ErrUnsafeDir},
		{filepath.Join(open, "x"), ErrUnsafeDir},
		{filepath.Join(dir, "link", "names"), ErrSymlink},
		{filepath.Join(dir, "names"), ErrSymlink},
	} {
		_, err := OpenDir(tc.path, DirOptions{Create: true, Perm: 0o700})
		assert.ErrorIs(t, err, tc.want, tc.path)
	}
	_, err := os.Stat(filepath.Join(open, "x"))
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

// Each new level is synced into its parent before the next is made.
func TestOpenDirCreatesDurablyLevelByLevel(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	c := &countingFS{syncs: map[string]int{}}
	path := filepath.Join(base, "a", "b", "c")
	d, err := OpenDir(path, DirOptions{Create: true, Perm: 0o700, FS: c})
	require.NoError(t, err)
	require.NoError(t, d.Close())
	assert.Equal(t, map[string]int{base: 1, filepath.Join(base, "a"): 1, filepath.Join(base, "a", "b"): 1}, c.syncs)
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o700), st.Mode().Perm())
	// Opening again creates and syncs nothing.
	d, err = OpenDir(path, DirOptions{Create: true, Perm: 0o700, FS: c})
	require.NoError(t, err)
	require.NoError(t, d.Close())
	assert.Len(t, c.syncs, 3)
}

// Create never replaces; Replace does; both leave no temporary file.
func TestCreateAndReplace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, err := OpenDir(dir, DirOptions{})
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.Create("f", []byte("one"), 0o644))
	assert.ErrorIs(t, d.Create("f", []byte("two"), 0o644), fs.ErrExist)
	b, _, err := d.ReadFile("f")
	require.NoError(t, err)
	assert.Equal(t, "one", string(b))
	require.NoError(t, d.Replace("f", []byte("three"), 0o644))
	b, _, err = d.ReadFile("f")
	require.NoError(t, err)
	assert.Equal(t, "three", string(b))
	require.NoError(t, d.Remove("f"))
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, ents)

	p := filepath.Join(dir, "g")
	require.NoError(t, CreateAtomically(OS{}, p, []byte("x"), 0o600))
	assert.ErrorIs(t, CreateAtomically(OS{}, p, []byte("y"), 0o600), fs.ErrExist)
	require.NoError(t, ReplaceAtomically(OS{}, p, []byte("z"), 0o600))
	b, n, err := ReadSmall(p, false)
	require.NoError(t, err)
	assert.Equal(t, "z", string(b))
	assert.EqualValues(t, 1, n)
}

// A held lock keeps Lock waiting only as long as ctx allows, and the error
// names the holder.
func TestLockBoundedByContext(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "lock")
	holder, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
	require.NoError(t, err)
	defer holder.Close()
	require.NoError(t, unix.Flock(int(holder.Fd()), unix.LOCK_EX))
	waiter, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	defer waiter.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = Lock(ctx, int(waiter.Fd()), p)
	assert.Less(t, time.Since(start), 2*time.Second)
	require.ErrorIs(t, err, ErrLocked)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "pid "+strconv.Itoa(os.Getpid()))
	require.NoError(t, unix.Flock(int(holder.Fd()), unix.LOCK_UN))
	require.NoError(t, Lock(context.Background(), int(waiter.Fd()), p))
	assert.True(t, errors.Is(unix.Flock(int(holder.Fd()), unix.LOCK_EX|unix.LOCK_NB), syscall.EWOULDBLOCK))
}

// A line of any length in the password database hides none after it.
func TestUsersLongLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "passwd")
	long := strings.Repeat("x", 70000)
	require.NoError(t, os.WriteFile(p, []byte("root:x:0:0:root:/root:/bin/sh\nlong:x:1000:1000:"+long+":/home/long:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin"), 0o644))
	t.Cleanup(SetUserDatabase(p, ""))
	us, err := UsersContext(context.Background())
	require.NoError(t, err)
	require.Len(t, us, 3)
	require.Equal(t, User{Name: "nobody", Uid: 65534, Home: "/nonexistent"}, us[2])
	require.Equal(t, "nobody", UserName(65534))
	require.Equal(t, "uid 4242", UserName(4242))
}
