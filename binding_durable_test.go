package snapid_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bindSyncFS fails the first sync of the bindings directory when fail is
// set, and records every directory synced.
type bindSyncFS struct {
	ExportOSFS
	bind   string
	fail   bool
	mu     sync.Mutex
	failed bool
	dirs   []string
}

func (f *bindSyncFS) SyncDir(dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail && filepath.Clean(dir) == f.bind && !f.failed {
		f.failed = true
		return errors.New("injected: sync of the bindings directory failed")
	}
	f.dirs = append(f.dirs, filepath.Clean(dir))
	return f.ExportOSFS.SyncDir(dir)
}

func (f *bindSyncFS) synced(dir string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range f.dirs {
		if d == dir {
			return true
		}
	}
	return false
}

// An Open whose binding was linked but whose directory sync failed
// leaves no binding behind.
func TestBindingRemovedWhenItsSyncFails(t *testing.T) {
	bind := filepath.Join(t.TempDir(), "names")
	counter := filepath.Join(t.TempDir(), "c")
	fsys := &bindSyncFS{bind: bind, fail: true}
	_, err := Open(counter, "vm", WithBindingDir(bind), ExportWithFS(fsys))
	require.Error(t, err)
	_, err = os.Lstat(filepath.Join(bind, "vm"))
	require.ErrorIs(t, err, fs.ErrNotExist, "the failed Open left its binding linked")

	g, err := Open(counter, "vm", WithBindingDir(bind), ExportWithFS(fsys))
	require.NoError(t, err)
	_, err = g.Next()
	require.NoError(t, err)
	require.NoError(t, g.Close())
	require.True(t, fsys.synced(bind))
}

// A binding found already linked (by an Open killed between the link and
// the directory sync, say) is made durable before any id is issued.
func TestBindingFoundOursIsSyncedBeforeIDs(t *testing.T) {
	bind := filepath.Join(t.TempDir(), "names")
	counter := filepath.Join(t.TempDir(), "c")
	g, err := Open(counter, "vm", WithBindingDir(bind))
	require.NoError(t, err)
	require.NoError(t, g.Close())

	fsys := &bindSyncFS{bind: bind}
	g, err = Open(counter, "vm", WithBindingDir(bind), ExportWithFS(fsys))
	require.NoError(t, err)
	require.True(t, fsys.synced(bind), "Open found its binding and issued ids without syncing %s (synced: %v)", bind, fsys.dirs)
	_, err = g.Next()
	require.NoError(t, err)
	require.NoError(t, g.Close())
}

// The same binding, its sync failing once found ours, fails the Open.
func TestBindingFoundOursSyncFailureFailsOpen(t *testing.T) {
	bind := filepath.Join(t.TempDir(), "names")
	counter := filepath.Join(t.TempDir(), "c")
	g, err := Open(counter, "vm", WithBindingDir(bind))
	require.NoError(t, err)
	require.NoError(t, g.Close())

	fsys := &bindSyncFS{bind: bind, fail: true}
	_, err = Open(counter, "vm", WithBindingDir(bind), ExportWithFS(fsys))
	require.Error(t, err)
	var fe *FileError
	require.ErrorAs(t, err, &fe)
}

// Root's host-wide directory: each new level synced into its parent, in
// order, before the next is made, and the directory itself after the
// binding is linked in it.
func TestBindingHostWideDurable(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	shared := filepath.Join(base, "var", "lib", "snapid", "names")
	ExportBindingDefaults(t, shared)
	rec := &syncRecorder{}
	counter := filepath.Join(t.TempDir(), "vm.u64")
	g, err := Open(counter, "vm", ExportWithFS(rec))
	require.NoError(t, err)
	require.NoError(t, g.Close())
	want := []string{base, filepath.Join(base, "var"), filepath.Join(base, "var", "lib"), filepath.Join(base, "var", "lib", "snapid"), shared}
	require.GreaterOrEqual(t, len(rec.dirs), len(want), "%v", rec.dirs)
	got := make([]string, len(want))
	for i := range want {
		got[i] = filepath.Clean(rec.dirs[i])
	}
	assert.Equal(t, want, got)
}
