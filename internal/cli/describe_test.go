package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry/registrytest"
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
	line := requireError(t, f.run(t, "next"))
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
	line := requireError(t, f.run(t, "show"))
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
	line := requireError(t, f.run(t, "next"))
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

	line := requireError(t, f.run(t, "next"))
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

// The longest errors snapctl prints (several hundred characters on one
// line) come out wrapped: the error first, then each piece of advice on
// lines of its own, indented, no line longer than errorWidth.
func TestLongErrorsWrapped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		run    func(t *testing.T, f *fakeEnv, dir string) result
		want   []string // in the error, in this order
		advice bool     // snapctl adds advice (else the library's error says what to do)
	}{
		{"registry unreachable", func(t *testing.T, f *fakeEnv, dir string) result {
			return f.run(t, "next", "--cassandra", "127.0.0.1:1", "--counter", filepath.Join(dir, "c.u64"))
		}, []string{"connection refused", "check that Cassandra is reachable", "nothing was issued", "'snapctl next --no-registry'"}, true},
		{"corrupt counter", func(t *testing.T, f *fakeEnv, dir string) result {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "c.u64"), []byte("abc"), 0o600))
			return f.run(t, "next", "--counter", filepath.Join(dir, "c.u64"))
		}, []string{"corrupt counter file", "nothing was changed", "'snapctl init --force --start N'"}, true},
		{"name bound to another counter", func(t *testing.T, f *fakeEnv, dir string) result {
			r := f.run(t, "next", "--counter", filepath.Join(dir, "a.u64"))
			require.Equal(t, exitOK, r.code, r.stderr)
			return f.run(t, "next", "--counter", filepath.Join(dir, "b.u64"))
		}, []string{"another counter file", "nothing was issued", "--counter or SNAPID_COUNTER"}, true},
		{"counter rolled back", func(t *testing.T, f *fakeEnv, dir string) result {
			r := f.run(t, "next", "-n", "5", "--counter", filepath.Join(dir, "a.u64"))
			require.Equal(t, exitOK, r.code, r.stderr)
			writeCounter(t, filepath.Join(dir, "a.u64"), 0)
			return f.run(t, "next", "--counter", filepath.Join(dir, "a.u64"))
		}, []string{"below what it had reached", "snapctl init --start 6"}, false},
		{"name held by this machine with another counter", func(t *testing.T, f *fakeEnv, dir string) result {
			f.inproc = &InProcess{Registry: registrytest.NewRegistry()}
			r := f.run(t, "register", "--counter", filepath.Join(dir, "a.u64"))
			require.Equal(t, exitOK, r.code, r.stderr)
			f.vars["SNAPID_BINDING_DIR"] = t.TempDir() // as if the host's record were lost
			return f.run(t, "register", "--counter", filepath.Join(dir, "b.u64"))
		}, []string{"node name taken", "the holder is this very machine", "do not take over your own name", "'snapctl release --force --start N'"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeEnv(t)
			f.vars["SNAPID_NAME"] = "web_1"
			r := tc.run(t, f, t.TempDir())
			line := requireError(t, r)
			assert.Greater(t, len(line), 2*errorWidth, "a long error: %s", line)
			lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
			assert.Greater(t, len(lines), 2, "wrapped: %q", r.stderr)
			for _, l := range lines {
				assert.LessOrEqual(t, utf8.RuneCountInString(l), errorWidth, "%q", l)
			}
			assert.True(t, strings.HasPrefix(lines[1], "    ") || strings.HasPrefix(lines[1], "  - "), "%q", r.stderr)
			if tc.advice {
				assert.Contains(t, r.stderr, "\n  - ", "advice on lines of its own")
			}
			at := 0
			for _, w := range tc.want {
				i := strings.Index(line[at:], w)
				require.GreaterOrEqual(t, i, 0, "%q after %d in %s", w, at, line)
				at += i
			}
		})
	}
}

// The layout of an error: the message wrapped at blanks, its further lines
// indented by four; the hint split into pieces of advice at "; " outside
// parentheses and quotes, each on lines of its own.
func TestFormatMessage(t *testing.T) {
	t.Parallel()
	word := strings.Repeat("w", 30)
	long := strings.Join([]string{word, word, word, word}, " ")
	path := "/" + strings.Repeat("p", 120)
	for _, tc := range []struct {
		name, msg, hint, want string
	}{
		{"short", "counter missing", "", "snapctl: counter missing\n"},
		{"advice", "bad", "do this; then that", "snapctl: bad\n  - do this\n  - then that\n"},
		{"not inside parentheses or quotes", "bad", "a (b; c); 'x; y' and \"u; v\"; host's d; e",
			"snapctl: bad\n  - a (b; c)\n  - 'x; y' and \"u; v\"\n  - host's d\n  - e\n"},
		{"wrapped", long, long, "snapctl: " + word + " " + word + "\n    " + word + " " + word + "\n" +
			"  - " + word + " " + word + " " + word + "\n    " + word + "\n"},
		{"a word longer than a line stays whole", "open " + path + ": gone", "",
			"snapctl: open\n    " + path + ":\n    gone\n"},
		{"blanks folded", "two\nlines  here", "", "snapctl: two lines here\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, formatMessage(tc.msg, tc.hint))
		})
	}
}
