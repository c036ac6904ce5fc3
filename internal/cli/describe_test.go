package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/engine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The per-user state directory snapctl makes is synced into its parent,
// each level top down, before the counter is created in it.
func TestCLIDefaultDirSynced(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	base := t.TempDir()
	f.vars["XDG_STATE_HOME"] = filepath.Join(base, "state")
	f.vars["SNAPID_NAME"] = "web_1"
	var synced []string
	f.syncDir = func(dir string) error {
		synced = append(synced, dir)
		return syncDir(dir)
	}
	r := f.run(t, "next")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, []string{base, filepath.Join(base, "state")}, synced,
		"the parent of each new directory, top down")

	synced = nil
	r = f.run(t, "next")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Empty(t, synced, "nothing made, nothing to sync")
}

func TestCLIDefaultDirSyncFailure(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	f.vars["SNAPID_NAME"] = "web_1"
	f.syncDir = func(string) error { return errors.New("injected sync failure") }
	line := requireOneErrorLine(t, f.run(t, "next"))
	assert.Contains(t, line, "sync directory")
	assert.Contains(t, line, "injected sync failure")
	_, err := os.Stat(filepath.Join(f.home, ".local", "state", "snapid", "counter.u64"))
	assert.ErrorIs(t, err, os.ErrNotExist, "no counter in a directory not yet durable")
}

// A corrupt mark file gets a hint that fixes it (remove the mark file, the
// next start rebuilds it), never the counter's repair.
func TestCLICorruptMarkHint(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	path := filepath.Join(t.TempDir(), "counter.u64")
	f.vars["SNAPID_COUNTER"] = path
	f.vars["SNAPID_NAME"] = "web_1"
	r := f.run(t, "init", "--start", "5")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NoError(t, os.WriteFile(path+".mark", make([]byte, 20), 0o600))
	line := requireOneErrorLine(t, f.run(t, "show"))
	assert.Contains(t, line, "corrupt mark file")
	assert.Contains(t, line, "it is 20 bytes")
	assert.Contains(t, line, "remove "+path+".mark")
	assert.NotContains(t, line, "init --force")
	assert.NotContains(t, line, "corrupt counter")
}

// Each file beside the counter has its own hint, told by the file the
// error names; none sends the operator to rewrite the counter.
func TestDescribeHostFileHints(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want []string
	}{
		{&engine.FileError{Op: "read", Path: "/c/x.u64.mark", Err: fmt.Errorf("corrupt mark file: it is 20 bytes: %w", engine.ErrCorrupt)},
			[]string{"remove /c/x.u64.mark", "rebuilds it from the registry"}},
		{&engine.FileError{Op: "read", Path: "/c/x.u64.owner", Err: fmt.Errorf("corrupt owner token file: it is 3 bytes: %w", engine.ErrCorrupt)},
			[]string{"restore /c/x.u64.owner", "snapctl register"}},
		{&engine.FileError{Op: "read", Path: "/c/x.u64.session", Err: fmt.Errorf("corrupt session file: earlier version: %w", engine.ErrCorrupt)},
			[]string{"stop them all", "rewrites /c/x.u64.session"}},
		{&engine.FileError{Op: "read", Path: "/c/x.u64.seq.orders", Err: fmt.Errorf("corrupt sequence lease file: checksum: %w", engine.ErrCorrupt)},
			[]string{"remove /c/x.u64.seq.orders", "takes a new lease"}},
		{&engine.FileError{Op: "record", Path: "/var/lib/snapid/records/web_1", Err: fmt.Errorf("corrupt name binding file: %w", engine.ErrCorrupt)},
			[]string{"nothing was issued"}},
		{&engine.FileError{Op: "read", Path: "/c/x.u64.forms", Err: fmt.Errorf("corrupt form history: %w", engine.ErrCorrupt)},
			[]string{"nothing was issued"}},
		{fmt.Errorf("snapid: %w: in use under the name %q", engine.ErrNameMismatch, "web_a"),
			[]string{"one counter file serves one node name", "--name"}},
	} {
		got := describe("next", tc.err)
		for _, w := range tc.want {
			assert.Contains(t, got, w)
		}
		assert.NotContains(t, got, "init --force", "%v", tc.err)
	}
}

// A damaged owner file is not taken for an unregistered counter: without
// the registry, next refuses it with the owner file's hint.
func TestCLINextCorruptOwnerWithoutRegistry(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	path := filepath.Join(t.TempDir(), "counter.u64")
	f.vars["SNAPID_COUNTER"] = path
	f.vars["SNAPID_NAME"] = "web_1"
	r := f.run(t, "init")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NoError(t, os.WriteFile(path+".owner", []byte("garbage\n"), 0o600))
	line := requireOneErrorLine(t, f.run(t, "next"))
	assert.Contains(t, line, "corrupt owner token file")
	assert.Contains(t, line, "restore "+path+".owner")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, admin.EncodeCounter(0), [8]byte(b), "nothing issued")
}

// With the registry: a corrupt mark stops next before the claim, the hint
// says to remove the mark file, and doing so works.
func TestRegistryCorruptMarkHintWorks(t *testing.T) {
	t.Parallel()
	f, _, _ := registryEnv(t)
	f.vars["SNAPID_NAME"] = "web_1"
	r := f.run(t, "next", "-n", "3")
	require.Equal(t, exitOK, r.code, r.stderr)
	nums := requireIDs(t, r.stdout, "web_1", 3)
	path := filepath.Join(f.home, ".local", "state", "snapid", "counter.u64")
	require.NoError(t, os.WriteFile(path+".mark", make([]byte, 20), 0o600))

	line := requireOneErrorLine(t, f.run(t, "next"))
	assert.Contains(t, line, "corrupt mark file")
	assert.Contains(t, line, "remove "+path+".mark")
	assert.NotContains(t, line, "init --force")
	b, err := os.ReadFile(path + ".mark")
	require.NoError(t, err)
	assert.Equal(t, make([]byte, 20), b, "the mark file is left as it was")

	require.NoError(t, os.Remove(path+".mark"))
	r = f.run(t, "next")
	require.Equal(t, exitOK, r.code, r.stderr)
	next := requireIDs(t, r.stdout, "web_1", 1)
	assert.Greater(t, next[0], nums[2], "no number is issued again")
	assert.True(t, strings.HasPrefix(r.stdout, "web_1-"))
}
