package statefile

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The layer's security rules, each tried on its own: these tests are the
// layer's, not its callers'.

const other = testfs.OtherUID // a user other than the one running

// statOf opens path without following a link and returns its status
// taken on the descriptor.
func statOf(t *testing.T, path string) unix.Stat_t {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(fd, &st))
	return st
}

// CheckOwner trusts a file of the user running, and a file of its
// directory's owner only while no one else can write that directory;
// anything else is refused, naming the owner.
func TestCheckOwnerRule(t *testing.T) {
	t.Parallel()
	testfs.RequireRoot(t)
	base := t.TempDir()
	for _, tc := range []struct {
		name             string
		dirOwner         int
		dirMode          os.FileMode
		fileOwner        int
		trusted          bool
		explainsRejected string
	}{
		{"own file in own dir", 0, 0o755, 0, true, ""},
		{"own file in a dir of another user", other, 0o755, 0, true, ""},
		{"service file in the service's own dir", other, 0o750, other, true, ""},
		{"service file in the service's dir that its group can write", other, 0o770, other, false, "writable only by its owner"},
		{"service file in the service's dir that everyone can write", other, 0o777, other, false, "writable only by its owner"},
		{"service file in the service's sticky dir others can write", other, os.ModeSticky | 0o777, other, false, "writable only by its owner"},
		{"another user's file in root's dir", 0, 0o755, other, false, "nobody"},
		{"another user's file in root's sticky dir", 0, os.ModeSticky | 0o777, other, false, "nobody"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp(base, "d")
			require.NoError(t, err)
			require.NoError(t, os.Chown(dir, tc.dirOwner, tc.dirOwner))
			require.NoError(t, os.Chmod(dir, tc.dirMode))
			p := filepath.Join(dir, "f")
			require.NoError(t, os.WriteFile(p, []byte("x"), 0o600))
			require.NoError(t, os.Chown(p, tc.fileOwner, tc.fileOwner))
			err = CheckOwner(p, statOf(t, p))
			_, _, rerr := ReadSmallOwned(p, false)
			if tc.trusted {
				assert.NoError(t, err)
				assert.NoError(t, rerr)
				return
			}
			assert.ErrorIs(t, err, ErrWrongOwner)
			assert.ErrorIs(t, rerr, ErrWrongOwner, "ReadSmallOwned applies the rule")
			if err != nil {
				assert.Contains(t, err.Error(), tc.explainsRejected)
			}
		})
	}
}

// CheckRegular refuses, on the descriptor, what is not a regular file,
// a file of a user not listed, and a file with more than one name.
func TestCheckRegularRules(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o600))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	linked := filepath.Join(dir, "linked")
	require.NoError(t, os.WriteFile(linked, []byte("x"), 0o600))
	require.NoError(t, os.Link(linked, filepath.Join(dir, "second-name")))
	self := uint32(os.Geteuid())
	for _, tc := range []struct {
		name   string
		path   string
		owners []uint32
		want   error
	}{
		{"a regular file", file, nil, nil},
		{"a regular file of a listed owner", file, []uint32{self}, nil},
		{"a file of an owner not listed", file, []uint32{self + 1}, ErrWrongOwner},
		{"a FIFO", fifo, nil, ErrNotRegular},
		{"a directory", dir, nil, ErrNotRegular},
		{"a file with two names", linked, nil, ErrLinked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fd, err := unix.Open(tc.path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			require.NoError(t, err)
			defer unix.Close(fd)
			_, err = CheckRegular(fd, tc.owners...)
			if tc.want == nil {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, tc.want)
			}
		})
	}
}

// Every way the layer opens a file refuses a file with two names (a hard
// link another user could have made to a file of someone else's), and
// follows no symbolic link: reads, lock files, existing files, and the
// directory handle's reads.
func TestOpensRefuseLinks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	require.NoError(t, os.WriteFile(target, []byte("secret"), 0o600))
	require.NoError(t, os.Link(target, filepath.Join(dir, "hard")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "plain"), []byte("x"), 0o600))
	require.NoError(t, os.Symlink(filepath.Join(dir, "plain"), filepath.Join(dir, "sym")))
	d, err := OpenDir(dir, DirOptions{})
	require.NoError(t, err)
	defer d.Close()
	opens := map[string]func(name string) error{
		"ReadSmall": func(name string) error { _, _, err := ReadSmall(filepath.Join(dir, name), false); return err },
		"ReadSmallOwned": func(name string) error {
			_, _, err := ReadSmallOwned(filepath.Join(dir, name), false)
			return err
		},
		"Dir.ReadFile": func(name string) error { _, _, err := d.ReadFile(name); return err },
		"Dir.OpenLockFile": func(name string) error {
			f, err := d.OpenLockFile(name, 0o600)
			if err == nil {
				f.Close()
			}
			return err
		},
		"Dir.OpenExisting": func(name string) error {
			f, err := d.OpenExisting(name)
			if err == nil {
				f.Close()
			}
			return err
		},
	}
	for what, open := range opens {
		t.Run(what, func(t *testing.T) {
			assert.ErrorIs(t, open("hard"), ErrLinked, "a file with two names")
			assert.ErrorIs(t, open("sym"), ErrSymlink, "a symbolic link")
			assert.NoError(t, open("plain"))
		})
	}
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "secret", string(b))
}

// The files the layer makes have one name once made, and Create never
// replaces what is there.
func TestCreatedFilesHaveOneName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "a")
	require.NoError(t, CreateAtomically(OS{}, p, []byte("one"), 0o600))
	assert.EqualValues(t, 1, statOf(t, p).Nlink)
	assert.ErrorIs(t, CreateAtomically(OS{}, p, []byte("two"), 0o600), fs.ErrExist)
	d, err := OpenDir(dir, DirOptions{})
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.Create("b", []byte("one"), 0o644))
	assert.EqualValues(t, 1, statOf(t, filepath.Join(dir, "b")).Nlink)
	assert.ErrorIs(t, d.Create("b", []byte("two"), 0o644), fs.ErrExist)
	for _, name := range []string{"a", "b"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, "one", string(b), "Create replaced %s", name)
	}
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, ents, 2, "a temporary file was left")
}

// OpenDir refuses a directory others can write (a sticky one only with
// AllowSticky) and a level owned by a user not listed; CheckDirOwner
// refuses a counter's directory others can write without the sticky bit,
// and one of another user that holds no counter of that user's.
func TestDirRules(t *testing.T) {
	t.Parallel()
	testfs.RequireRoot(t)
	base := t.TempDir()
	mk := func(name string, owner int, mode os.FileMode) string {
		p := filepath.Join(base, name)
		require.NoError(t, os.Mkdir(p, 0o700))
		require.NoError(t, os.Chown(p, owner, owner))
		require.NoError(t, os.Chmod(p, mode))
		return p
	}
	open := mk("open", 0, 0o777)
	sticky := mk("sticky", 0, os.ModeSticky|0o777)
	others := mk("others", other, 0o755)
	mine := mk("mine", 0, 0o755)

	_, err := OpenDir(open, DirOptions{Owners: []uint32{0}, AllowSticky: true})
	assert.ErrorIs(t, err, ErrUnsafeDir, "writable by others, not sticky")
	_, err = OpenDir(sticky, DirOptions{Owners: []uint32{0}})
	assert.ErrorIs(t, err, ErrUnsafeDir, "sticky, without AllowSticky")
	d, err := OpenDir(sticky, DirOptions{Owners: []uint32{0}, AllowSticky: true})
	if assert.NoError(t, err, "sticky, with AllowSticky") {
		d.Close()
	}
	_, err = OpenDir(others, DirOptions{Owners: []uint32{0}})
	assert.ErrorIs(t, err, ErrWrongOwner)
	d, err = OpenDir(mine, DirOptions{Owners: []uint32{0}})
	if assert.NoError(t, err) {
		d.Close()
	}

	assert.ErrorIs(t, CheckDirOwner(filepath.Join(open, "c.u64")), ErrUnsafeDir)
	assert.NoError(t, CheckDirOwner(filepath.Join(sticky, "c.u64")))
	assert.ErrorIs(t, CheckDirOwner(filepath.Join(others, "c.u64")), ErrWrongOwner)
	assert.NoError(t, CheckDirOwner(filepath.Join(mine, "c.u64")))
	// Below a directory of another user: it could swap the levels.
	below := filepath.Join(others, "sub")
	require.NoError(t, os.Mkdir(below, 0o755))
	assert.ErrorIs(t, CheckDirOwner(filepath.Join(below, "c.u64")), ErrWrongOwner)
	// A counter of the directory's owner in it: that user's own state.
	c := filepath.Join(others, "c.u64")
	require.NoError(t, os.WriteFile(c, make([]byte, 8), 0o600))
	require.NoError(t, os.Chown(c, other, other))
	assert.NoError(t, CheckDirOwner(c))
}
