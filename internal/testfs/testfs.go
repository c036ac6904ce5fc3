// Package testfs holds file-system helpers for snapid's tests: snapshots
// of a directory, to prove that a failed call changed nothing on disk, and
// a TestMain helper that keeps name bindings off the host. It is imported
// by tests only.
//
// Imports: the standard library and testify, nothing of snapid (so that
// snapid's own tests may use it). May be imported by _test.go files of
// this repository, never by non-test code.
package testfs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Entry is what a snapshot records of one directory entry.
type Entry struct {
	Mode     fs.FileMode
	Size     int64
	ModTime  time.Time
	Content  []byte // regular files that can be read
	Link     string // symbolic links
	Readable bool
}

// Snapshot records every entry under dir (recursively, without following
// links), keyed by the path relative to dir.
func Snapshot(t testing.TB, dir string) map[string]Entry {
	t.Helper()
	snap := map[string]Entry{}
	var walk func(d string)
	walk = func(d string) {
		ents, err := os.ReadDir(d)
		if err != nil {
			return // an unreadable directory: its own entry is recorded by the caller
		}
		for _, e := range ents {
			p := filepath.Join(d, e.Name())
			info, err := os.Lstat(p)
			require.NoError(t, err)
			ent := Entry{Mode: info.Mode(), Size: info.Size(), ModTime: info.ModTime()}
			switch {
			case info.Mode().IsRegular():
				if b, err := os.ReadFile(p); err == nil {
					ent.Content, ent.Readable = b, true
				}
			case info.Mode()&fs.ModeSymlink != 0:
				ent.Link, err = os.Readlink(p)
				require.NoError(t, err)
			case info.IsDir():
				ent.ModTime = time.Time{} // reading it may not change it, but be safe
				walk(p)
			}
			rel, err := filepath.Rel(dir, p)
			require.NoError(t, err)
			snap[rel] = ent
		}
	}
	walk(dir)
	return snap
}

var tempRE = regexp.MustCompile(`\.tmp-`)

// RequireNoTemp checks that dir holds no temporary file left by an atomic
// creation.
func RequireNoTemp(t testing.TB, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range ents {
		assert.False(t, tempRE.MatchString(e.Name()), "stray temporary file %s", e.Name())
	}
}

// RequireUnchanged requires dir to be exactly as in before (bytes, modes,
// sizes, times) and to hold no leftover temporary file.
func RequireUnchanged(t testing.TB, dir string, before map[string]Entry) {
	t.Helper()
	require.Equal(t, before, Snapshot(t, dir), "the failed call changed something on disk")
	RequireNoTemp(t, dir)
}

// CopyFiles copies the named files from one directory to another, as an
// operator copying a counter directory (or restoring a backup) would. An
// existing file is written in place, so its inode, and the locks on it,
// stay.
func CopyFiles(t testing.TB, from, to string, names ...string) {
	t.Helper()
	for _, f := range names {
		b, err := os.ReadFile(filepath.Join(from, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(to, f), b, 0o600))
	}
}
