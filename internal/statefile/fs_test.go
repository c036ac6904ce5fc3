package statefile

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// seamFS records what goes through the seam's optional parts.
type seamFS struct {
	OS
	mu      sync.Mutex
	writes  []string // files whose content went through WriteAt
	synced  []string // files synced through SyncFile
	renamed []string // names given by LinkNoReplace
}

func (s *seamFS) WriteAt(f *os.File, b []byte, off int64) (int, error) {
	s.mu.Lock()
	s.writes = append(s.writes, filepath.Base(f.Name()))
	s.mu.Unlock()
	return f.WriteAt(b, off)
}

func (s *seamFS) SyncFile(f *os.File) error {
	s.mu.Lock()
	s.synced = append(s.synced, filepath.Base(f.Name()))
	s.mu.Unlock()
	return f.Sync()
}

func (s *seamFS) LinkNoReplace(oldname, newname string) error {
	s.mu.Lock()
	s.renamed = append(s.renamed, filepath.Base(newname))
	s.mu.Unlock()
	return linkNoReplace(-100, oldname, -100, newname) // AT_FDCWD
}

// Every content write of a state file goes through a seam that is a
// Writer (new files, a Dir's new files, in-place rewrites), and a seam
// that is a NoReplaceLinker names a new file in one step: no temporary
// name is left beside it.
func TestContentWritesGoThroughTheSeam(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := &seamFS{}
	p := filepath.Join(dir, "a")
	require.NoError(t, CreateAtomically(s, p, []byte("one"), 0o600))
	require.NoError(t, ReplaceAtomically(s, filepath.Join(dir, "b"), []byte("two"), 0o600))
	d, err := OpenDir(dir, DirOptions{FS: s})
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.Create("c", []byte("three"), 0o600))
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, WriteInPlace(s, f, []byte("ONE"), true))

	assert.Len(t, s.writes, 4, "content writes through the seam: %v", s.writes)
	assert.Contains(t, s.writes, "a")
	assert.Len(t, s.synced, 4, "syncs through the seam: %v", s.synced)
	assert.Equal(t, []string{"a"}, s.renamed)
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, names, 3, "only a, b and c are left: %v", names)
	for name, want := range map[string]string{"a": "ONE", "b": "two", "c": "three"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, want, string(b))
	}
}
