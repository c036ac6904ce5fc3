package snapid_test

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/snapidtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bindingFor returns the content of a binding of a name to counterPath.
func bindingFor(counterPath string) string {
	return "snapid-binding 1\n" + strconv.Quote(counterPath) + "\n"
}

// requireBinding requires the binding of name in dir to name counterPath.
func requireBinding(t *testing.T, dir, name, counterPath string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	require.NoError(t, err)
	require.Equal(t, bindingFor(counterPath), string(b))
}

// A second counter file under a name the host uses is refused before
// anything is created, with an error that names the counter the name goes
// with and what to do; the first counter goes on.
func TestBindingRefusesSecondCounter(t *testing.T) {
	bind := t.TempDir()
	dirA, dirB := t.TempDir(), t.TempDir()
	pathA, pathB := filepath.Join(dirA, "counter.u64"), filepath.Join(dirB, "counter.u64")
	a, err := Open(pathA, "vm", WithBindingDir(bind))
	require.NoError(t, err)
	defer a.Close()
	id, err := a.UniqueID()
	require.NoError(t, err)
	require.Equal(t, "vm-1", id)
	requireBinding(t, bind, "vm", pathA)

	beforeB, beforeBind := testfs.Snapshot(t, dirB), testfs.Snapshot(t, bind)
	for _, opts := range [][]Option{nil, {WithBlock(10)}} {
		b, err := Open(pathB, "vm", append(opts, WithBindingDir(bind))...)
		require.ErrorIs(t, err, ErrNameBound)
		require.Nil(t, b)
		for _, want := range []string{`"vm"`, pathA, filepath.Join(bind, "vm"), pathB, "remove"} {
			assert.Contains(t, err.Error(), want)
		}
		testfs.RequireUnchanged(t, dirB, beforeB)
		testfs.RequireUnchanged(t, bind, beforeBind)
	}

	// The same counter by another path (a symbolic link to its
	// directory) is the same file: not refused.
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(dirA, link))
	c, err := Open(filepath.Join(link, "counter.u64"), "vm", WithBindingDir(bind))
	require.NoError(t, err)
	id, err = c.UniqueID()
	require.NoError(t, err)
	assert.Equal(t, "vm-2", id)
	require.NoError(t, c.Close())
	// Another name with the second counter is fine.
	d, err := Open(pathB, "db", WithBindingDir(bind))
	require.NoError(t, err)
	require.NoError(t, d.Close())
}

// A binding whose counter file is gone is taken over, with a warning; the
// old counter, if it comes back, is then refused.
func TestBindingTakenOverWhenCounterGone(t *testing.T) {
	bind := t.TempDir()
	pathA := filepath.Join(t.TempDir(), "counter.u64")
	pathB := filepath.Join(t.TempDir(), "counter.u64")
	a, err := Open(pathA, "web", WithBindingDir(bind))
	require.NoError(t, err)
	require.NoError(t, a.Close())
	require.NoError(t, os.Remove(pathA))

	var logs bytes.Buffer
	b, err := Open(pathB, "web", WithBindingDir(bind), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err)
	defer b.Close()
	requireBinding(t, bind, "web", pathB)
	assert.Contains(t, logs.String(), "level=WARN")
	assert.Contains(t, logs.String(), pathB)
	testfs.RequireNoTemp(t, bind)
	assert.Equal(t, []string{"web"}, bindingNames(t, bind), "only the binding: no temporary file left")

	_, err = Open(pathA, "web", WithBindingDir(bind))
	require.ErrorIs(t, err, ErrNameBound)
	_, err = os.Lstat(pathA)
	require.ErrorIs(t, err, os.ErrNotExist, "the refused counter is not created")
}

// slowCounterFS holds the creation of one counter file until released or
// a while has passed, to open the window between an Open's binding and
// its counter.
type slowCounterFS struct {
	ExportOSFS
	counter string
	waiting chan struct{} // closed when the creation of counter waits
	release chan struct{}
}

func (f *slowCounterFS) Link(oldname, newname string) error {
	if newname == f.counter {
		close(f.waiting)
		select {
		case <-f.release:
		case <-time.After(300 * time.Millisecond):
		}
	}
	return f.ExportOSFS.Link(oldname, newname)
}

// Two first Opens of one name with different counters: exactly one wins,
// even when the second comes while the first has bound the name but not
// yet created its counter (which must not look like a counter that is
// gone).
func TestBindingConcurrentFirstOpens(t *testing.T) {
	bind := t.TempDir()
	pathA := filepath.Join(t.TempDir(), "counter.u64")
	dirB := t.TempDir()
	pathB := filepath.Join(dirB, "counter.u64")
	slow := &slowCounterFS{counter: pathA, waiting: make(chan struct{}), release: make(chan struct{})}
	type result struct {
		g   *Generator
		err error
	}
	resA, resB := make(chan result, 1), make(chan result, 1)
	go func() {
		g, err := Open(pathA, "web", WithBindingDir(bind), ExportWithFS(slow))
		resA <- result{g, err}
	}()
	<-slow.waiting
	go func() {
		g, err := Open(pathB, "web", WithBindingDir(bind))
		resB <- result{g, err}
	}()
	var b result
	select {
	case b = <-resB: // B did not wait for A
	case <-time.After(200 * time.Millisecond):
	}
	close(slow.release)
	a := <-resA
	if b.g == nil && b.err == nil {
		b = <-resB
	}
	require.NoError(t, a.err)
	defer a.g.Close()
	if b.g != nil {
		b.g.Close()
	}
	require.ErrorIs(t, b.err, ErrNameBound, "the second Open must lose")
	requireBinding(t, bind, "web", pathA)
	ents, err := os.ReadDir(dirB)
	require.NoError(t, err)
	assert.Empty(t, ents, "the loser created nothing")

	// Without the pause, many racing first Opens: one winner.
	for round := range 5 {
		bind := t.TempDir()
		const n = 6
		results := make(chan error, n)
		paths := make([]string, n)
		for i := range n {
			paths[i] = filepath.Join(t.TempDir(), "counter.u64")
			go func() {
				g, err := Open(paths[i], "race", WithBindingDir(bind))
				if err == nil {
					g.Close()
				}
				results <- err
			}()
		}
		wins := 0
		for range n {
			if err := <-results; err == nil {
				wins++
			} else {
				require.ErrorIs(t, err, ErrNameBound, "round %d", round)
			}
		}
		require.Equal(t, 1, wins, "round %d", round)
	}
}

// A binding file that is not one this version writes is refused with
// ErrCorruptBinding (which matches ErrCorrupt) and a hint, and nothing is
// created or changed.
func TestBindingCorruptRefused(t *testing.T) {
	other := filepath.Join(t.TempDir(), "counter.u64")
	tests := []struct {
		name    string
		content string
		symlink bool
	}{
		{"empty", "", false},
		{"garbage", "hello\n", false},
		{"wrong header", "snapid-binding 2\n" + strconv.Quote(other) + "\n", false},
		{"unquoted path", "snapid-binding 1\n" + other + "\n", false},
		{"relative path", "snapid-binding 1\n\"counter.u64\"\n", false},
		{"no final newline", "snapid-binding 1\n" + strconv.Quote(other), false},
		{"a line too many", bindingFor(other) + "x\n", false},
		{"symbolic link", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bind, dir := t.TempDir(), t.TempDir()
			path := filepath.Join(dir, "counter.u64")
			bpath := filepath.Join(bind, "web")
			if tt.symlink {
				target := filepath.Join(t.TempDir(), "elsewhere")
				require.NoError(t, os.WriteFile(target, []byte(bindingFor(path)), 0o644))
				require.NoError(t, os.Symlink(target, bpath))
			} else {
				require.NoError(t, os.WriteFile(bpath, []byte(tt.content), 0o644))
			}
			before, beforeBind := testfs.Snapshot(t, dir), testfs.Snapshot(t, bind)
			g, err := Open(path, "web", WithBindingDir(bind))
			require.ErrorIs(t, err, ErrCorruptBinding)
			require.ErrorIs(t, err, ErrCorrupt)
			require.Nil(t, g)
			assert.Contains(t, err.Error(), bpath)
			assert.Contains(t, err.Error(), "remove it")
			testfs.RequireUnchanged(t, dir, before)
			testfs.RequireUnchanged(t, bind, beforeBind)
		})
	}
}

// WithBindingDir takes an absolute path or "" (no bindings), and
// SNAPID_BINDING_DIR an absolute path; anything else is refused before
// anything is created.
func TestWithBindingDir(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "counter.u64")
	for _, bad := range []string{"names", "./names", "../names"} {
		_, err := Open(path, "web", WithBindingDir(bad))
		require.ErrorIs(t, err, ErrInvalidOption, bad)
		assert.Contains(t, err.Error(), bad)
	}
	t.Setenv("SNAPID_BINDING_DIR", "relative/names")
	_, err := Open(path, "web")
	require.ErrorIs(t, err, ErrInvalidOption)
	assert.Contains(t, err.Error(), "SNAPID_BINDING_DIR")
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, ents, "nothing created")

	// A binding directory that is a file: refused, nothing created.
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, err = Open(path, "web", WithBindingDir(file))
	require.Error(t, err)
	assert.Contains(t, err.Error(), file)
	assert.Contains(t, err.Error(), "SNAPID_BINDING_DIR", "what to do")
	ents, err = os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, ents, "nothing created")

	// A missing directory is created, private to the user, and made
	// durable in its parent before the binding is written in it.
	bind := filepath.Join(t.TempDir(), "a", "names")
	rec := &syncRecorder{}
	g, err := Open(path, "web", WithBindingDir(bind), ExportWithFS(rec))
	require.NoError(t, err)
	require.NoError(t, g.Close())
	requireBinding(t, bind, "web", path)
	require.GreaterOrEqual(t, len(rec.dirs), 3, "%v", rec.dirs)
	assert.Equal(t, []string{filepath.Dir(filepath.Dir(bind)), filepath.Dir(bind), bind},
		[]string{filepath.Clean(rec.dirs[0]), filepath.Clean(rec.dirs[1]), filepath.Clean(rec.dirs[2])},
		"each new level synced into its parent, then the directory with the binding")
	st, err := os.Stat(bind)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())

	// "" turns bindings off: two counters under one name both open (a
	// test simulating two hosts).
	other := filepath.Join(t.TempDir(), "counter.u64")
	g, err = Open(other, "web", WithBindingDir(""))
	require.NoError(t, err)
	require.NoError(t, g.Close())
}

// With a registry, the registry refuses a second counter file under the
// name (its owner token differs): no name binding is made, and none is
// consulted (a numbering registry's node number is bound, see
// TestNumberBindingOfRegistryNumber).
func TestBindingNotMadeWithRegistry(t *testing.T) {
	bind := t.TempDir()
	reg := snapidtest.NewRegistry()
	path := filepath.Join(t.TempDir(), "counter.u64")
	g, err := Open(path, "web", WithRegistry(reg), WithBindingDir(bind))
	require.NoError(t, err)
	_, err = g.Next()
	require.NoError(t, err)
	require.NoError(t, g.Close())
	ents, err := os.ReadDir(bind)
	require.NoError(t, err)
	for _, e := range ents {
		assert.NotEqual(t, "web", e.Name(), "no name binding with a registry")
	}

	// A name bound without a registry to another counter does not stand
	// in the way of the registry's decision.
	other := filepath.Join(t.TempDir(), "counter.u64")
	require.NoError(t, os.WriteFile(other, make([]byte, CounterSize), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(bind, "db"), []byte(bindingFor(other)), 0o644))
	path2 := filepath.Join(t.TempDir(), "counter.u64")
	g, err = Open(path2, "db", WithRegistry(reg), WithBindingDir(bind))
	require.NoError(t, err)
	require.NoError(t, g.Close())
}

// An Open that fails after it bound the name removes its binding; one
// that finds its binding already there leaves it.
func TestBindingRemovedWhenOpenFails(t *testing.T) {
	bind := t.TempDir()
	missing := filepath.Join(t.TempDir(), "no", "counter.u64")
	_, err := Open(missing, "web", WithBindingDir(bind))
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.Empty(t, bindingNames(t, bind), "no binding left behind")

	// A corrupt counter: refused, no binding left, so the name is free
	// for the counter the host really uses.
	dir := t.TempDir()
	bad := filepath.Join(dir, "counter.u64")
	require.NoError(t, os.WriteFile(bad, []byte{1, 2, 3}, 0o600))
	_, err = Open(bad, "web", WithBindingDir(bind))
	require.ErrorIs(t, err, ErrCorrupt)
	assert.Empty(t, bindingNames(t, bind), "no binding left behind")

	good := filepath.Join(t.TempDir(), "counter.u64")
	g, err := Open(good, "web", WithBindingDir(bind))
	require.NoError(t, err)
	require.NoError(t, g.Close())
	// The counter bound before fails now (made corrupt): its binding,
	// not made by this Open, stays.
	require.NoError(t, os.WriteFile(good, []byte{1}, 0o600))
	_, err = Open(good, "web", WithBindingDir(bind))
	require.True(t, errors.Is(err, ErrCorrupt), "%v", err)
	requireBinding(t, bind, "web", good)
}

// By default the host-wide directory is used; run as root, Open creates it
// level by level with mode 0755 (only root writes it; others read it), and
// a directory an administrator made safe is left as it is.
func TestBindingDefaultDir(t *testing.T) {
	requireRoot(t)
	shared := filepath.Join(t.TempDir(), "var", "lib", "snapid", "names")
	ExportBindingDefaults(t, shared)
	path := filepath.Join(t.TempDir(), "counter.u64")
	g, err := Open(path, "web")
	require.NoError(t, err)
	require.NoError(t, g.Close())
	requireBinding(t, shared, "web", path)
	for _, d := range []string{shared, filepath.Dir(shared), filepath.Dir(filepath.Dir(shared))} {
		st, err := os.Stat(d)
		require.NoError(t, err)
		assert.Equal(t, os.ModeDir|0o755, st.Mode(), "only root writes %s", d)
	}
	st, err := os.Stat(filepath.Join(shared, ".lock"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode(), "no other user can open the lock")
	_, err = Open(filepath.Join(t.TempDir(), "counter.u64"), "web")
	require.ErrorIs(t, err, ErrNameBound, "the host-wide bindings are consulted")

	// An existing directory keeps the mode it was given.
	shared2 := filepath.Join(t.TempDir(), "names")
	require.NoError(t, os.Mkdir(shared2, 0o750))
	ExportBindingDefaults(t, shared2)
	g, err = Open(filepath.Join(t.TempDir(), "counter.u64"), "web")
	require.NoError(t, err)
	require.NoError(t, g.Close())
	st, err = os.Stat(shared2)
	require.NoError(t, err)
	assert.Equal(t, os.ModeDir|0o750, st.Mode())
}

// A host-wide directory an earlier version left world-writable (1777):
// root's next Open makes it 0755, ignores the bindings in it that root
// does not own (with a warning) and replaces such a binding when it binds
// the name; root's own bindings there still count.
func TestBindingOldSharedDirMigrated(t *testing.T) {
	requireRoot(t)
	shared := filepath.Join(t.TempDir(), "names")
	require.NoError(t, os.Mkdir(shared, 0o700))
	require.NoError(t, os.Chmod(shared, 0o777|os.ModeSticky))
	ExportBindingDefaults(t, shared)
	rootCounter := filepath.Join(t.TempDir(), "root.u64")
	g, err := Open(rootCounter, "db")
	require.NoError(t, err)
	require.NoError(t, g.Close())
	require.NoError(t, os.Chmod(shared, 0o777|os.ModeSticky)) // as the old version left it

	// Another user's binding of vm, planted while the directory was open.
	other := filepath.Join(t.TempDir(), "other.u64")
	planted := filepath.Join(shared, "vm")
	require.NoError(t, os.WriteFile(planted, []byte("snapid-binding 1\n"+strconv.Quote(other)+"\n"), 0o644))
	require.NoError(t, os.WriteFile(other, make([]byte, CounterSize), 0o644))
	require.NoError(t, os.Chown(planted, nobody, nobody))

	var logs bytes.Buffer
	path := filepath.Join(t.TempDir(), "vm.u64")
	g, err = Open(path, "vm", WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	require.NoError(t, err, "a binding another user planted refuses nothing")
	require.NoError(t, g.Close())
	requireBinding(t, shared, "vm", path)
	st, err := os.Stat(shared)
	require.NoError(t, err)
	assert.Equal(t, os.ModeDir|0o755, st.Mode())
	assert.Contains(t, logs.String(), "0755")
	assert.Contains(t, logs.String(), "not owned by")
	var sys syscall.Stat_t
	require.NoError(t, syscall.Stat(planted, &sys))
	assert.EqualValues(t, 0, sys.Uid, "the binding is root's now")
	_, err = Open(filepath.Join(t.TempDir(), "x.u64"), "db")
	require.ErrorIs(t, err, ErrNameBound, "root's own bindings there still count")
}

// bindingNames lists the bindings in dir (not its lock file).
func bindingNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		if e.Name() != ".lock" {
			names = append(names, e.Name())
		}
	}
	return names
}

// syncRecorder records the directories synced.
type syncRecorder struct {
	ExportOSFS
	mu   sync.Mutex
	dirs []string
}

func (r *syncRecorder) SyncDir(dir string) error {
	r.mu.Lock()
	r.dirs = append(r.dirs, dir)
	r.mu.Unlock()
	return r.ExportOSFS.SyncDir(dir)
}

// A binding is matched to the counter by the path it records, or by the
// device and inode of that path itself, never through a symbolic link: a
// binding naming a link to this counter is not this counter's.
func TestBindingNeverFollowsLinks(t *testing.T) {
	bind := t.TempDir()
	dir := t.TempDir()
	counter := filepath.Join(dir, "counter.u64")
	g, err := Open(counter, "db", WithBindingDir(bind))
	require.NoError(t, err)
	require.NoError(t, g.Close())
	link := filepath.Join(dir, "link.u64")
	require.NoError(t, os.Symlink(counter, link))
	require.NoError(t, os.WriteFile(filepath.Join(bind, "web"), []byte(bindingFor(link)), 0o644))
	_, err = Open(counter, "web", WithBindingDir(bind))
	require.ErrorIs(t, err, ErrNameBound, "a link to the counter is another path, not this counter")
	// A hard link is the same file, but a counter with two names is
	// refused (another user could have made the second one).
	hard := filepath.Join(dir, "hard.u64")
	require.NoError(t, os.Link(counter, hard))
	require.NoError(t, os.WriteFile(filepath.Join(bind, "vm"), []byte(bindingFor(hard)), 0o644))
	_, err = Open(counter, "vm", WithBindingDir(bind))
	require.ErrorIs(t, err, ErrUntrustedOwner)
	require.Contains(t, err.Error(), "2 names")
	require.NoError(t, os.Remove(hard))
	require.NoError(t, os.WriteFile(filepath.Join(bind, "vm"), []byte(bindingFor(counter)), 0o644))
	g, err = Open(counter, "vm", WithBindingDir(bind))
	require.NoError(t, err)
	require.NoError(t, g.Close())
}

// A stale binding (its counter out of sight, as on an unmounted file
// system) replaced by an Open that then fails is put back: the failed Open
// changes nothing, and once the old counter is back a second counter under
// the name is still refused.
func TestBindingStaleKeptWhenOpenFails(t *testing.T) {
	bind := t.TempDir()
	base := t.TempDir()
	dirA := filepath.Join(base, "a")
	require.NoError(t, os.Mkdir(dirA, 0o700))
	first := filepath.Join(dirA, "counter.u64")
	g, err := Open(first, "st1", WithBindingDir(bind))
	require.NoError(t, err)
	_, err = g.NextN(3)
	require.NoError(t, err)
	require.NoError(t, g.Close())

	require.NoError(t, os.Rename(dirA, dirA+".off")) // out of sight
	bad := filepath.Join(base, "c", "counter.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(bad), 0o700))
	require.NoError(t, os.WriteFile(bad, []byte{1, 2, 3}, 0o600)) // corrupt: its Open fails after binding
	_, err = Open(bad, "st1", WithBindingDir(bind))
	require.ErrorIs(t, err, ErrCorrupt)
	requireBinding(t, bind, "st1", first)

	require.NoError(t, os.Rename(dirA+".off", dirA))
	second := filepath.Join(base, "d", "counter.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(second), 0o700))
	_, err = Open(second, "st1", WithBindingDir(bind))
	require.ErrorIs(t, err, ErrNameBound, "a second counter under st1 was accepted once the first was back")
}

// An Open refused for its counter (corrupt, a FIFO, or in a missing
// directory) makes nothing for the bindings either: no directory level,
// no lock file.
func TestBindingNothingMadeForRefusedCounter(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T, path string)
		want error
	}{
		{"corrupt", func(t *testing.T, p string) { require.NoError(t, os.WriteFile(p, make([]byte, 9), 0o600)) }, ErrCorrupt},
		{"fifo", func(t *testing.T, p string) { require.NoError(t, syscall.Mkfifo(p, 0o600)) }, ErrNotRegular},
		{"missing directory", nil, os.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			counter := filepath.Join(base, "counter.u64")
			if tc.make != nil {
				tc.make(t, counter)
			} else {
				counter = filepath.Join(base, "missing", "counter.u64")
			}
			bind := filepath.Join(base, "state", "snapid", "names")
			_, err := Open(counter, "web", WithBindingDir(bind))
			require.ErrorIs(t, err, tc.want)
			_, serr := os.Lstat(filepath.Join(base, "state"))
			require.True(t, os.IsNotExist(serr), "a bindings directory level was made for a refused counter")
		})
	}
}
