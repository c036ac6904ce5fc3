package powerfs

import (
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// mountT mounts a powerfs for t and unmounts it at the end. Without FUSE
// the test fails in CI (CI=true) and is skipped elsewhere.
func mountT(t *testing.T) *FS {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (the power-loss tests need /dev/fuse and root)", err)
		}
		t.Skipf("%v (the power-loss tests need /dev/fuse and root)", err)
	}
	mnt := filepath.Join(t.TempDir(), "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	f, err := Mount(mnt, t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return f
}

// writeFile writes path (created or truncated), syncing it if sync.
func writeFile(t *testing.T, path, content string, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	require.NoError(t, err)
	_, err = f.WriteString(content)
	require.NoError(t, err)
	if sync {
		require.NoError(t, f.Sync())
	}
	require.NoError(t, f.Close())
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	require.NoError(t, err)
	require.NoError(t, d.Sync())
	require.NoError(t, d.Close())
}

// read returns the content of path, or "<absent>".
func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "<absent>"
	}
	require.NoError(t, err)
	return string(b)
}

func cut(t *testing.T, f *FS) {
	t.Helper()
	require.NoError(t, f.PowerCut(ForgetAll, nil, nil))
}

// TestForgetsUnsyncedContent: a power cut keeps the content of the last
// sync of each file and forgets later writes; a file whose name was never
// synced in its directory is gone, even if its content was synced; a name
// synced to a file never synced is an empty file.
func TestForgetsUnsyncedContent(t *testing.T) {
	f := mountT(t)
	d := f.Dir()
	writeFile(t, filepath.Join(d, "synced"), "one", true)
	writeFile(t, filepath.Join(d, "never-synced"), "lost", false)
	syncDir(t, d)
	writeFile(t, filepath.Join(d, "synced"), "two, not synced", false)
	writeFile(t, filepath.Join(d, "name-not-synced"), "content synced", true)

	// Before the cut, everything is there.
	require.Equal(t, "two, not synced", read(t, filepath.Join(d, "synced")))
	require.Equal(t, "content synced", read(t, filepath.Join(d, "name-not-synced")))

	cut(t, f)
	require.Equal(t, "one", read(t, filepath.Join(d, "synced")))
	require.Equal(t, "", read(t, filepath.Join(d, "never-synced")))
	require.Equal(t, "<absent>", read(t, filepath.Join(d, "name-not-synced")))

	// What survived a cut is durable: it survives the next one.
	cut(t, f)
	require.Equal(t, "one", read(t, filepath.Join(d, "synced")))
	require.Equal(t, 2, f.Cuts())
}

// TestDirectoryEntries: links, renames and removals are durable only
// after their directory is synced; before that a cut brings back the old
// names, with the content of the files they named.
func TestDirectoryEntries(t *testing.T) {
	f := mountT(t)
	d := f.Dir()
	p := func(n string) string { return filepath.Join(d, n) }
	writeFile(t, p("a"), "A", true)
	writeFile(t, p("b"), "B", true)
	writeFile(t, p("c"), "C", true)
	require.NoError(t, os.Mkdir(p("sub"), 0o755))
	syncDir(t, d)

	require.NoError(t, os.Link(p("a"), p("a2")))
	require.NoError(t, os.Rename(p("b"), p("b2")))
	require.NoError(t, os.Remove(p("c")))
	writeFile(t, p("sub/x"), "X", true) // sub itself is not synced
	cut(t, f)
	require.Equal(t, "A", read(t, p("a")))
	require.Equal(t, "<absent>", read(t, p("a2")))
	require.Equal(t, "B", read(t, p("b")))
	require.Equal(t, "<absent>", read(t, p("b2")))
	require.Equal(t, "C", read(t, p("c")), "a removal not synced is undone")
	require.Equal(t, "<absent>", read(t, p("sub/x")))

	require.NoError(t, os.Link(p("a"), p("a2")))
	require.NoError(t, os.Rename(p("b"), p("b2")))
	require.NoError(t, os.Remove(p("c")))
	writeFile(t, p("sub/x"), "X", true)
	syncDir(t, d)
	syncDir(t, p("sub"))
	cut(t, f)
	require.Equal(t, "A", read(t, p("a")))
	require.Equal(t, "A", read(t, p("a2")))
	require.Equal(t, "<absent>", read(t, p("b")))
	require.Equal(t, "B", read(t, p("b2")))
	require.Equal(t, "<absent>", read(t, p("c")))
	require.Equal(t, "X", read(t, p("sub/x")))
	// a and a2 are one file again.
	var s1, s2 syscall.Stat_t
	require.NoError(t, syscall.Stat(p("a"), &s1))
	require.NoError(t, syscall.Stat(p("a2"), &s2))
	require.Equal(t, s1.Ino, s2.Ino)
	require.EqualValues(t, 2, s1.Nlink)
}

// TestSyncVariants: fdatasync, and writes through O_SYNC and O_DSYNC
// descriptors, are durable; an 8-byte in-place rewrite that is not synced
// is lost whole.
func TestSyncVariants(t *testing.T) {
	f := mountT(t)
	d := f.Dir()
	p := func(n string) string { return filepath.Join(d, n) }
	for _, n := range []string{"fdatasync", "osync", "odsync", "inplace"} {
		writeFile(t, p(n), "00000000", true)
	}
	syncDir(t, d)

	fd, err := syscall.Open(p("fdatasync"), syscall.O_RDWR, 0)
	require.NoError(t, err)
	_, err = syscall.Pwrite(fd, []byte("11111111"), 0)
	require.NoError(t, err)
	require.NoError(t, syscall.Fdatasync(fd))
	require.NoError(t, syscall.Close(fd))
	for n, fl := range map[string]int{"osync": syscall.O_SYNC, "odsync": syscall.O_DSYNC} {
		h, err := os.OpenFile(p(n), os.O_RDWR|fl, 0)
		require.NoError(t, err)
		_, err = h.WriteAt([]byte("22222222"), 0)
		require.NoError(t, err)
		require.NoError(t, h.Close())
	}
	h, err := os.OpenFile(p("inplace"), os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = h.WriteAt([]byte("33333333"), 0)
	require.NoError(t, err)
	require.NoError(t, h.Close())

	cut(t, f)
	require.Equal(t, "11111111", read(t, p("fdatasync")))
	require.Equal(t, "22222222", read(t, p("osync")))
	require.Equal(t, "22222222", read(t, p("odsync")))
	require.Equal(t, "00000000", read(t, p("inplace")))
}

// TestCutStopsSyncs: once the power is cut, a process still running gets
// EIO from every sync and write, and nothing it does is kept.
func TestCutStopsSyncs(t *testing.T) {
	f := mountT(t)
	p := filepath.Join(f.Dir(), "x")
	writeFile(t, p, "before", true)
	syncDir(t, f.Dir())
	h, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	var writeErr, syncErr, createErr error
	require.NoError(t, f.PowerCut(ForgetAll, nil, func() {
		_, writeErr = h.WriteAt([]byte("after!"), 0)
		syncErr = h.Sync()
		_, createErr = os.Create(filepath.Join(f.Dir(), "y"))
		h.Close()
	}))
	require.ErrorIs(t, writeErr, syscall.EIO)
	require.ErrorIs(t, syncErr, syscall.EIO)
	require.ErrorIs(t, createErr, syscall.EIO)
	require.Equal(t, "before", read(t, p))
	require.Equal(t, "<absent>", read(t, filepath.Join(f.Dir(), "y")))
}

// TestKeepSome: with KeepSome, cuts keep a file's unsynced content or its
// synced content, and a directory's unsynced entries or its synced ones,
// each sometimes, never anything else.
func TestKeepSome(t *testing.T) {
	f := mountT(t)
	d := f.Dir()
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[string]int{}
	for i := range 24 {
		writeFile(t, filepath.Join(d, "f"), "synced", true)
		syncDir(t, d)
		writeFile(t, filepath.Join(d, "f"), "unsynced", false)
		writeFile(t, filepath.Join(d, "new"), "n", true)
		require.NoError(t, f.PowerCut(KeepSome, rng, nil))
		got := read(t, filepath.Join(d, "f")) + "/" + read(t, filepath.Join(d, "new"))
		seen[got]++
		if err := os.Remove(filepath.Join(d, "new")); !errors.Is(err, os.ErrNotExist) {
			require.NoError(t, err, "cut %d", i)
		}
	}
	require.Len(t, seen, 4, "every combination appears: %v", seen)
	for k := range seen {
		require.Contains(t, []string{"synced/<absent>", "unsynced/<absent>", "synced/n", "unsynced/n"}, k)
	}
}

// TestFaults: injected EIO from fsync (the content is then not durable),
// ENOSPC from a write, and a short write.
func TestFaults(t *testing.T) {
	f := mountT(t)
	d := f.Dir()
	p := filepath.Join(d, "file")
	writeFile(t, p, "aaaaaaaa", true)
	syncDir(t, d)
	h, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	defer h.Close()

	f.Inject(Fault{Op: OpSync, Name: "other", Err: syscall.EIO})
	f.Inject(Fault{Op: OpSync, Name: "file", Err: syscall.EIO, Times: 1})
	_, err = h.WriteAt([]byte("bbbbbbbb"), 0)
	require.NoError(t, err)
	require.ErrorIs(t, h.Sync(), syscall.EIO)
	require.ErrorIs(t, syscall.Fdatasync(int(h.Fd())), nil, "Times: 1 fails once")

	f.Inject(Fault{Op: OpWrite, Name: "file", Err: syscall.ENOSPC, Times: 1})
	_, err = h.WriteAt([]byte("cccccccc"), 0)
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.Equal(t, "bbbbbbbb", read(t, p), "a failed write writes nothing")

	f.Inject(Fault{Op: OpWrite, Name: "file", Short: 3, Times: 1})
	n, err := syscall.Pwrite(int(h.Fd()), []byte("dddddddd"), 0)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, "dddbbbbb", read(t, p))
	f.Clear()
	_, err = io.WriteString(h, "")
	require.NoError(t, err)

	// The failed sync made nothing durable; the one after it did.
	f.Inject(Fault{Op: OpSync, Err: syscall.EIO})
	_, err = h.WriteAt([]byte("eeeeeeee"), 0)
	require.NoError(t, err)
	require.ErrorIs(t, h.Sync(), syscall.EIO)
	require.NoError(t, h.Close())
	cut(t, f)
	require.Equal(t, "bbbbbbbb", read(t, p))
}

// TestSyncWriteOnly: a file opened write-only can be synced, and its
// content is kept.
func TestSyncWriteOnly(t *testing.T) {
	f := mountT(t)
	p := filepath.Join(f.Dir(), "w")
	h, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o600)
	require.NoError(t, err)
	_, err = h.WriteString("written")
	require.NoError(t, err)
	require.NoError(t, h.Sync())
	require.NoError(t, h.Close())
	syncDir(t, f.Dir())
	cut(t, f)
	require.Equal(t, "written", read(t, p))
}
