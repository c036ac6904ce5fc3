package cli

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// snapctl built from this repository's checkout (with VCS stamping, which a
// machine's GOFLAGS may turn off) prints the checkout's revision.
func TestCLIVersionOfBuiltBinary(t *testing.T) {
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
				assert.Contains(t, requireOneErrorLine(t, r), tc.fail)
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
			line := requireOneErrorLine(t, f.run(t, args...))
			flagName, _, _ := strings.Cut(args[1], "=")
			assert.Contains(t, line, args[0]+" has no flag "+flagName)
			assert.NoFileExists(t, f.vars["SNAPID_COUNTER"])
		})
	}
}

// version and --version print the module version and the VCS revision.
func TestCLIVersion(t *testing.T) {
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
			line := requireOneErrorLine(t, f.run(t, tc.args...))
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
				assert.Contains(t, requireOneErrorLine(t, r), tc.fail)
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
