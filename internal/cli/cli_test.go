package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"bufio"
	"os/exec"
	"runtime/debug"
	"strconv"
	"syscall"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeEnv is a snapctl environment for in-process runs: its own variables,
// host name and home directory, and buffers for the outputs.
type fakeEnv struct {
	vars    map[string]string
	host    string
	hostErr error
	home    string
	homeErr error
	syncDir func(string) error // nil: the real one
	// checkReplication, if set, judges the registry's replication
	checkReplication func(*cassandra.Registry, context.Context) (cassandra.ReplicationReport, error)
	inproc           *InProcess // nil: none
	// setUpSchema, if set, makes the registry's schema (setup)
	setUpSchema func(context.Context, cassandra.Config) (cassandra.SchemaReport, error)
}

// newFakeEnv returns an environment with a temporary home, no variables
// and a valid host name.
func newFakeEnv(t *testing.T) *fakeEnv {
	t.Helper()
	// Each fake environment is a host of its own, with its own name
	// bindings.
	return &fakeEnv{vars: map[string]string{"SNAPID_BINDING_DIR": t.TempDir()}, host: "testhost", home: t.TempDir()}
}

type result struct {
	code           int
	stdout, stderr string
}

// run runs snapctl with args in f.
func (f *fakeEnv) run(t *testing.T, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, f.env(&stdout, &stderr))
	return result{code, stdout.String(), stderr.String()}
}

// env is f as snapctl's environment, writing to stdout and stderr.
func (f *fakeEnv) env(stdout, stderr io.Writer) env {
	return env{
		getenv: func(k string) string { return f.vars[k] },
		environ: func() []string {
			var kv []string
			for k, v := range f.vars {
				kv = append(kv, k+"="+v)
			}
			return kv
		},
		hostname:         func() (string, error) { return f.host, f.hostErr },
		homeDir:          func() (string, error) { return f.home, f.homeErr },
		userName:         func() (string, error) { return "tester", nil },
		stdin:            strings.NewReader(""),
		stdout:           stdout,
		stderr:           stderr,
		syncDir:          f.syncDir,
		checkReplication: f.checkReplication,
		inproc:           f.inproc,
		setUpSchema:      f.setUpSchema,
	}
}

// requireError requires exit status 2 and snapctl's error on stderr as
// formatError prints it: a first line "snapctl: …", then indented lines
// (the message's further lines by four, each piece of advice starting
// "  - "), none longer than errorWidth unless it holds one word. It
// returns the error in one line, the message and the advice joined by
// "; ", as describe writes it.
func requireError(t *testing.T, r result) string {
	t.Helper()
	require.Equal(t, exitFailure, r.code, "stdout: %q\nstderr: %q", r.stdout, r.stderr)
	require.True(t, strings.HasSuffix(r.stderr, "\n"), "stderr: %q", r.stderr)
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	require.True(t, strings.HasPrefix(lines[0], "snapctl: "), "stderr: %q", r.stderr)
	parts := []string{strings.TrimPrefix(lines[0], "snapctl: ")}
	for _, l := range lines {
		if utf8.RuneCountInString(l) > errorWidth {
			require.Len(t, strings.Fields(strings.TrimPrefix(l, "  - ")), 1, "a line longer than %d: %q", errorWidth, l)
		}
	}
	for _, l := range lines[1:] {
		switch {
		case strings.HasPrefix(l, "  - "):
			parts = append(parts, strings.TrimPrefix(l, "  - "))
		case strings.HasPrefix(l, "    ") && strings.TrimSpace(l) != "":
			parts[len(parts)-1] += " " + strings.TrimSpace(l)
		default:
			require.Failf(t, "not snapctl's error", "line %q of stderr: %q", l, r.stderr)
		}
	}
	return strings.Join(parts, "; ")
}

// requireIDs requires stdout to be n consecutive ids of name and returns
// their numbers.
func requireIDs(t *testing.T, stdout, name string, n int) []uint64 {
	t.Helper()
	require.True(t, strings.HasSuffix(stdout, "\n"), "stdout: %q", stdout)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Len(t, lines, n, "stdout: %q", stdout)
	var nums []uint64
	for i, l := range lines {
		id, err := engine.ParseID(l)
		require.NoError(t, err)
		require.Equal(t, name, id.Name)
		if i > 0 {
			require.Equal(t, nums[i-1]+1, id.Number, "ids are dense: %q", stdout)
		}
		nums = append(nums, id.Number)
	}
	return nums
}

// requireEmptyDir requires dir to hold nothing.
func requireEmptyDir(t *testing.T, dir string, msgAndArgs ...any) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, ents, msgAndArgs...)
}

func counterValue(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	v, err := admin.DecodeCounter(b)
	require.NoError(t, err)
	return v
}

func writeCounter(t *testing.T, path string, v uint64) {
	t.Helper()
	b := admin.EncodeCounter(v)
	require.NoError(t, os.WriteFile(path, b[:], 0o600))
}

// listTree returns every path under dir, relative, with its mode and, for
// files, content; to prove that a failed command changed nothing.
func listTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		v := info.Mode().String()
		if info.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += fmt.Sprintf(" %x", b)
		}
		out[rel] = v
		return nil
	}))
	return out
}

func TestCLINextDefaultCounter(t *testing.T) {
	t.Parallel()
	t.Run("XDG_STATE_HOME", func(t *testing.T) {
		f := newFakeEnv(t)
		state := filepath.Join(t.TempDir(), "state")
		f.vars["XDG_STATE_HOME"] = state
		f.vars["SNAPID_NAME"] = "web_1"
		r := f.run(t, "next")
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.Equal(t, "web_1-1\n", r.stdout)
		assert.Empty(t, withoutNoRegistryNotice(t, r.stderr, "web_1"))
		path := filepath.Join(state, "snapid", "counter.u64")
		assert.Equal(t, uint64(1), counterValue(t, path))
		info, err := os.Stat(filepath.Dir(path))
		require.NoError(t, err)
		assert.Zero(t, info.Mode().Perm()&0o077, "the per-user state directory is private")
		_, err = os.Stat(filepath.Join(f.home, ".local"))
		assert.ErrorIs(t, err, fs.ErrNotExist, "the home fallback is not used")
	})
	for _, xdg := range []string{"", "relative/state"} {
		t.Run(fmt.Sprintf("home fallback XDG_STATE_HOME=%q", xdg), func(t *testing.T) {
			f := newFakeEnv(t)
			if xdg != "" {
				f.vars["XDG_STATE_HOME"] = xdg // not absolute: ignored
			}
			f.vars["SNAPID_NAME"] = "web_1"
			r := f.run(t, "next")
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Equal(t, "web_1-1\n", r.stdout)
			path := filepath.Join(f.home, ".local", "state", "snapid", "counter.u64")
			assert.Equal(t, uint64(1), counterValue(t, path))
			r = f.run(t, "next")
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Equal(t, "web_1-2\n", r.stdout)
		})
	}
	t.Run("no home directory", func(t *testing.T) {
		f := newFakeEnv(t)
		f.vars["SNAPID_NAME"] = "web_1"
		f.homeErr = errors.New("$HOME is not defined")
		line := requireError(t, f.run(t, "next"))
		assert.Contains(t, line, "home directory")
	})
}

func TestCLINextN(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	path := filepath.Join(t.TempDir(), "counter.u64")
	r := f.run(t, "next", "-n", "5", "--name", "web_1", "--counter", path)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, []uint64{1, 2, 3, 4, 5}, requireIDs(t, r.stdout, "web_1", 5))
	assert.Equal(t, uint64(5), counterValue(t, path))

	r = f.run(t, "next", "--n=3", "--name=web_1", "--counter="+path, "--sync=false")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, []uint64{6, 7, 8}, requireIDs(t, r.stdout, "web_1", 3))

	line := requireError(t, f.run(t, "next", "-n", "0", "--name", "web_1", "--counter", path))
	assert.Contains(t, line, "-n must be at least 1")
	line = requireError(t, f.run(t, "next", "-n", "-3", "--name", "web_1", "--counter", path))
	assert.Contains(t, line, "-n")
	assert.Equal(t, uint64(8), counterValue(t, path), "failed commands issue nothing")
}

func TestCLIEnvAndFlagPrecedence(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	envPath := filepath.Join(dir, "env.u64")
	flagPath := filepath.Join(dir, "flag.u64")
	f := newFakeEnv(t)
	f.vars["SNAPID_NAME"] = "env_name"
	f.vars["SNAPID_COUNTER"] = envPath

	r := f.run(t, "next")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "env_name-1\n", r.stdout, "environment over defaults")
	assert.Empty(t, withoutNoRegistryNotice(t, r.stderr, "env_name"), "no notice of the name when it is configured")

	r = f.run(t, "next", "--name", "flag_name", "--counter", flagPath)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "flag_name-1\n", r.stdout, "flags over environment")
	assert.Equal(t, uint64(1), counterValue(t, envPath), "the environment's counter is not touched")
	assert.Equal(t, uint64(1), counterValue(t, flagPath))

	// (flag_name goes with flagPath now, env_name with envPath: one name,
	// one counter, and one counter, one name, per host.)
	r = f.run(t, "next", "--name", "other_name")
	require.Equal(t, exitFailure, r.code, "a second name on the environment's counter")
	assert.Contains(t, r.stderr, `holds the name "env_name"`)
	otherPath := filepath.Join(dir, "other.u64")
	f.vars["SNAPID_COUNTER"] = otherPath
	r = f.run(t, "next", "--name", "other_name")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "other_name-1\n", r.stdout, "--name with SNAPID_COUNTER")
	assert.Equal(t, uint64(1), counterValue(t, envPath), "the refused name issued nothing")
	f.vars["SNAPID_COUNTER"] = envPath

	r = f.run(t, "show", "--counter", flagPath)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, flagPath)

	// An invalid SNAPID_NAME is refused even when the host name is fine.
	f.vars["SNAPID_NAME"] = "Env-Name"
	line := requireError(t, f.run(t, "next"))
	assert.Contains(t, line, registry.NameRule)
	assert.Equal(t, uint64(1), counterValue(t, envPath))
}

func TestCLINameFromHostname(t *testing.T) {
	t.Parallel()
	tests := []struct {
		host   string
		want   string
		notice []string
	}{
		{"Web-01.example.com", "web_01", []string{`"web_01"`, "Web-01.example.com", "lower-cased"}},
		{"db1", "db1", []string{`"db1"`, "from the host name"}},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			f := newFakeEnv(t)
			f.host = tt.host
			path := filepath.Join(t.TempDir(), "counter.u64")
			r := f.run(t, "next", "--counter", path)
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Equal(t, tt.want+"-1\n", r.stdout)
			lines := strings.Split(strings.TrimSuffix(withoutNoRegistryNotice(t, r.stderr, tt.want), "\n"), "\n")
			require.Len(t, lines, 1, "one notice line: %q", r.stderr)
			assert.True(t, strings.HasPrefix(lines[0], "snapctl: notice: "), lines[0])
			for _, s := range tt.notice {
				assert.Contains(t, lines[0], s)
			}
		})
	}
	t.Run("host name that cannot be a name", func(t *testing.T) {
		f := newFakeEnv(t)
		f.host = "1st.example.com"
		dir := t.TempDir()
		line := requireError(t, f.run(t, "next", "--counter", filepath.Join(dir, "counter.u64")))
		assert.Contains(t, line, registry.NameRule)
		assert.Contains(t, line, "--name")
		requireEmptyDir(t, dir, "nothing created")
	})
	t.Run("unknown host name", func(t *testing.T) {
		f := newFakeEnv(t)
		f.hostErr = errors.New("no host name")
		line := requireError(t, f.run(t, "next", "--counter", filepath.Join(t.TempDir(), "c.u64")))
		assert.Contains(t, line, "host name")
	})
}

func TestCLIInvalidNameCreatesNothing(t *testing.T) {
	t.Parallel()
	names := []string{"", "Web", "web-1", "web.1", "1web", "w b", "caf\u00e9", "a\tb", "a\nb", strings.Repeat("a", 64)}
	for _, name := range names {
		t.Run(fmt.Sprintf("%q", name), func(t *testing.T) {
			f := newFakeEnv(t)
			state := filepath.Join(t.TempDir(), "state")
			f.vars["XDG_STATE_HOME"] = state
			explicit := t.TempDir()
			for _, args := range [][]string{
				{"next", "--name", name},
				{"next", "--name", name, "--counter", filepath.Join(explicit, "counter.u64")},
			} {
				if name == "" {
					// An empty --name means "not given": the host name
					// is used. Use an invalid host name instead.
					f.host = "Bad Host"
				}
				line := requireError(t, f.run(t, args...))
				assert.Contains(t, line, registry.NameRule, "the message states the rule")
				_, err := os.Stat(state)
				assert.ErrorIs(t, err, fs.ErrNotExist, "no state directory created")
				requireEmptyDir(t, explicit, "nothing created")
			}
		})
	}
}

func TestCLIBadCounter(t *testing.T) {
	t.Parallel()
	t.Run("missing parent directory", func(t *testing.T) {
		f := newFakeEnv(t)
		dir := t.TempDir()
		before := listTree(t, dir)
		for _, cmd := range []string{"next", "init"} {
			args := []string{cmd, "--name", "web_1", "--counter", filepath.Join(dir, "no", "counter.u64")}
			if cmd == "init" {
				args = []string{cmd, "--counter", filepath.Join(dir, "no", "counter.u64")}
			}
			line := requireError(t, f.run(t, args...))
			assert.Contains(t, line, filepath.Join(dir, "no", "counter.u64"))
			assert.Contains(t, line, "the directory "+filepath.Join(dir, "no")+" does not exist", "the directory is named")
			assert.NotContains(t, line, ".tmp-", "not the temporary file")
			assert.Contains(t, line, "create it first, owned by the user the programs using the counter run as (e.g. install -d -m 0700 "+filepath.Join(dir, "no")+")")
			assert.Equal(t, 1, strings.Count(line, "create it"), "said once: %s", line)
			assert.NotContains(t, line, "snapctl init", "%s: init would not help", cmd)
			assert.Equal(t, before, listTree(t, dir), "nothing created")
		}
	})
	for _, size := range []int{0, 3, 9} {
		t.Run(fmt.Sprintf("corrupt %d bytes", size), func(t *testing.T) {
			f := newFakeEnv(t)
			dir := t.TempDir()
			path := filepath.Join(dir, "counter.u64")
			require.NoError(t, os.WriteFile(path, bytes.Repeat([]byte{7}, size), 0o600))
			before := listTree(t, dir)
			for _, args := range [][]string{
				{"next", "--name", "web_1", "--counter", path},
				{"show", "--counter", path},
				{"show", "--json", "--counter", path},
				{"init", "--start", "5", "--counter", path},
			} {
				line := requireError(t, f.run(t, args...))
				assert.Contains(t, line, path)
				assert.Contains(t, line, "corrupt")
				assert.Contains(t, line, "init --force --start N", "it says what to do")
				assert.Equal(t, before, listTree(t, dir), "%v changed the file", args)
			}
		})
	}
	t.Run("directory", func(t *testing.T) {
		f := newFakeEnv(t)
		dir := t.TempDir()
		line := requireError(t, f.run(t, "next", "--name", "web_1", "--counter", dir))
		assert.Contains(t, line, "not a regular file")
	})
	t.Run("symlink", func(t *testing.T) {
		f := newFakeEnv(t)
		dir := t.TempDir()
		writeCounter(t, filepath.Join(dir, "real"), 3)
		path := filepath.Join(dir, "counter.u64")
		require.NoError(t, os.Symlink("real", path))
		before := listTree(t, dir)
		line := requireError(t, f.run(t, "next", "--name", "web_1", "--counter", path))
		assert.Contains(t, line, "symbolic link")
		assert.Equal(t, before, listTree(t, dir))
	})
}

func TestCLIShow(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	path := filepath.Join(t.TempDir(), "counter.u64")
	writeCounter(t, path, 18446744073709551615)
	r := f.run(t, "show", "--counter", path)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, "last issued 18446744073709551615\t"+path+"\n", r.stdout)
	assert.Empty(t, r.stderr)

	r = f.run(t, "show", "--json", "--counter", path)
	require.Equal(t, exitOK, r.code, r.stderr)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	assert.Equal(t, map[string]any{"path": path, "last_issued": "18446744073709551615"}, got,
		"the number is a JSON string, so it survives JavaScript")

	t.Run("missing default counter is not created", func(t *testing.T) {
		f := newFakeEnv(t)
		state := filepath.Join(t.TempDir(), "state")
		f.vars["XDG_STATE_HOME"] = state
		line := requireError(t, f.run(t, "show"))
		assert.Contains(t, line, "snapctl init")
		_, err := os.Stat(state)
		assert.ErrorIs(t, err, fs.ErrNotExist)
	})
}

func TestCLIInit(t *testing.T) {
	t.Parallel()
	t.Run("start 42 then next", func(t *testing.T) {
		f := newFakeEnv(t)
		path := filepath.Join(t.TempDir(), "counter.u64")
		r := f.run(t, "init", "--start", "42", "--counter", path)
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.Contains(t, r.stdout, "next number 42")
		assert.Equal(t, uint64(41), counterValue(t, path))
		r = f.run(t, "next", "--name", "web_1", "--counter", path)
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.Equal(t, "web_1-42\n", r.stdout)
	})
	t.Run("default start on the default path", func(t *testing.T) {
		f := newFakeEnv(t)
		r := f.run(t, "init")
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.Equal(t, uint64(0), counterValue(t, filepath.Join(f.home, ".local", "state", "snapid", "counter.u64")))
	})
	t.Run("raises", func(t *testing.T) {
		f := newFakeEnv(t)
		path := filepath.Join(t.TempDir(), "counter.u64")
		writeCounter(t, path, 10)
		r := f.run(t, "init", "--start", "100", "--counter", path)
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.Contains(t, r.stdout, "(was 11)")
		assert.Equal(t, uint64(99), counterValue(t, path))
	})
	t.Run("refuses to lower", func(t *testing.T) {
		f := newFakeEnv(t)
		dir := t.TempDir()
		path := filepath.Join(dir, "counter.u64")
		writeCounter(t, path, 100)
		before := listTree(t, dir)
		line := requireError(t, f.run(t, "init", "--start", "5", "--counter", path))
		assert.Contains(t, line, "never lowered")
		assert.Equal(t, before, listTree(t, dir))
	})
	t.Run("start 0", func(t *testing.T) {
		f := newFakeEnv(t)
		dir := t.TempDir()
		line := requireError(t, f.run(t, "init", "--start", "0", "--counter", filepath.Join(dir, "c.u64")))
		assert.Contains(t, line, "--start")
		requireEmptyDir(t, dir)
	})
	t.Run("force without start", func(t *testing.T) {
		f := newFakeEnv(t)
		dir := t.TempDir()
		path := filepath.Join(dir, "counter.u64")
		require.NoError(t, os.WriteFile(path, []byte{1, 2, 3}, 0o600))
		before := listTree(t, dir)
		line := requireError(t, f.run(t, "init", "--force", "--counter", path))
		assert.Contains(t, line, "--start")
		assert.Equal(t, before, listTree(t, dir))
	})
	t.Run("force on a corrupt file", func(t *testing.T) {
		f := newFakeEnv(t)
		dir := t.TempDir()
		path := filepath.Join(dir, "counter.u64")
		require.NoError(t, os.WriteFile(path, []byte{1, 2, 3}, 0o600))
		r := f.run(t, "init", "--force", "--start", "100", "--counter", path)
		require.Equal(t, exitOK, r.code, r.stderr)
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		require.Len(t, lines, 1, r.stderr)
		assert.True(t, strings.HasPrefix(lines[0], "snapctl: WARNING: "), lines[0])
		assert.Contains(t, lines[0], "3 bytes 01 02 03", "it says what the file held")
		assert.Contains(t, lines[0], "100")
		assert.Equal(t, uint64(99), counterValue(t, path))
		r = f.run(t, "next", "--name", "web_1", "--counter", path)
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.Equal(t, "web_1-100\n", r.stdout)
	})
	t.Run("force lowers a valid file loudly", func(t *testing.T) {
		f := newFakeEnv(t)
		path := filepath.Join(t.TempDir(), "counter.u64")
		writeCounter(t, path, 500)
		r := f.run(t, "init", "--force", "--start", "10", "--counter", path)
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.Contains(t, r.stderr, "WARNING")
		assert.Contains(t, r.stderr, "last issued 500")
		assert.Equal(t, uint64(9), counterValue(t, path))
	})
	t.Run("force on a missing file", func(t *testing.T) {
		f := newFakeEnv(t)
		dir := t.TempDir()
		requireError(t, f.run(t, "init", "--force", "--start", "10", "--counter", filepath.Join(dir, "c.u64")))
		requireEmptyDir(t, dir, "Repair never creates")
	})
}

// A usage error must not change anything on disk; "init --force" without
// --start creates the per-user state directory before it refuses.
func TestCLIInitForceUsageErrorCreatesNothing(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	state := filepath.Join(t.TempDir(), "state")
	f.vars["XDG_STATE_HOME"] = state
	line := requireError(t, f.run(t, "init", "--force"))
	assert.Contains(t, line, "--start")
	_, err := os.Stat(state)
	assert.ErrorIs(t, err, fs.ErrNotExist, "a refused command created %s", state)
}

func TestCLIUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"unknown flag", []string{"next", "--bogus"}, "bogus"},
		{"unknown flag on show", []string{"show", "-x"}, "-x"},
		{"flag of another command", []string{"show", "--start", "3"}, "start"},
		{"extra argument", []string{"next", "extra"}, `unexpected argument "extra"`},
		{"extra argument after flags", []string{"show", "--json", "x"}, `unexpected argument "x"`},
		{"extra argument to version", []string{"version", "now"}, `unexpected argument "now"`},
		{"bad flag value", []string{"next", "-n", "many"}, "many"},
		{"bad bool", []string{"next", "--sync=maybe"}, "maybe"},
		{"help for an unknown command", []string{"help", "frobnicate"}, "frobnicate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeEnv(t)
			f.vars["SNAPID_COUNTER"] = filepath.Join(t.TempDir(), "counter.u64")
			r := f.run(t, tt.args...)
			line := requireError(t, r)
			assert.Contains(t, line, tt.want)
			assert.Contains(t, line, "snapctl help", "it says what to do")
			assert.Empty(t, r.stdout)
			_, err := os.Stat(f.vars["SNAPID_COUNTER"])
			assert.ErrorIs(t, err, fs.ErrNotExist, "nothing created")
		})
	}
}

// snapctl without a command prints the whole usage on stderr before its
// one-line message, so stderr is not one line.
func TestCLINoCommandOneLine(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	line := requireError(t, f.run(t))
	assert.Contains(t, line, "no command")
	assert.Contains(t, line, "snapctl help")
}

func TestCLIVersionAndHelp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"version"}, []string{"snapctl "}},
		{[]string{"help"}, []string{"usage: snapctl", "next", "show", "init", "version", "help"}},
		{[]string{"--help"}, []string{"usage: snapctl"}},
		{[]string{"-h"}, []string{"usage: snapctl"}},
		{[]string{"help", "next"}, []string{"usage: snapctl next", "N new ids"}},
		{[]string{"help", "init"}, []string{"usage: snapctl init", "--start"}},
		{[]string{"next", "--help"}, []string{"usage: snapctl next", "-n"}},
		{[]string{"init", "-h"}, []string{"usage: snapctl init", "-start", "-force"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			f := newFakeEnv(t)
			f.vars["SNAPID_COUNTER"] = filepath.Join(t.TempDir(), "counter.u64")
			r := f.run(t, tt.args...)
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Empty(t, r.stderr)
			for _, w := range tt.want {
				assert.Contains(t, r.stdout, w)
			}
			_, err := os.Stat(f.vars["SNAPID_COUNTER"])
			assert.ErrorIs(t, err, fs.ErrNotExist, "nothing created")
		})
	}
}

// "help <command>" prints a "flags:" heading and then no flags at all.
func TestCLIHelpCommandListsFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cmd   string
		flags []string
	}{
		{"next", []string{"  -n N", "  --name string", "  --counter string", "  --sync", "  --no-registry", "  --cassandra string"}},
		{"init", []string{"  --start N", "  --force", "  --counter string"}},
		{"show", []string{"  --json", "  --counter string"}},
		{"check-names", []string{"  --stale duration", "  --json"}},
		{"setup", []string{"  --replication string", "  --stride N"}},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			f := newFakeEnv(t)
			r := f.run(t, "help", tt.cmd)
			require.Equal(t, exitOK, r.code, r.stderr)
			_, flagsPart, ok := strings.Cut(r.stdout, "flags:")
			require.True(t, ok, r.stdout)
			for _, fl := range tt.flags {
				assert.Contains(t, flagsPart, fl, "help %s does not list %s", tt.cmd, fl)
			}
			// Flags are written as the documentation writes them:
			// --flag, and -n for the one-letter one.
			for _, line := range strings.Split(flagsPart, "\n") {
				if strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "  --") {
					assert.True(t, strings.HasPrefix(line, "  -n "), "help %s: %q", tt.cmd, line)
				}
			}
		})
	}
}

// Registry errors get the hint that fits their cause (the driver's error
// code, else the text of the innermost errors, never the user's host or
// keyspace names); an exhausted reservation keeps its own hint.
func TestDescribeRegistryHints(t *testing.T) {
	t.Parallel()
	connecting := func(hosts, cause string) error {
		return fmt.Errorf("snapid: %w: connecting to Cassandra at %s: %w", engine.ErrRegistry, hosts, errors.New(cause))
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{connecting("127.0.0.1:1", "dial tcp 127.0.0.1:1: connect: connection refused"), "reachable"},
		{connecting("tls-x509-permission:9042", "dial tcp: connect: connection refused"), "reachable"},
		{connecting("db1", `gocql: unable to create session: authentication required (using "PasswordAuthenticator")`), "SNAPID_CASSANDRA_PASSWORD"},
		{connecting("db1", "gocql: unable to create session: Provided username x and/or password are incorrect"), "--username"},
		{connecting("db1", "gocql: unable to create session: tls: failed to verify certificate: x509: certificate signed by unknown authority"), "--tls-ca"},
		{fmt.Errorf("snapid: %w: creating keyspace k: %w", engine.ErrRegistry, requestError{gocql.ErrCodeUnauthorized, "User x has no CREATE permission"}), "SELECT and MODIFY"},
		{fmt.Errorf("snapid: %w: claim: %w", engine.ErrRegistry, requestError{gocql.ErrCodeCredentials, "bad credentials"}), "--username"},
		{fmt.Errorf("snapid: %w: table permissions_ks.node_names does not exist", engine.ErrRegistry), "--keyspace"},
		{fmt.Errorf("snapid: %w: %w: extend: timeout", engine.ErrReservationExhausted, engine.ErrRegistry), "reserved range"},
		{fmt.Errorf("snapid: %w: %w: extend: %w", engine.ErrReservationExhausted, engine.ErrRegistry, requestError{gocql.ErrCodeUnauthorized, "no MODIFY"}), "SELECT and MODIFY"},
	} {
		got := describe("next", tc.err)
		assert.Contains(t, got, tc.want, "%v", tc.err)
		assert.NotContains(t, got, "snapid: ", "the message is not prefixed twice")
	}
}

// requestError is an error the server returned with a code, as the driver
// reports it.
type requestError struct {
	code int
	msg  string
}

func (e requestError) Code() int       { return e.code }
func (e requestError) Message() string { return e.msg }
func (e requestError) Error() string   { return e.msg }

// A command without flags prints no empty "flags:" heading.
func TestCLIHelpWithoutFlags(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	r := f.run(t, "help", "version")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "usage: snapctl version")
	assert.NotContains(t, r.stdout, "flags:")
}

// Hints never repeat what the message already says.
func TestDescribeSaysThingsOnce(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		fmt.Errorf("snapid: %w: %q was released on this host (x records it); claim it again on purpose (snapctl register, or WithReclaim)", engine.ErrReleased, "web_1"),
		fmt.Errorf("snapid: %w: sequence \"a\": max 5 is below 9, which it already handed out; nothing was changed", engine.ErrInvalidOption),
		fmt.Errorf("%w: the counter is in use under \"a\"; nothing was changed", engine.ErrNameMismatch),
	} {
		msg := describe("next", err)
		for _, phrase := range []string{"nothing was changed", "nothing was issued", "claim it again on purpose", "snapctl register"} {
			assert.LessOrEqual(t, strings.Count(msg, phrase), 1, "%q said twice: %s", phrase, msg)
		}
	}
}

// Every command's --help writes its flags as --flag; snapctl help --help
// is the help; a value a flag cannot take says what is wanted, with the
// flag as --flag.
func TestCLIFlagWording(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	for _, cmd := range commands {
		if cmd.name == "help" || cmd.name == "seq" {
			continue
		}
		r := f.run(t, cmd.name, "--help")
		require.Equal(t, exitOK, r.code, "%s: %s", cmd.name, r.stderr)
		for _, line := range strings.Split(r.stdout, "\n") {
			if strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "  --") {
				assert.True(t, strings.HasPrefix(line, "  -n "), "%s --help: %q", cmd.name, line)
			}
		}
	}
	for _, sub := range []string{"create", "next", "show"} {
		r := f.run(t, "seq", sub, "--help")
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.Contains(t, r.stdout, "  --cassandra string", sub)
		assert.NotContains(t, r.stdout, "  -cassandra", sub)
	}
	for _, args := range [][]string{{"help", "--help"}, {"help", "-h"}} {
		r := f.run(t, args...)
		require.Equal(t, exitOK, r.code, "%v: %s", args, r.stderr)
		assert.Contains(t, r.stdout, "usage: snapctl <command> [flags]", args)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"check-names", "--stale", "10"}, `--stale "10": want a duration with its unit, such as 10m, 90s or 1h30m`},
		{[]string{"show", "--timeout", "30"}, `--timeout "30": want a duration with its unit`},
		{[]string{"next", "--bogus"}, "next has no flag --bogus"},
		{[]string{"next", "--sync=maybe"}, `--sync "maybe"`},
	} {
		line := requireError(t, f.run(t, tc.args...))
		assert.Contains(t, line, tc.want, tc.args)
		assert.NotRegexp(t, `(^|[ (])-[a-z]{2,}`, line, "flags are written --flag: %v", tc.args)
	}
}

// next's outage error names the documented fallback (next --no-registry,
// docs/operations.md's outage section); the other commands', which it
// would not help, do not. A missing keyspace gets one advice from every
// command, the one docs/reference/cli.md gives: only setup makes a named
// keyspace, a first claim only the default one.
func TestDescribeOutageFallbackAndMissingKeyspace(t *testing.T) {
	t.Parallel()
	unreachable := fmt.Errorf("snapid: %w: connecting to Cassandra at 127.0.0.1:1: %w", engine.ErrRegistry,
		errors.New("dial tcp 127.0.0.1:1: connect: connection refused"))
	got := describe("next", unreachable)
	assert.Contains(t, got, "reachable")
	assert.Contains(t, got, "'snapctl next --no-registry'")
	assert.Contains(t, got, "docs/operations.md")
	for _, cmd := range []string{"register", "release", "names", "check-names", "status"} {
		assert.NotContains(t, describe(cmd, unreachable), "--no-registry", cmd)
	}
	missing := fmt.Errorf("snapid: %w: table frtest_nope.node_names does not exist", engine.ErrRegistry)
	for _, cmd := range []string{"next", "register", "names", "check-names", "status"} {
		got := describe(cmd, missing)
		assert.Contains(t, got, "check --keyspace (SNAPID_KEYSPACE)", cmd)
		assert.Contains(t, got, "'snapctl setup --keyspace NAME", cmd)
		assert.NotContains(t, got, "first 'snapctl register'", "%s: a first claim makes no named keyspace", cmd)
	}
	advice := func(msg string) string { _, a, _ := strings.Cut(msg, "does not exist; "); return a }
	assert.Equal(t, advice(describe("names", missing)),
		advice(describe("next", fmt.Errorf("%w: %w", cassandra.ErrNoKeyspace, errors.New("keyspace frtest_nope does not exist")))),
		"the same advice as next's for cassandra.ErrNoKeyspace")
}

// snapctl built from this repository's checkout (with VCS stamping, which a
// machine's GOFLAGS may turn off) prints the checkout's revision.
func TestCLIVersionOfBuiltBinary(t *testing.T) {
	t.Parallel()
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "snapctl")
	out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "../../cmd/snapctl").CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(bin, "version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	rev := strings.TrimSpace(string(head))
	got := string(out)
	// The module version is a pseudo-version of the commit (its form
	// depends on the tags before it) or, at a tag, the tag.
	assert.Regexp(t, `^snapctl v\S+ \(revision `+rev+` of \S+, (with local changes, )?go\S+\)\n$`, got)
	dirty := strings.Contains(got, "with local changes")
	assert.Equal(t, dirty, strings.Contains(got, "+dirty"), "a build with local changes says so in the version and beside the revision: %s", got)
	if !strings.Contains(got, "-"+rev[:12]) {
		tag, err := exec.Command("git", "describe", "--tags", "--exact-match", "HEAD").Output()
		require.NoError(t, err, "not a pseudo-version of %s, and HEAD has no tag: %s", rev, got)
		assert.Contains(t, got, "snapctl "+strings.TrimSpace(string(tag)))
	}
}

// Flags before the command are the command's flags.
func TestCLIFlagsBeforeCommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string // stdout
		fail string // part of the error line
	}{
		{name: "name then command", args: []string{"--name", "web", "next"}, want: "web-1\n"},
		{name: "several, with =", args: []string{"--name=web", "--sync=false", "next", "-n", "2"}, want: "web-1\nweb-2\n"},
		{name: "bool flag then valued flag", args: []string{"--sync", "--name", "web", "next"}, want: "web-1\n"},
		{name: "seq: after the subcommand and NAME", args: []string{"--name", "web", "--cassandra", "127.0.0.1:1", "--timeout", "2s", "seq", "next", "orders"}, fail: "reachable"},
		{name: "seq: flags between the subcommand and NAME", args: []string{"--name", "web", "seq", "next", "--cassandra", "127.0.0.1:1", "--timeout", "2s", "orders"}, fail: "reachable"},
		{name: "seq: flags before the subcommand", args: []string{"seq", "--cassandra", "127.0.0.1:1", "--timeout=2s", "create", "orders"}, fail: "reachable"},
		{name: "seq: flags before NAME", args: []string{"seq", "create", "--keyspace", "k", "--cassandra", "127.0.0.1:1", "--timeout", "2s", "orders"}, fail: "reachable"},
		{name: "value missing", args: []string{"--name"}, fail: "--name needs a value"},
		{name: "no command", args: []string{"--name", "web"}, fail: "no command given after the flags --name web"},
		{name: "a flag the command does not have", args: []string{"--name", "web", "version"}, fail: "-name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeEnv(t)
			f.vars["SNAPID_COUNTER"] = filepath.Join(t.TempDir(), "counter.u64")
			r := f.run(t, tc.args...)
			if tc.fail != "" {
				assert.Contains(t, requireError(t, r), tc.fail)
				assert.NoFileExists(t, f.vars["SNAPID_COUNTER"])
				return
			}
			require.Equal(t, exitOK, r.code, r.stderr)
			assert.Equal(t, tc.want, r.stdout)
		})
	}
}

// A flag that would do nothing for a command is refused, and nothing is
// done.
func TestCLIFlagsThatDoNothingRefused(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"version", "--counter", "x"},
		{"show", "--name", "web_1"},
		{"show", "--sync=false"},
		{"init", "--name", "web_1"},
		{"setup", "--counter", "x", "--replication", "1"},
		{"names", "--name", "web_1"},
		{"release", "--sync=false"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			f := newFakeEnv(t)
			f.vars["SNAPID_COUNTER"] = filepath.Join(t.TempDir(), "counter.u64")
			line := requireError(t, f.run(t, args...))
			flagName, _, _ := strings.Cut(args[1], "=")
			assert.Contains(t, line, args[0]+" has no flag "+flagName)
			assert.NoFileExists(t, f.vars["SNAPID_COUNTER"])
		})
	}
}

// version and --version print the module version and the VCS revision.
func TestCLIVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"released", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}},
			"v1.2.3 (go1.26.8)"},
		{"from a checkout", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261123101500-0dab78d4ab12"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0dab78d4ab12"}, {Key: "vcs.time", Value: "2026-11-23T10:15:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			"v0.0.0-20261123101500-0dab78d4ab12 (revision 0dab78d4ab12 of 2026-11-23T10:15:00Z, with local changes, go1.26.8)"},
		{"clean checkout", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}},
			"(devel) (revision abc)"},
		{"no VCS", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			"(devel) (no VCS revision: built with -buildvcs=false or outside a repository, go1.26.8)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, versionOf(tc.info, true))
		})
	}
	assert.Equal(t, "unknown (no build information)", versionOf(nil, false))

	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		f := newFakeEnv(t)
		r := f.run(t, args...)
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.Equal(t, "snapctl "+version()+"\n", r.stdout)
	}
}

// The command list is aligned, check-names included.
func TestCLIHelpAligned(t *testing.T) {
	t.Parallel()
	f := newFakeEnv(t)
	r := f.run(t, "help")
	require.Equal(t, exitOK, r.code)
	_, list, _ := strings.Cut(r.stdout, "commands:\n")
	list, _, _ = strings.Cut(list, "\n\n")
	col := -1
	for _, line := range strings.Split(list, "\n") {
		cmd := strings.Fields(line)[0]
		at := strings.Index(line, cmd) + len(cmd)
		at += len(line[at:]) - len(strings.TrimLeft(line[at:], " "))
		if col == -1 {
			col = at
		}
		assert.Equal(t, col, at, "summary of %s starts at column %d, not %d", cmd, at, col)
	}
	assert.Contains(t, list, "check-names")
	assert.Contains(t, list, "status")
}

// Hints point the right way.
func TestCLIHints(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name      string
		args      []string
		want, not []string
	}{
		{"help for an unknown command", []string{"help", "bogus"}, []string{`unknown command "bogus"`, "run 'snapctl help' for the list"}, []string{"help help"}},
		{"missing inventory", []string{"check-names", "--names", filepath.Join(dir, "nofile.txt")}, []string{"nofile.txt", "check the --names file"}, []string{"--counter", "snapctl init"}},
		{"check-names with Cassandra down", []string{"check-names", "--cassandra", "127.0.0.1:1", "--timeout", "3s"}, []string{"reachable"}, []string{"nothing was issued"}},
		{"next with Cassandra down", []string{"next", "--name", "web_1", "--cassandra", "127.0.0.1:1", "--timeout", "3s"}, []string{"reachable", "nothing was issued"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeEnv(t)
			line := requireError(t, f.run(t, tc.args...))
			for _, w := range tc.want {
				assert.Contains(t, line, w)
			}
			for _, n := range tc.not {
				assert.NotContains(t, line, n)
			}
		})
	}
}

// One problem is "1 problem".
func TestCheckNamesCountsProblems(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		inventory, want string
	}{
		{"dup\ndup\n", "check-names: 1 problem in"},
		{"dup\ndup\nBad\n", "check-names: 2 problems in"},
	} {
		f := newFakeEnv(t)
		inv := filepath.Join(t.TempDir(), "planned.txt")
		require.NoError(t, os.WriteFile(inv, []byte(tc.inventory), 0o600))
		r := f.run(t, "check-names", "--names", inv)
		require.Equal(t, exitProblems, r.code, r.stderr)
		assert.Contains(t, r.stdout, tc.want)
	}
}

// init --mode and --owner: the counter gets them; bad values are refused
// before anything is created.
func TestCLIInitModeAndOwner(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Log("not root: only giving the counter to oneself is tried")
	}
	self := strconv.Itoa(os.Geteuid())
	for _, tc := range []struct {
		name     string
		args     []string
		mode     os.FileMode
		uid, gid int // -1: not checked
		fail     string
	}{
		{name: "default", mode: 0o600, uid: os.Geteuid(), gid: -1},
		{name: "mode", args: []string{"--mode", "0640"}, mode: 0o640, uid: -1, gid: -1},
		{name: "owner numeric", args: []string{"--owner", self + ":4242"}, mode: 0o600, uid: os.Geteuid(), gid: 4242},
		{name: "owner by name", args: []string{"--owner", "root"}, mode: 0o600, uid: 0, gid: 0},
		{name: "mode without owner write", args: []string{"--mode", "0400"}, fail: "read and write"},
		{name: "mode not octal", args: []string{"--mode", "rw"}, fail: `--mode "rw"`},
		{name: "mode too wide", args: []string{"--mode", "7777"}, fail: `--mode "7777"`},
		{name: "no such user", args: []string{"--owner", "no_such_user_x"}, fail: "no such user"},
		{name: "no such group", args: []string{"--owner", self + ":no_such_group_x"}, fail: "no such group"},
		{name: "empty", args: []string{"--owner", ":"}, fail: "want user[:group]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "owner by name" && os.Geteuid() != 0 {
				t.Skip("needs root")
			}
			f := newFakeEnv(t)
			dir := t.TempDir()
			path := filepath.Join(dir, "counter.u64")
			r := f.run(t, append([]string{"init", "--counter", path}, tc.args...)...)
			if tc.fail != "" {
				assert.Contains(t, requireError(t, r), tc.fail)
				requireEmptyDir(t, dir, "nothing created")
				return
			}
			require.Equal(t, exitOK, r.code, r.stderr)
			info, err := os.Stat(path)
			require.NoError(t, err)
			assert.Equal(t, tc.mode, info.Mode().Perm())
			st := info.Sys().(*syscall.Stat_t)
			if tc.uid >= 0 {
				assert.Equal(t, uint32(tc.uid), st.Uid)
			}
			if tc.gid >= 0 {
				assert.Equal(t, uint32(tc.gid), st.Gid)
			}
		})
	}
}

// countFlocks counts granted flocks on one file, not waiters, POSIX
// locks, other inodes, or the same inode number on another device (a
// tmpfs inode can have the number of an ext4 one).
func TestCountFlocks(t *testing.T) {
	t.Parallel()
	const locks = `1: FLOCK  ADVISORY  READ  1234 08:01:5678 0 EOF
2: FLOCK  ADVISORY  READ  1235 08:01:5678 0 EOF
3: POSIX  ADVISORY  WRITE 1236 08:01:5678 0 EOF
4: FLOCK  ADVISORY  WRITE 1237 08:01:9999 0 EOF
4: -> FLOCK  ADVISORY  WRITE 1238 08:01:5678 0 EOF
5: FLOCK  ADVISORY  READ  1239 00:2a:15678 0 EOF
6: FLOCK  ADVISORY  READ  1240 00:1a:5678 0 EOF
`
	n, err := countFlocks(bufio.NewScanner(strings.NewReader(locks)), "08:01:5678")
	require.NoError(t, err)
	assert.Equal(t, 2, n)
}

// status counts the processes of this host using the counter (each holds
// a flock on the presence file).
func TestPresenceHolders(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "counter.u64.presence")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	n, err := presenceHolders(path)
	require.NoError(t, err)
	assert.Equal(t, 0, n)
	var fds []int
	for i := 0; i < 2; i++ {
		fd, err := syscall.Open(path, syscall.O_RDONLY, 0)
		require.NoError(t, err)
		fds = append(fds, fd)
		require.NoError(t, syscall.Flock(fd, syscall.LOCK_SH))
	}
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	n, err = presenceHolders(path)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
}

// init warns when the counter's owner is not its directory's (root
// creating it in a service's directory), and not when they match.
func TestCLIInitWarnsForeignOwner(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a directory of another user")
	}
	for _, tc := range []struct {
		name string
		args []string
		warn bool
	}{
		{"root's counter in a service's directory", nil, true},
		{"given to the service", []string{"--owner", "4242"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.Chown(dir, 4242, 4242))
			f := newFakeEnv(t)
			r := f.run(t, append([]string{"init", "--counter", filepath.Join(dir, "counter.u64")}, tc.args...)...)
			require.Equal(t, exitOK, r.code, r.stderr)
			if tc.warn {
				assert.Contains(t, r.stderr, "init --owner 4242")
			} else {
				assert.Empty(t, r.stderr)
			}
		})
	}
}

// Every SNAPID_ variable snapctl does not read is warned about on stderr,
// once per run, naming the one it likely misspells and never its value;
// the variables of the scripts and tests are not.
func TestCLIWarnsUnknownVariables(t *testing.T) {
	t.Parallel()
	// Written whole, a misspelt name would be one the repository uses
	// (internal/envvars checks every name the repository holds).
	misspelt := func(rest string) string { return "SNAPID_" + rest }
	for _, tc := range []struct {
		name  string
		vars  map[string]string
		args  []string
		wants []string // one warning line each, in this order
	}{
		{"registry misspelt", map[string]string{misspelt("CASANDRA"): "127.0.0.1"}, []string{"version"},
			[]string{"ignoring " + misspelt("CASANDRA") + ": no snapid program reads it; did you mean SNAPID_CASSANDRA?"}},
		{"lower case, and nothing close", map[string]string{"snapid_name": "web_1", misspelt("XYZZY"): "1"}, []string{"version"},
			[]string{"ignoring " + misspelt("XYZZY") + ": no snapid program reads it",
				"ignoring snapid_name: no snapid program reads it; did you mean SNAPID_NAME?"}},
		{"scripts' and tests' variables", map[string]string{"SNAPID_CASSANDRA_DIR": "/x", "SNAPID_CACHE": "/y", "SNAPID_SIM_SEED": "1"}, []string{"version"}, nil},
		{"a password's value is never printed", map[string]string{misspelt("CASSANDRA_PASWORD"): "hunter2"}, []string{"version"},
			[]string{"ignoring " + misspelt("CASSANDRA_PASWORD") + ": no snapid program reads it; did you mean SNAPID_CASSANDRA_PASSWORD?"}},
		{"once, with a command that fails", map[string]string{misspelt("KEYSAPCE"): "ks"}, []string{"nosuchcommand"},
			[]string{"ignoring " + misspelt("KEYSAPCE") + ": no snapid program reads it; did you mean SNAPID_KEYSPACE?"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeEnv(t)
			maps.Copy(f.vars, tc.vars)
			r := f.run(t, tc.args...)
			var warnings []string
			for _, l := range strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n") {
				if w, ok := strings.CutPrefix(l, "snapctl: warning: "); ok {
					warnings = append(warnings, w)
				}
			}
			assert.Equal(t, tc.wants, warnings, "stderr: %q", r.stderr)
			assert.NotContains(t, r.stderr, "hunter2")
		})
	}
	// A misspelt registry leaves the host without it: next says both.
	f := newFakeEnv(t)
	f.vars[misspelt("CASANDRA")] = "127.0.0.1"
	r := f.run(t, "next", "--name", "web_1", "--counter", filepath.Join(t.TempDir(), "c.u64"))
	require.Equal(t, exitOK, r.code, r.stderr)
	rest := withoutNoRegistryNotice(t, r.stderr, "web_1")
	assert.Equal(t, "snapctl: warning: ignoring "+misspelt("CASANDRA")+": no snapid program reads it; did you mean SNAPID_CASSANDRA?\n", rest)
}
