package hoststate

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/snapid/snapid/internal/errs"
	"github.com/stretchr/testify/require"
)

// newHold makes the record of vm1 (holding r) in a place of its own and
// returns a hold on it for the counter of device 1, inode 2, its mark
// 100 ahead, entered, and a second handle on the record.
func newHold(t *testing.T, r Record) (*Hold, *Handle) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "records")
	p, err := OpenPlace(dir, PlaceOptions{Create: true, Owners: own()})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	r.Name, r.Dev, r.Ino = "vm1", 1, 2
	require.NoError(t, p.Create(r, Perm{Mode: 0o644, UID: -1, GID: -1}))
	h, err := p.OpenHandle("vm1")
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	other, err := p.OpenHandle("vm1")
	require.NoError(t, err)
	t.Cleanup(func() { other.Close() })
	hd := NewHold(h, 1, 2, 100)
	first, err := hd.Enter(context.Background())
	require.NoError(t, err)
	require.True(t, first)
	return hd, other
}

func read(t *testing.T, h *Handle) Record {
	t.Helper()
	r, err := h.Read()
	require.NoError(t, err)
	return r
}

// Cover writes the record only when the counter passes the mark this
// process last wrote, and then a step ahead, with the floor at what the
// process synced.
func TestHoldCoverWritesOncePerStep(t *testing.T) {
	t.Parallel()
	hd, other := newHold(t, Record{})
	require.True(t, hd.Due(1), "nothing written yet")
	require.NoError(t, hd.Cover(0, 0, 1))
	r := read(t, other)
	require.Equal(t, uint64(100), r.Mark)
	gen := r.Gen
	require.False(t, hd.Due(100))
	require.NoError(t, hd.Cover(50, 60, 100))
	require.Equal(t, gen, read(t, other).Gen, "covered: no write")
	require.True(t, hd.Due(101))
	require.NoError(t, hd.Cover(90, 100, 101))
	r = read(t, other)
	require.Equal(t, uint64(200), r.Mark)
	require.Equal(t, uint64(90), r.Floor)
}

// A record that names another counter, or a released name, is never
// covered: nothing above the mark is handed out.
func TestHoldCoverRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(r *Record)
		want error
	}{
		{"another counter", func(r *Record) { r.Ino = 3 }, errs.ErrNameBound},
		{"released", func(r *Record) { r.Released = true }, errs.ErrReleased},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hd, other := newHold(t, Record{})
			r := read(t, other)
			tc.edit(&r)
			require.NoError(t, other.Write(r))
			require.ErrorIs(t, hd.Cover(0, 0, 1), tc.want)
		})
	}
}

// A mark lowered under the process (a Repair) lowers the mark it trusts:
// its next update writes the record again before going past it.
func TestHoldCheckFollowsALoweredMark(t *testing.T) {
	t.Parallel()
	hd, other := newHold(t, Record{})
	require.NoError(t, hd.Cover(0, 0, 1))
	require.False(t, hd.Due(50))
	r := read(t, other)
	r.Mark = 10
	require.NoError(t, other.Write(r))
	raise, err := hd.Check(20, nil)
	require.NoError(t, err)
	require.Zero(t, raise)
	require.True(t, hd.Due(50), "the lowered mark no longer covers 50")
}

// A counter below the record's floor is raised to the record's mark; the
// check given refuses the update first.
func TestHoldCheckBelowTheFloor(t *testing.T) {
	t.Parallel()
	hd, _ := newHold(t, Record{Floor: 40, Mark: 70})
	raise, err := hd.Check(39, nil)
	require.NoError(t, err)
	require.Equal(t, uint64(70), raise)
	raise, err = hd.Check(40, nil)
	require.NoError(t, err)
	require.Zero(t, raise)
	refused := errors.New("refused")
	_, err = hd.Check(39, func(Record) error { return refused })
	require.ErrorIs(t, err, refused)
}

// Update writes only what fn asks for, and the mark written becomes the
// one the process trusts.
func TestHoldUpdate(t *testing.T) {
	t.Parallel()
	hd, other := newHold(t, Record{Mark: 5})
	gen := read(t, other).Gen
	require.NoError(t, hd.Update(context.Background(), func(r *Record) (bool, error) {
		r.Mark = 999
		return false, nil
	}))
	require.Equal(t, gen, read(t, other).Gen, "not asked to write")
	require.NoError(t, hd.Update(context.Background(), func(r *Record) (bool, error) {
		r.Mark = 300
		return true, nil
	}))
	require.Equal(t, uint64(300), read(t, other).Mark)
	require.False(t, hd.Due(300), "the mark written is trusted")
	require.NoError(t, hd.RaiseFloor(400))
	r := read(t, other)
	require.Equal(t, uint64(400), r.Floor)
	require.Equal(t, uint64(400), r.Mark)
}

// The last present process is the one whose exclusive try succeeds.
func TestHoldLast(t *testing.T) {
	t.Parallel()
	hd, _ := newHold(t, Record{})
	require.True(t, hd.Last())
	fresh := NewHold(hd.Handle(), 1, 2, 100)
	require.False(t, fresh.Last(), "never present")
}

// A record removed (or moved away) after its handle was opened is not
// entered: it is no longer the one every program of the name meets at.
func TestHoldEnterRefusesAnUnlinkedRecord(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "records")
	p, err := OpenPlace(dir, PlaceOptions{Create: true, Owners: own()})
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.Create(Record{Name: "vm1"}, Perm{Mode: 0o644, UID: -1, GID: -1}))
	h, err := p.OpenHandle("vm1")
	require.NoError(t, err)
	defer h.Close()
	require.NoError(t, p.Remove("vm1"))
	_, err = NewHold(h, 1, 2, 100).Enter(context.Background())
	require.ErrorIs(t, err, errs.ErrInUse)
}
