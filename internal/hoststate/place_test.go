package hoststate

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/snapid/snapid/internal/statefile"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func own() []uint32 { return []uint32{0, uint32(os.Geteuid())} }

func TestPlaceCreateReadWrite(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "lib", "records")
	_, err := OpenPlace(dir, PlaceOptions{Owners: own()})
	require.True(t, errors.Is(err, fs.ErrNotExist), "a missing place is an error: %v", err)

	p, err := OpenPlace(dir, PlaceOptions{Create: true, Mode: 0o1777, Owners: own()})
	require.NoError(t, err)
	defer p.Close()
	var st unix.Stat_t
	require.NoError(t, unix.Stat(dir, &st))
	require.Equal(t, uint32(0o1777), st.Mode&0o7777, "made sticky and writable by all, whatever the umask")

	_, ok, err := p.Read("vm1")
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, p.Create(Record{Name: "vm1", Dev: 1, Ino: 2, Path: "/c", Floor: 3, Mark: 3}, Perm{Mode: 0o644, UID: -1, GID: -1}))
	require.True(t, errors.Is(p.Create(Record{Name: "vm1"}, Perm{Mode: 0o644, UID: -1, GID: -1}), fs.ErrExist), "never replaced by Create")

	h, err := p.OpenHandle("vm1")
	require.NoError(t, err)
	defer h.Close()
	for i := uint64(4); i < 10; i++ {
		r := h.Record()
		r.Floor, r.Mark = i, i+1024
		require.NoError(t, h.Write(r))
		got, ok, err := p.Read("vm1")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, i, got.Floor)
		require.Equal(t, i-2, got.Gen, "a generation a write (1 at creation)")
	}
	recs, errs := p.All(func(n string) bool { return n[0] != '.' })
	require.Empty(t, errs)
	require.Len(t, recs, 1)
}

// Anything at a record's name that is not a whole record file is an
// error, never "no record": a damaged file, a directory, a FIFO (read
// without blocking), a symbolic link (never followed).
func TestPlaceRefusesWhatIsNotARecord(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "records")
	p, err := OpenPlace(dir, PlaceOptions{Create: true, Mode: 0o700, Owners: own()})
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "garbage"), make([]byte, FileSize), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "adir"), 0o755))
	require.NoError(t, unix.Mkfifo(filepath.Join(dir, "afifo"), 0o644))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(dir, "alink")))
	for _, n := range []string{"garbage", "adir", "afifo", "alink"} {
		_, ok, err := p.Read(n)
		require.Error(t, err, n)
		require.False(t, ok, n)
	}
	_, errs := p.All(func(n string) bool { return n[0] != '.' })
	require.Len(t, errs, 4)
}

// A place others can write without the sticky bit would let them replace
// records: refused.
func TestPlaceRefusesUnsafeDir(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "records")
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, os.Chmod(dir, 0o777))
	_, err := OpenPlace(dir, PlaceOptions{Owners: own()})
	require.True(t, errors.Is(err, statefile.ErrUnsafeDir), "%v", err)
	require.NoError(t, os.Chmod(dir, 0o777|os.ModeSticky))
	p, err := OpenPlace(dir, PlaceOptions{Owners: own()})
	require.NoError(t, err)
	p.Close()
}

// A write torn before its sync leaves the record's newest whole copy: the
// slot written is never the one the newest copy is in.
func TestHandleWritesTheOtherSlot(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "records")
	p, err := OpenPlace(dir, PlaceOptions{Create: true, Owners: own()})
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.Create(Record{Name: "vm1", Floor: 1}, Perm{Mode: 0o644, UID: -1, GID: -1}))
	h, err := p.OpenHandle("vm1")
	require.NoError(t, err)
	defer h.Close()
	r := h.Record()
	r.Floor = 2
	require.NoError(t, h.Write(r))
	// Tear the slot the next write would go to: the newest copy stays.
	b, err := os.ReadFile(filepath.Join(dir, "vm1"))
	require.NoError(t, err)
	next := 1 - h.slot
	for i := range SlotSize {
		b[next*SlotSize+i] = 0xee
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "vm1"), b, 0o644))
	got, ok, err := p.Read("vm1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, uint64(2), got.Floor)
}

// Unchanged tells, without decoding, whether the record is still what
// the handle last read or wrote: its own writes keep it so, another
// handle's write does not, and a read makes it so again. It allocates
// nothing.
func TestHandleUnchanged(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "records")
	p, err := OpenPlace(dir, PlaceOptions{Create: true, Owners: own()})
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.Create(Record{Name: "vm1", Floor: 1}, Perm{Mode: 0o644, UID: -1, GID: -1}))
	a, err := p.OpenHandle("vm1")
	require.NoError(t, err)
	defer a.Close()
	b, err := p.OpenHandle("vm1")
	require.NoError(t, err)
	defer b.Close()
	same := func(h *Handle) bool {
		t.Helper()
		ok, err := h.Unchanged()
		require.NoError(t, err)
		return ok
	}
	require.True(t, same(a))
	r := a.Record()
	r.Floor = 2
	require.NoError(t, a.Write(r))
	require.True(t, same(a), "its own write")
	require.False(t, same(b), "another handle's write")
	got, err := b.Read()
	require.NoError(t, err)
	require.Equal(t, uint64(2), got.Floor)
	require.True(t, same(b))
	require.Zero(t, testing.AllocsPerRun(100, func() { _, _ = a.Unchanged() }))
}

// Lookup reads a claim without making one.
func TestPlaceLookup(t *testing.T) {
	t.Parallel()
	p, err := OpenPlace(filepath.Join(t.TempDir(), "records"), PlaceOptions{Create: true, Owners: own()})
	require.NoError(t, err)
	defer p.Close()
	_, _, ok, err := p.Lookup("#stride")
	require.NoError(t, err)
	require.False(t, ok)
	_, err = os.Lstat(filepath.Join(p.Path(), "#stride"))
	require.ErrorIs(t, err, fs.ErrNotExist, "a lookup claims nothing")
	_, _, created, err := p.Claim("#stride", "10")
	require.NoError(t, err)
	require.True(t, created)
	v, owner, ok, err := p.Lookup("#stride")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "10", v)
	require.Equal(t, uint32(os.Geteuid()), owner)
}
