package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	. "github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hookRegistry is an in-memory registry that counts claims and can hold
// one: with hold set, the next Claim announces itself on entered and
// waits for proceed before it is made.
type hookRegistry struct {
	*registrytest.Registry
	claims  atomic.Int32
	hold    bool // hold the next claim
	held    atomic.Bool
	entered chan struct{}
	proceed chan struct{}
}

func newHookRegistry() *hookRegistry {
	h := &hookRegistry{Registry: registrytest.NewRegistry(), entered: make(chan struct{}), proceed: make(chan struct{})}
	h.SetHook(func(_ context.Context, op, _ string) error {
		if op != "claim" {
			return nil
		}
		h.claims.Add(1)
		if h.hold && h.held.CompareAndSwap(false, true) {
			close(h.entered)
			<-h.proceed
		}
		return nil
	})
	return h
}

// holdByOther makes name held, active, by another host's owner.
func holdByOther(t *testing.T, reg registry.Registry, name string) {
	t.Helper()
	_, err := reg.Claim(context.Background(), registry.Claim{Name: name, Owner: strings.Repeat("b", 32), Hostname: "host2", MachineID: "m2"})
	require.NoError(t, err)
}

// A claim refused while programs without a registry use the counter this
// Open created (present on the name's record, or having issued from it)
// leaves the counter, and what they issued from it, alone.
func TestRefusedClaimKeepsCounterInUse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		meanwhile func(t *testing.T, path string) // runs while the claim is pending
		wantNext  uint64
	}{
		{"standalone generator", func(t *testing.T, path string) {
			g, err := Open(path, "web_1")
			require.NoError(t, err)
			for i := uint64(1); i <= 3; i++ {
				id, err := g.UniqueID()
				require.NoError(t, err)
				assert.Equal(t, fmt.Sprintf("web_1-%d", i), id)
			}
			require.NoError(t, g.Close())
		}, 4},
		{"standalone generator open, nothing issued yet", func(t *testing.T, path string) {
			g, err := Open(path, "web_1")
			require.NoError(t, err)
			t.Cleanup(func() { g.Close() })
		}, 1},
		{"Init", func(t *testing.T, path string) {
			before, err := Init(path, 1000)
			require.NoError(t, err)
			assert.Equal(t, uint64(0), before, "the pending Open created the counter")
		}, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, path := ctPath(t)
			reg := newHookRegistry()
			holdByOther(t, reg.Registry, "web_1")
			reg.hold = true
			done := make(chan error, 1)
			go func() {
				g, err := Open(path, "web_1", WithRegistry(reg), WithHostInfo(HostInfo{Hostname: "host1", MachineID: "m1"}))
				if err == nil {
					g.Close()
				}
				done <- err
			}()
			<-reg.entered
			tc.meanwhile(t, path)
			close(reg.proceed)
			err := <-done
			require.ErrorIs(t, err, ErrNameTaken)

			require.FileExists(t, path, "the refused claim must not remove a counter others use")
			g, err := Open(path, "web_1")
			require.NoError(t, err)
			defer g.Close()
			v, err := g.Next()
			require.NoError(t, err)
			assert.Equal(t, tc.wantNext, v, "the next standalone number continues above those issued")
		})
	}
}

// A first Open the registry refuses leaves the disk as it found it: the
// counter, the host's record of the name and the files beside the
// counter it made are removed, and what was there before stays as it
// was. A claim that may have been made (the registry not answering)
// keeps everything.
func TestRefusedFirstOpenLeavesDiskAsFound(t *testing.T) {
	t.Parallel()
	all := []string{"", ExportOwnerSuffix, ExportMarkSuffix, ExportPresenceSuffix}
	for _, tc := range []struct {
		name   string
		before func(t *testing.T, path string) // what is on disk before the Open
		down   bool                            // the registry does not answer
		want   error
		kept   []string // suffixes of the counter's path that stay (only those)
	}{
		{"nothing there", nil, false, ErrNameTaken, nil},
		{"files beside an earlier counter", func(t *testing.T, path string) {
			for _, f := range []struct{ suffix, content string }{
				{ExportOwnerSuffix, strings.Repeat("c", 32) + "\n"}, {ExportPresenceSuffix, ""},
			} {
				require.NoError(t, os.WriteFile(path+f.suffix, []byte(f.content), 0o600))
			}
		}, false, ErrNameTaken, []string{ExportOwnerSuffix, ExportPresenceSuffix}},
		{"a counter there before", func(t *testing.T, path string) {
			b := EncodeCounter(0)
			require.NoError(t, os.WriteFile(path, b[:], 0o600))
		}, false, ErrNameTaken, []string{""}},
		{"the registry not answering", nil, true, ErrRegistry, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, path := ctPath(t)
			reg := registrytest.NewRegistry()
			holdByOther(t, reg, "web_1")
			if tc.before != nil {
				tc.before(t, path)
			}
			contents := map[string][]byte{}
			for _, e := range dirNames(t, dir) {
				b, err := os.ReadFile(filepath.Join(dir, e))
				require.NoError(t, err)
				contents[e] = b
			}
			reg.SetDown(tc.down)
			_, err := openAs(path, "web_1", reg, WithRegistryTimeout(time.Second))
			require.ErrorIs(t, err, tc.want)

			var want []string
			for _, suffix := range tc.kept {
				want = append(want, filepath.Base(path+suffix))
			}
			slices.Sort(want)
			assert.Equal(t, want, dirNames(t, dir), "what stays beside the counter")
			for name, b := range contents {
				got, err := os.ReadFile(filepath.Join(dir, name))
				require.NoError(t, err, "%s was there before", name)
				assert.Equal(t, b, got, "%s was there before: left as it was", name)
			}
			_, err = os.Lstat(filepath.Join(ExportTestBindingDir(path), "web_1"))
			if tc.down {
				require.NoError(t, err, "a claim that may have been made keeps the record of the name")
				return
			}
			require.ErrorIs(t, err, fs.ErrNotExist, "the refused Open's record of the name is removed")

			// Nothing the refused Open made stands in the way of the name
			// once it is free.
			require.NoError(t, reg.Release(context.Background(), "web_1", strings.Repeat("b", 32), 0))
			g, err := openAs(path, "web_1", reg)
			require.NoError(t, err)
			assert.Equal(t, []uint64{1}, draw(t, g, 1))
			require.NoError(t, g.Close())
		})
	}
}

// openAs opens path under name with reg, as a process on host1.
func openAs(path, name string, reg registry.Registry, opts ...Option) (*Generator, error) {
	return Open(path, name, append([]Option{WithRegistry(reg), WithSync(false),
		WithHostInfo(HostInfo{Hostname: "host1", MachineID: "m1"})}, opts...)...)
}

// A process cannot join its host's claim under another name, with the
// registry up or down.
func TestJoinUnderAnotherNameRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		other string // the name the second process asks for
		down  bool
	}{
		{"registry up, name not registered", "web_e", false},
		{"registry up, name held by another host", "web_b", false},
		{"registry down, name held by another host", "web_b", true},
		{"registry down, name not registered", "web_e", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, path := ctPath(t)
			reg := registrytest.NewRegistry()
			holdByOther(t, reg, "web_b")
			first, err := openAs(path, "web_a", reg, WithReserveStep(100), WithOutageHorizon(0))
			require.NoError(t, err)
			defer first.Close()
			assert.Equal(t, []uint64{1, 2, 3}, draw(t, first, 3))
			reg.SetDown(tc.down)

			g, err := openAs(path, tc.other, reg)
			if g != nil {
				g.Close()
			}
			require.ErrorIs(t, err, ErrNameMismatch)
			assert.Nil(t, g)
			assert.Contains(t, err.Error(), `holds the name "web_a"`, "the error says which name the counter is in use under")
			assert.Contains(t, err.Error(), tc.other)
			assert.Equal(t, uint64(3), ctValue(t, path), "nothing was issued under the other name")

			reg.SetDown(false)
			assert.Equal(t, []uint64{4}, draw(t, first, 1), "the host's process goes on")
			joiner, err := openAs(path, "web_a", reg)
			require.NoError(t, err, "the right name still joins")
			require.NoError(t, joiner.Close())
		})
	}
}

// The session file records the name and owner token with the session; a
// joining process refuses one in another format, or for another owner.
func TestSessionFileFormat(t *testing.T) {
	t.Parallel()
	_, path := ctPath(t)
	reg := registrytest.NewRegistry()
	first, err := openAs(path, "web_a", reg)
	require.NoError(t, err)
	defer first.Close()
	owner, err := OwnerToken(path)
	require.NoError(t, err)
	h, _ := reg.Row("web_a")
	good := fmt.Sprintf("snapid-session 2\nname web_a\nowner %s\nsession %s\n", owner, h.Session)
	b, err := os.ReadFile(path + ExportSessionSuffix)
	require.NoError(t, err)
	require.Equal(t, good, string(b))

	for _, tc := range []struct {
		name    string
		content string
		want    string
	}{
		{"earlier version", h.Session + "\n", "earlier version"},
		{"empty", "", "newline"},
		{"no final newline", strings.TrimSuffix(good, "\n"), "newline"},
		{"unknown header", strings.Replace(good, "snapid-session 2", "snapid-session 3", 1), "first line"},
		{"missing line", strings.Replace(good, "name web_a\n", "", 1), "3 lines"},
		{"lines swapped", fmt.Sprintf("snapid-session 2\nowner %s\nname web_a\nsession %s\n", owner, h.Session), `"name "`},
		{"empty session", strings.Replace(good, "session "+h.Session, "session ", 1), `"session "`},
		{"invalid name", strings.Replace(good, "name web_a", "name Web-A", 1), "invalid node name"},
		{"invalid owner", strings.Replace(good, owner, "xyz", 1), "invalid owner token"},
		{"another owner", strings.Replace(good, owner, strings.Repeat("c", 32), 1), "not of this counter's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(path+ExportSessionSuffix, []byte(tc.content), 0o600))
			g, err := openAs(path, "web_a", reg)
			if g != nil {
				g.Close()
			}
			requireCorruptFile(t, err, ExportSessionSuffix)
			require.ErrorIs(t, err, ErrCorrupt)
			assert.Contains(t, err.Error(), path+": counter.u64"+ExportSessionSuffix+":", "the counter named, the session file beside it as detail")
			assert.Contains(t, err.Error(), "corrupt session file")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// The first process of a host replaces the session file without reading
// it: a file of an earlier version does not stop an upgrade.
func TestFirstProcessReplacesOldSessionFile(t *testing.T) {
	t.Parallel()
	_, path := ctPath(t)
	reg := registrytest.NewRegistry()
	require.NoError(t, os.WriteFile(path+ExportSessionSuffix, []byte("session-0\n"), 0o600))
	g, err := openAs(path, "web_a", reg)
	require.NoError(t, err)
	defer g.Close()
	b, err := os.ReadFile(path + ExportSessionSuffix)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(b), "snapid-session 2\nname web_a\n"), "%q", b)
	joiner, err := openAs(path, "web_a", reg)
	require.NoError(t, err)
	require.NoError(t, joiner.Close())
}

// A corrupt file beside the counter is refused before anything is written,
// on disk or in the registry, with its own error and its real size.
func TestCorruptHostFileRefusedBeforeClaim(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		spoil   func(t *testing.T, path string)
		file    string // the suffix of the file the error names
		message []string
	}{
		{"mark too long", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path+ExportMarkSuffix, make([]byte, 20), 0o600))
		}, ExportMarkSuffix, []string{"corrupt mark file", "it is 20 bytes", "16 bytes or empty"}},
		{"mark of 5000 bytes", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path+ExportMarkSuffix, make([]byte, 5000), 0o600))
		}, ExportMarkSuffix, []string{"it is 5000 bytes"}},
		{"mark too short", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path+ExportMarkSuffix, make([]byte, 3), 0o600))
		}, ExportMarkSuffix, []string{"it is 3 bytes"}},
		{"owner", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path+ExportOwnerSuffix, []byte("not a token\n"), 0o600))
		}, ExportOwnerSuffix, []string{"corrupt owner token file", "it is 12 bytes"}},
		{"owner without newline", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path+ExportOwnerSuffix, []byte(strings.Repeat("a", 32)), 0o600))
		}, ExportOwnerSuffix, []string{"corrupt owner token file"}},
		{"owner, counter missing", func(t *testing.T, path string) {
			require.NoError(t, os.Remove(path))
			require.NoError(t, os.WriteFile(path+ExportOwnerSuffix, []byte("x\n"), 0o600))
		}, ExportOwnerSuffix, nil},
		{"mark, counter and owner missing", func(t *testing.T, path string) {
			for _, p := range []string{path, path + ExportOwnerSuffix, path + ExportPresenceSuffix, path + ExportSessionSuffix} {
				require.NoError(t, os.Remove(p))
			}
			require.NoError(t, os.WriteFile(path+ExportMarkSuffix, make([]byte, 17), 0o600))
		}, ExportMarkSuffix, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, path := ctPath(t)
			reg := newHookRegistry()
			g, err := openAs(path, "web_1", reg)
			require.NoError(t, err)
			draw(t, g, 2)
			require.NoError(t, g.Close())
			tc.spoil(t, path)
			row, _ := reg.Row("web_1")
			claims := reg.claims.Load()
			before := testfs.Snapshot(t, dir)

			g, err = openAs(path, "web_1", reg)
			if g != nil {
				g.Close()
			}
			requireCorruptFile(t, err, tc.file)
			assert.NotContains(t, err.Error(), "corrupt counter file", "the counter is not what is corrupt")
			for _, m := range tc.message {
				assert.Contains(t, err.Error(), m)
			}
			assert.Equal(t, claims, reg.claims.Load(), "refused before the claim")
			after, _ := reg.Row("web_1")
			assert.Equal(t, row, after, "the registry is unchanged")
			testfs.RequireUnchanged(t, dir, before)
		})
	}
}

// A mark file damaged while a Generator runs is reported with its real
// size, by the Generator and by ReadMark.
func TestCorruptMarkMessageSizes(t *testing.T) {
	t.Parallel()
	_, path := ctPath(t)
	g, err := openAs(path, "web_1", registrytest.NewRegistry(), WithReserveStep(100), WithOutageHorizon(0))
	require.NoError(t, err)
	defer g.Close()
	draw(t, g, 1)
	f, err := os.OpenFile(path+ExportMarkSuffix, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write([]byte{1, 2, 3, 4})
	require.NoError(t, err)
	require.NoError(t, f.Close())

	_, err = g.Next()
	requireCorruptFile(t, err, ExportMarkSuffix)
	assert.Contains(t, err.Error(), "it is 20 bytes; a mark file is 16 bytes or empty")
	_, _, err = ReadMark(path)
	requireCorruptFile(t, err, ExportMarkSuffix)
	assert.Contains(t, err.Error(), "it is 20 bytes; a mark file is 16 bytes or empty")
}

// The hint for a corrupt mark says to remove the mark file and restart:
// check that doing so is right. The next first start rebuilds the mark from
// the registry and raises the counter to the registry's mark.
func TestRemovedMarkRebuiltFromRegistry(t *testing.T) {
	t.Parallel()
	_, path := ctPath(t)
	reg := registrytest.NewRegistry()
	g, err := openAs(path, "web_1", reg, WithReserveStep(100), WithOutageHorizon(0))
	require.NoError(t, err)
	draw(t, g, 5)
	crash(t, g) // the registry keeps the reserved mark (100)
	require.NoError(t, os.WriteFile(path+ExportMarkSuffix, make([]byte, 20), 0o600))
	_, err = openAs(path, "web_1", reg, WithReserveStep(100), WithOutageHorizon(0))
	requireCorruptFile(t, err, ExportMarkSuffix)

	require.NoError(t, os.Remove(path+ExportMarkSuffix))
	g, err = openAs(path, "web_1", reg, WithReserveStep(100), WithOutageHorizon(0))
	require.NoError(t, err)
	defer g.Close()
	assert.Equal(t, []uint64{101}, draw(t, g, 1), "the counter is raised to the registry's mark")
	mark, ok, err := ReadMark(path)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.GreaterOrEqual(t, mark, uint64(101))
}

// A mode without owner read and write is refused: the library could not
// use the file it created.
func TestWithFileModeNeedsOwnerReadWrite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{
		{0, false},
		{0o200, false},
		{0o400, false},
		{0o100, false},
		{0o500, false},
		{0o300, false},
		{0o077, false},
		{0o1600, false}, // not only permission bits
		{0o600, true},
		{0o640, true},
		{0o644, true},
		{0o700, true},
		{0o666, true},
	} {
		t.Run(fmt.Sprintf("%#o", uint32(tc.mode)), func(t *testing.T) {
			dir, path := ctPath(t)
			g, err := Open(path, "web_1", WithFileMode(tc.mode))
			if !tc.ok {
				require.ErrorIs(t, err, ErrInvalidOption)
				assert.Contains(t, err.Error(), "WithFileMode")
				testfs.RequireUnchanged(t, dir, map[string]testfs.Entry{})
				return
			}
			require.NoError(t, err)
			require.NoError(t, g.Close())
			info, err := os.Stat(path)
			require.NoError(t, err)
			assert.Equal(t, tc.mode, info.Mode().Perm())
			g, err = Open(path, "web_1")
			require.NoError(t, err, "the library can reopen its own file")
			require.NoError(t, g.Close())
		})
	}
}

// fsOp is one operation recordingFS saw.
type fsOp struct{ op, path, to string }

// recordingFS does the real file-system work and records it; SyncDir
// fails with errInjected right after a Link or Rename to failAfter.
type recordingFS struct {
	ExportOSFS
	mu        sync.Mutex
	ops       []fsOp
	failAfter string
	lastName  string
}

func (r *recordingFS) add(op fsOp) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, op)
	if op.op == "link" || op.op == "rename" {
		r.lastName = op.to
	}
}

func (r *recordingFS) SyncFile(f *os.File) error {
	r.add(fsOp{op: "syncfile", path: f.Name()})
	return r.ExportOSFS.SyncFile(f)
}

func (r *recordingFS) Link(oldname, newname string) error {
	r.add(fsOp{op: "link", path: oldname, to: newname})
	return r.ExportOSFS.Link(oldname, newname)
}

func (r *recordingFS) Rename(oldname, newname string) error {
	r.add(fsOp{op: "rename", path: oldname, to: newname})
	return r.ExportOSFS.Rename(oldname, newname)
}

func (r *recordingFS) Remove(name string) error {
	r.add(fsOp{op: "remove", path: name})
	return r.ExportOSFS.Remove(name)
}

func (r *recordingFS) SyncDir(dir string) error {
	r.mu.Lock()
	fail := r.failAfter != "" && r.lastName == r.failAfter
	r.mu.Unlock()
	r.add(fsOp{op: "syncdir", path: filepath.Clean(dir)})
	if fail {
		return errInjected
	}
	return r.ExportOSFS.SyncDir(dir)
}

func (r *recordingFS) snapshot() []fsOp {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

// Creating the counter and each file beside it: the file is synced before
// it gets its name, and the directory is synced after the name is made and
// the temporary name removed, before anything else happens.
func TestCreateFilesOrderOfOperations(t *testing.T) {
	t.Parallel()
	dir, path := ctPath(t)
	rec := &recordingFS{}
	g, err := openAs(path, "web_1", registrytest.NewRegistry(), ExportWithFS(rec))
	require.NoError(t, err)
	require.NoError(t, g.Close())
	ops := rec.snapshot()

	find := func(from int, want fsOp) int {
		for i := from; i < len(ops); i++ {
			if ops[i] == want {
				return i
			}
		}
		return -1
	}
	for _, suffix := range []string{"", ExportOwnerSuffix, ExportMarkSuffix, ExportPresenceSuffix, ExportSessionSuffix} {
		target := path + suffix
		t.Run("counter"+suffix, func(t *testing.T) {
			op := "link"
			if suffix == ExportSessionSuffix {
				op = "rename"
			}
			at := -1
			for i, o := range ops {
				if o.op == op && o.to == target {
					require.Equal(t, -1, at, "%s made twice: %v", target, ops)
					at = i
				}
			}
			require.NotEqual(t, -1, at, "%s not made through the file-system layer: %v", target, ops)
			tmp := ops[at].path
			assert.Equal(t, dir, filepath.Dir(tmp), "the temporary file is in the same directory")
			synced := find(0, fsOp{op: "syncfile", path: tmp})
			assert.True(t, synced >= 0 && synced < at, "the file is synced before it gets its name: %v", ops)
			want := []fsOp{{op: "remove", path: tmp}, {op: "syncdir", path: dir}}
			if suffix == ExportSessionSuffix {
				want = want[1:] // renamed: no temporary name is left
			}
			require.Greater(t, len(ops), at+len(want), "%v", ops)
			assert.Equal(t, want, ops[at+1:at+1+len(want)],
				"right after %s gets its name: the temporary name removed, then the directory synced", target)
		})
	}
	testfs.RequireNoTemp(t, dir)
}

// A failed directory sync fails the creation, with an error that says so,
// for the counter and for each file beside it.
func TestCreateFilesDirSyncFailure(t *testing.T) {
	t.Parallel()
	for _, suffix := range []string{"", ExportOwnerSuffix, ExportMarkSuffix, ExportPresenceSuffix, ExportSessionSuffix} {
		t.Run("counter"+suffix, func(t *testing.T) {
			dir, path := ctPath(t)
			rec := &recordingFS{failAfter: path + suffix}
			g, err := openAs(path, "web_1", registrytest.NewRegistry(), ExportWithFS(rec))
			if g != nil {
				g.Close()
			}
			require.ErrorIs(t, err, errInjected)
			want := path + ":" // the counter named first, the file beside it as detail
			if suffix != "" {
				want = path + ": counter.u64" + suffix + ":"
			}
			assert.Contains(t, err.Error(), want)
			assert.Contains(t, err.Error(), "sync directory")
			var fe *FileError
			require.True(t, errors.As(err, &fe), "%v", err)
			assert.Equal(t, path+suffix, fe.Path)
			testfs.RequireNoTemp(t, dir)
		})
	}
	t.Run("Init", func(t *testing.T) {
		_, path := ctPath(t)
		_, err := Init(path, 5, ExportWithFS(&recordingFS{failAfter: path}))
		require.ErrorIs(t, err, errInjected)
		assert.Contains(t, err.Error(), "sync directory")
	})
}

// fullDiskFS fails the sync of a new file whose temporary name begins
// with prefix, as a full disk does.
type fullDiskFS struct {
	ExportOSFS
	prefix string
}

func (f fullDiskFS) SyncFile(file *os.File) error {
	if strings.HasPrefix(filepath.Base(file.Name()), f.prefix) {
		return &os.PathError{Op: "sync", Path: file.Name(), Err: syscall.ENOSPC}
	}
	return f.ExportOSFS.SyncFile(file)
}

// An Open that cannot make the counter or a file beside it (a full disk)
// says so naming the counter first, the file beside it as detail, and the
// temporary file it was written to (random, and removed) only after the
// cause; the FileError's Path is the file it could not make.
func TestMakingFilesErrorNamesTheCounter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		suffix string
		op     string
	}{
		{"", "create"},
		{ExportOwnerSuffix, "create"},
		{ExportMarkSuffix, "create"},
		{ExportPresenceSuffix, "create"},
		{ExportSessionSuffix, "write"},
	} {
		t.Run("counter"+tc.suffix, func(t *testing.T) {
			t.Parallel()
			dir, path := ctPath(t)
			g, err := openAs(path, "web_1", registrytest.NewRegistry(), ExportWithFS(fullDiskFS{prefix: ".counter.u64" + tc.suffix + ".tmp-"}))
			if g != nil {
				g.Close()
			}
			require.ErrorIs(t, err, syscall.ENOSPC)
			msg := err.Error()
			want := "snapid: " + tc.op + " " + path + ": "
			if tc.suffix != "" {
				want += "counter.u64" + tc.suffix + ": "
			}
			assert.True(t, strings.HasPrefix(msg, want+"sync: no space left on device"), "%q does not begin with %q", msg, want)
			assert.NotContains(t, msg[:strings.Index(msg, "no space")], ".tmp-", "the temporary file is named after the cause only")
			var fe *FileError
			require.True(t, errors.As(err, &fe), "%v", err)
			assert.Equal(t, path+tc.suffix, fe.Path)
			testfs.RequireNoTemp(t, dir)
		})
	}
}

// TestMarkReadWhileFirstWritten: a process reading the mark file while
// another writes it for the first time (empty to 16 bytes, in one write)
// sees it empty or whole, never as corrupt.
func TestMarkReadWhileFirstWritten(t *testing.T) {
	t.Parallel()
	skipShort(t)
	_, path := ctPath(t)
	mark := path + ExportMarkSuffix
	var b [16]byte
	b[0], b[8] = 7, 5
	for i := range 3000 {
		require.NoError(t, os.WriteFile(mark+".tmp", nil, 0o600))
		require.NoError(t, os.Rename(mark+".tmp", mark))
		start := make(chan struct{})
		done := make(chan error)
		go func() {
			<-start
			f, err := os.OpenFile(mark, os.O_WRONLY, 0)
			if err == nil {
				_, err = f.WriteAt(b[:], 0)
				f.Close()
			}
			done <- err
		}()
		close(start)
		for {
			m, _, err := ReadMark(path)
			require.NoError(t, err, "iteration %d", i)
			if m == 7 {
				break
			}
			require.Zero(t, m)
		}
		require.NoError(t, <-done)
	}
}

// Opening a counter that exists syncs its directory before anything is
// issued, with and without the registry: a process killed between linking
// the counter (or a file beside it) and syncing the directory, or whose
// directory sync failed, left a name that a power loss could still take
// away after numbers were issued from it.
func TestOpenExistingSyncsDirectory(t *testing.T) {
	t.Parallel()
	for _, withReg := range []bool{false, true} {
		t.Run(fmt.Sprintf("registry=%v", withReg), func(t *testing.T) {
			dir, path := ctPath(t)
			reg := registrytest.NewRegistry()
			open := func(fs ExportFS) (*Generator, error) {
				if withReg {
					return openAs(path, "web_1", reg, ExportWithFS(fs))
				}
				return Open(path, "web_1", ExportWithFS(fs))
			}
			g, err := open(ExportOSFS{})
			require.NoError(t, err)
			require.NoError(t, g.Close())

			rec := &recordingFS{}
			g, err = open(rec)
			require.NoError(t, err)
			require.NoError(t, g.Close())
			require.Contains(t, rec.snapshot(), fsOp{op: "syncdir", path: dir})

			// A directory sync that fails fails the Open.
			_, err = open(&failDirSync{})
			require.ErrorIs(t, err, errInjected)
			require.Contains(t, err.Error(), "sync directory")
		})
	}
}

// failDirSync fails every directory sync.
type failDirSync struct{ ExportOSFS }

func (failDirSync) SyncDir(string) error { return errInjected }

// withoutProtectedHardlinks sets fs.protected_hardlinks to 0 (the
// kernel's default) until the test ends, so that another user can link a
// file of root's it cannot write; it reports whether it could.
func withoutProtectedHardlinks(t *testing.T) bool {
	t.Helper()
	const p = "/proc/sys/fs/protected_hardlinks"
	old, err := os.ReadFile(p)
	if err != nil {
		return false
	}
	if os.WriteFile(p, []byte("0\n"), 0o644) != nil {
		return false
	}
	t.Cleanup(func() { _ = os.WriteFile(p, old, 0o644) })
	return true
}

// A hard link another user plants beside the counter (or at the counter)
// to a file of root's, in a sticky directory root keeps its counter in,
// would make root write that file in place (the heartbeat's record, the
// mark) or lock it: every state file with more than one name is refused on
// its opened descriptor, whatever fs.protected_hardlinks says, and the
// linked file is left as it was.
func TestStateFileWithTwoNamesRefused(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	asUser := withoutProtectedHardlinks(t)
	counterOf := func(v uint64) []byte { b := EncodeCounter(v); return b[:] }
	for _, tc := range []struct {
		suffix  string
		content []byte // what the planted file holds: a valid file of its kind
	}{
		{"", counterOf(7)},
		{ExportMarkSuffix, make([]byte, 16)},
		{".heartbeat", nil},
		{ExportPresenceSuffix, nil},
		{ExportOwnerSuffix, []byte(strings.Repeat("ab", 16) + "\n")},
	} {
		t.Run("counter"+tc.suffix, func(t *testing.T) {
			base := testfs.SharedTempDir(t, "snapid-links-")
			sticky := filepath.Join(base, "tmp")
			require.NoError(t, os.Mkdir(sticky, 0o755))
			require.NoError(t, os.Chmod(sticky, os.ModeSticky|0o777))
			victim := filepath.Join(base, "precious")
			require.NoError(t, os.WriteFile(victim, tc.content, 0o600)) // root's, 0600
			path := filepath.Join(sticky, "counter.u64")
			if tc.suffix != "" {
				c := EncodeCounter(0)
				require.NoError(t, os.WriteFile(path, c[:], 0o600))
			}
			at := path + tc.suffix
			if asUser {
				out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "ln", victim, at).CombinedOutput()
				require.NoError(t, err, "%s", out)
			} else {
				require.NoError(t, os.Link(victim, at)) // root may link anything
			}
			g, err := Open(path, "vm", WithRegistry(registrytest.NewRegistry()), WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"}))
			if err == nil {
				_, _ = g.UniqueID()
				g.Close()
			}
			b, rerr := os.ReadFile(victim)
			require.NoError(t, rerr)
			assert.True(t, bytes.Equal(tc.content, b), "the linked file was changed: %q", b)
			require.ErrorIs(t, err, ErrUntrustedOwner)
			require.Contains(t, err.Error(), "2 names")
		})
	}
}

// A start whose deadline has passed by the time it reaches the host's
// gate, with no other process anywhere, is not blamed on another process
// (ErrLocked): a free gate is taken whatever the deadline says.
func TestFreeGateTakenPastTheDeadline(t *testing.T) {
	t.Parallel()
	for range 3 {
		_, err := Open(filepath.Join(t.TempDir(), "counter.u64"), "web_1",
			WithRegistry(registrytest.NewRegistry()), WithRegistryTimeout(time.Nanosecond))
		require.Error(t, err)
		require.NotErrorIs(t, err, ErrLocked)
	}
}

// The host's start-up gate held by another process (here a lock of this
// test's own, as another process's would be): a registered Open waits at
// most as long as its context, and the error names the holder.
func TestGateWaitBoundedAndNamesHolder(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	// The gate held by another user's process, which could read it
	// (the state files 0644, in a directory it can reach).
	path := filepath.Join(testfs.SharedTempDir(t, "snapid-gate-"), "counter.u64")
	reg := registrytest.NewRegistry()
	opts := []Option{WithRegistry(reg), WithSync(false), WithFileMode(0o644), WithHostInfo(HostInfo{Hostname: "host1", MachineID: "m1"})}
	g, err := Open(path, "web_1", opts...)
	require.NoError(t, err)
	require.NoError(t, g.Close())
	testfs.HoldFlock(t, path+ExportOwnerSuffix)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = OpenContext(ctx, path, "web_1", opts...)
	assert.Less(t, time.Since(start), 3*time.Second)
	require.ErrorIs(t, err, ErrLocked)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "pid ")
	assert.Contains(t, err.Error(), "user nobody", "the holder, another user, is named")
}
