package powerfs_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/powerfs"
	"github.com/stretchr/testify/require"
)

// newDir makes a durable directory for one case on the mount.
func newDir(t *testing.T, f *powerfs.FS, name string) string {
	t.Helper()
	dir := filepath.Join(f.Dir(), name)
	require.NoError(t, os.Mkdir(dir, 0o755))
	syncDir(t, f.Dir())
	return dir
}

// TestFailedUpdate: a counter update whose fdatasync fails (EIO), whose
// write fails (ENOSPC), or whose write is short, returns no number and an
// error that says what failed on which file; the next call returns a
// number above every number returned before; and a power cut after the
// failure loses none of the numbers returned.
func TestFailedUpdate(t *testing.T) {
	f := mount(t)
	cases := []struct {
		name  string
		fault powerfs.Fault
		op    string // FileError.Op
		want  error
		block uint64
	}{
		{"fdatasync EIO", powerfs.Fault{Op: powerfs.OpSync, Name: "counter.u64", Err: syscall.EIO}, "sync", syscall.EIO, 0},
		{"fdatasync EIO block", powerfs.Fault{Op: powerfs.OpSync, Name: "counter.u64", Err: syscall.EIO}, "sync", syscall.EIO, 10},
		{"write ENOSPC", powerfs.Fault{Op: powerfs.OpWrite, Name: "counter.u64", Err: syscall.ENOSPC}, "write", syscall.ENOSPC, 0},
		{"write ENOSPC block", powerfs.Fault{Op: powerfs.OpWrite, Name: "counter.u64", Err: syscall.ENOSPC}, "write", syscall.ENOSPC, 10},
		// A short write is followed by a rewrite of the whole value (which
		// works): the call fails, the next one works.
		{"short write", powerfs.Fault{Op: powerfs.OpWrite, Name: "counter.u64", Short: 3, Times: 1}, "write", io.ErrShortWrite, 0},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(newDir(t, f, fmt.Sprintf("u%d", i)), "counter.u64")
			var cfg snapid.Config
			if c.block > 0 {
				cfg.Block = &snapid.Block{Size: c.block}
			}
			cfg.BindingDir = bootPlace(t)
			g, err := snapid.Open(path, "faults", cfg)
			require.NoError(t, err)
			t.Cleanup(func() { g.Close() }) // before the unmount, if the test fails
			var got []uint64
			for range 25 {
				n, err := g.Next()
				require.NoError(t, err)
				got = append(got, n)
			}
			last := got[len(got)-1]

			// Until the disk works again, calls fail (in block mode once
			// the block in memory is used up) and return no number.
			f.Inject(c.fault)
			var failed error
			for range 3 * int(max(c.block, 1)) {
				n, err := g.Next()
				if err != nil {
					failed = err
					break
				}
				require.Greater(t, n, last)
				got, last = append(got, n), n
			}
			require.Error(t, failed, "a call failed while the disk failed")
			require.ErrorIs(t, failed, c.want)
			var fe *snapid.FileError
			require.True(t, errors.As(failed, &fe), "%v", failed)
			require.Equal(t, c.op, fe.Op)
			require.Equal(t, path, fe.Path)
			require.Contains(t, failed.Error(), path)
			if c.fault.Times == 0 {
				_, err = g.Next()
				require.ErrorIs(t, err, c.want, "the next call fails too while the disk fails")
			}
			f.Clear()

			n, err := g.Next()
			require.NoError(t, err)
			require.Greater(t, n, last, "the next number is above every number returned")
			if c.want == syscall.EIO && c.block == 0 {
				// The failed updates wrote their numbers, unsynced:
				// those are skipped, never returned.
				require.Greater(t, n, last+1)
			}
			require.NoError(t, g.Close())

			// The power goes: nothing returned is lost.
			require.NoError(t, f.PowerCut(powerfs.ForgetAll, nil, nil))
			v, err := admin.ReadCounter(path)
			require.NoError(t, err)
			require.GreaterOrEqual(t, v, n)
			cfg.BindingDir = bootPlace(t)
			g, err = snapid.Open(path, "faults", cfg) // after the cut
			require.NoError(t, err)
			m, err := g.Next()
			require.NoError(t, err)
			require.Greater(t, m, n)
			require.NoError(t, g.Close())
		})
	}
}

// TestFailedCreation: creating a counter whose temporary file's fsync
// fails, or whose directory fsync fails, fails Open with an error that
// says so. A later Open that succeeds makes the counter durable: after a
// power cut the numbers it returned are not returned again.
func TestFailedCreation(t *testing.T) {
	f := mount(t)
	cases := []struct {
		name  string
		fault powerfs.Fault
	}{
		{"file fsync", powerfs.Fault{Op: powerfs.OpSync, Name: ".counter.u64.tmp-*", Err: syscall.EIO, Times: 1}},
		{"directory fsync", powerfs.Fault{Op: powerfs.OpSyncDir, Name: "d*", Err: syscall.EIO, Times: 1}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := newDir(t, f, fmt.Sprintf("d%d", i))
			path := filepath.Join(dir, "counter.u64")
			records := snapid.Config{BindingDir: bootPlace(t)}
			f.Inject(c.fault)
			_, err := snapid.Open(path, "faults", records)
			f.Clear()
			require.ErrorIs(t, err, syscall.EIO)
			require.Contains(t, err.Error(), path)

			g, err := snapid.Open(path, "faults", records)
			require.NoError(t, err)
			t.Cleanup(func() { g.Close() })
			var last uint64
			for range 10 {
				last, err = g.Next()
				require.NoError(t, err)
			}
			require.NoError(t, g.Close())
			require.NoError(t, f.PowerCut(powerfs.ForgetAll, nil, nil))
			g, err = snapid.Open(path, "faults", snapid.Config{BindingDir: bootPlace(t)}) // after the cut
			require.NoError(t, err)
			n, err := g.Next()
			require.NoError(t, err)
			require.Greater(t, n, last, "a number returned before the cut came again")
			require.NoError(t, g.Close())
		})
	}
}
