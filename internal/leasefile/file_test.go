package leasefile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/snapid/snapid/internal/counterfile"
	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/internal/leasefile"
	"github.com/stretchr/testify/require"
)

// openFile makes the lease file at path for node, seq and owner (with no
// ranges) and returns its File, whose floor is beside it.
func openFile(t *testing.T, path, node, seq, owner string) *leasefile.File {
	t.Helper()
	b, err := leasefile.Encode(&leasefile.Record{Node: node, Seq: seq, Owner: owner})
	require.NoError(t, err)
	if _, err := os.Stat(path); os.IsNotExist(err) {
		require.NoError(t, os.WriteFile(path, b, 0o600))
	}
	c, err := counterfile.Open(path, counterfile.Options{Sync: true})
	require.NoError(t, err)
	openFloor := func(p string) (*counterfile.File, error) {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, err
		}
		f.Close()
		return counterfile.Open(p, counterfile.Options{})
	}
	lf := leasefile.New(c, node, seq, owner, openFloor)
	t.Cleanup(func() { lf.Close() })
	require.NoError(t, lf.OpenFloor(path+".floor"))
	return lf
}

func TestFileStoreLoadAndFloor(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.seq.orders")
	lf := openFile(t, path, "web_1", "orders", "owner-a")
	require.NoError(t, lf.Lease().WithLock(func() error {
		l, err := lf.Load()
		require.NoError(t, err)
		require.Zero(t, l.Gen)
		_, ok, err := lf.LoadFloor()
		require.NoError(t, err)
		require.False(t, ok, "a new floor is empty")

		l.Cur = leasefile.Range{First: 1, Last: 10}
		l.Pos = 1
		require.NoError(t, lf.Store(&l))
		require.Equal(t, uint64(1), l.Gen, "Store writes one generation later")
		require.NoError(t, lf.StoreFloor(&l, false))
		require.NoError(t, lf.StorePos(5))
		l.Pos = 4
		require.NoError(t, lf.StoreFloor(&l, true))

		got, err := lf.Load()
		require.NoError(t, err)
		require.Equal(t, uint64(5), got.Pos)
		require.Equal(t, l.Cur, got.Cur)
		floor, ok, err := lf.LoadFloor()
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, uint64(4), floor.Pos)
		require.Equal(t, uint64(1), floor.Gen)
		return nil
	}))
	read, err := leasefile.Read(lf.Lease())
	require.NoError(t, err)
	require.Equal(t, uint64(5), read.Pos)
}

// A record of another owner, node name or sequence is refused, in the
// lease file and in its floor.
func TestFileRefusesAnotherFilesRecord(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, node, seq, owner string }{
		{"owner", "web_1", "orders", "owner-b"},
		{"node", "web_2", "orders", "owner-a"},
		{"sequence", "web_1", "invoices", "owner-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "c.seq.orders")
			other := openFile(t, path, tc.node, tc.seq, tc.owner)
			require.NoError(t, other.Lease().WithLock(func() error {
				l, err := other.Load()
				require.NoError(t, err)
				return other.StoreFloor(&l, false)
			}))
			c, err := counterfile.Open(path, counterfile.Options{})
			require.NoError(t, err)
			defer c.Close()
			lf := leasefile.New(c, "web_1", "orders", "owner-a", func(p string) (*counterfile.File, error) {
				return counterfile.Open(p, counterfile.Options{})
			})
			_, err = lf.Load()
			require.ErrorIs(t, err, errs.ErrCorruptLease)
			floor, err := counterfile.Open(path+".floor", counterfile.Options{})
			require.NoError(t, err)
			defer floor.Close()
			require.ErrorIs(t, lf.CheckFloor(floor), errs.ErrCorruptLease)
		})
	}
}

// A record at the last generation is not written again.
func TestFileStoreRefusesTheLastGeneration(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.seq.orders")
	lf := openFile(t, path, "web_1", "orders", "owner-a")
	l := leasefile.Record{Gen: leasefile.MaxGen}
	require.ErrorIs(t, lf.Store(&l), errs.ErrCorruptLease)
	got, err := lf.Load()
	require.NoError(t, err)
	require.Zero(t, got.Gen, "the refused record was not written")
}

// A floor replaced at its path is opened again: every process of the
// host reads and writes the same floor.
func TestFileFloorCurrentFollowsAReplacedFloor(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.seq.orders")
	lf := openFile(t, path, "web_1", "orders", "owner-a")
	l := leasefile.Record{Pos: 7}
	require.NoError(t, lf.StoreFloor(&l, false))
	require.NoError(t, os.Remove(path+".floor"))
	require.NoError(t, lf.FloorCurrent())
	_, ok, err := lf.LoadFloor()
	require.NoError(t, err)
	require.False(t, ok, "the new floor is empty")
	require.NoError(t, lf.StoreFloor(&l, false))
	b, err := os.ReadFile(path + ".floor")
	require.NoError(t, err)
	require.Len(t, b, leasefile.Size, "written at the path, not to the removed file")
}
