package docstest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/testcluster"
)

// runnableDocs are the files whose every shell block runs.
var runnableDocs = []string{"README.md", "docs/tutorial.md"}

// noRunAllowed are the only commands a block may be kept from running
// for: installing from the network, the test command itself (which runs
// these tests), and the commands that build a reader's program against a
// checkout, which name the reader's paths (TestReadmeCheckoutRoutes runs
// them with the paths filled in).
var noRunAllowed = []*regexp.Regexp{
	regexp.MustCompile(`^go get github\.com/snapid/snapid(@\S+)?$`),
	regexp.MustCompile(`^go install github\.com/snapid/snapid/cmd/snapctl@\S+$`),
	regexp.MustCompile(`^bash scripts/test\.sh$`),
	regexp.MustCompile(`^cd ` + regexp.QuoteMeta(programPlaceholder) + `$`),
	regexp.MustCompile(`^go work init \. ` + regexp.QuoteMeta(checkoutPlaceholder) + `$`),
}

// hostState is the host's state directory the docs use, moved into each
// run's own directory.
const hostState = "/var/lib/snapid"

// blockTimeout bounds one block: a first start of the test node may take
// minutes on a busy machine, a block that hangs must not hang the suite.
const blockTimeout = 5 * time.Minute

func TestDocShellBlocks(t *testing.T) {
	for _, path := range runnableDocs {
		t.Run(strings.ReplaceAll(path, "/", "_"), func(t *testing.T) {
			runShellBlocks(t, readMD(t, path))
		})
	}
}

// TestDocShellBlocksMarked checks that every shell block of the runnable
// docs is a ```sh block, that only the allowed commands are marked
// no-run, and that every ```output block follows a block that runs.
func TestDocShellBlocksMarked(t *testing.T) {
	for _, path := range runnableDocs {
		f := readMD(t, path)
		for i, b := range f.fences {
			switch b.lang {
			case "bash", "shell", "console", "shell-session", "zsh":
				t.Errorf("%s:%d: a ```%s block: write shell commands as ```sh (run by the tests) or ```sh no-run", path, b.line, b.lang)
			case "sh":
				if !b.has("no-run") {
					continue
				}
				for _, cmd := range commands(b.text) {
					if !allowedNoRun(cmd) {
						t.Errorf("%s:%d: %q is marked no-run, but only installing from the network, the test command and building against a checkout may be: let it run", path, b.line, cmd)
					}
				}
			case "output":
				if i == 0 || f.fences[i-1].lang != "sh" || f.fences[i-1].has("no-run") {
					t.Errorf("%s:%d: an output block that does not follow a ```sh block that runs", path, b.line)
				}
			}
		}
	}
}

// commands returns the command lines of a shell block, comments and
// blank lines left out.
func commands(text string) []string {
	var cmds []string
	for _, l := range strings.Split(text, "\n") {
		if i := strings.Index(l, " #"); i >= 0 {
			l = l[:i]
		}
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			cmds = append(cmds, l)
		}
	}
	return cmds
}

func allowedNoRun(cmd string) bool {
	for _, re := range noRunAllowed {
		if re.MatchString(cmd) {
			return true
		}
	}
	return false
}

// shellRun is the environment the blocks of one file run in.
type shellRun struct {
	dir      string // the run's own directory: home, bin, state, /var/lib/snapid
	stateDir string // where the variables and directory between blocks are kept
	keyspace bool   // SNAPID_KEYSPACE is set
}

func runShellBlocks(t *testing.T, f *mdFile) {
	if f.path == "README.md" {
		// The README's first command takes the node name from the host
		// name, as a newcomer's does.
		h, err := os.Hostname()
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := snapid.NameFromHostname(h); err != nil {
			t.Skipf("this host's name gives no node name, so the README's first command fails here as it would for a newcomer (%v): run on a host whose name starts with a letter", err)
		}
	}
	dir := t.TempDir()
	r := &shellRun{dir: dir, stateDir: filepath.Join(dir, "session")}
	for _, d := range []string{"home", "bin", r.stateDir, filepath.Join(dir, hostState)} {
		if err := os.MkdirAll(filepath.Join(dir, strings.TrimPrefix(d, dir)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r.buildSnapctl(t)
	r.writeInitialEnv(t)
	ran := 0
	for i, b := range f.fences {
		if b.lang != "sh" || b.has("no-run") {
			continue
		}
		var want *fence
		if i+1 < len(f.fences) && f.fences[i+1].lang == "output" {
			want = &f.fences[i+1]
		}
		if strings.Contains(strings.ToLower(b.text), "cassandra") && !r.keyspace {
			// Fails under CI=true, skips the rest of the file elsewhere.
			k := testcluster.NewKeyspace(t)
			r.export(t, "SNAPID_KEYSPACE", k.Name)
			r.keyspace = true
		}
		r.runBlock(t, f.path, b, want)
		ran++
	}
	if ran == 0 {
		t.Fatalf("%s: no shell block ran", f.path)
	}
}

// buildSnapctl builds snapctl from the tree into the run's bin, which
// stands in for the install commands the docs do not run.
func (r *shellRun) buildSnapctl(t *testing.T) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", filepath.Join(r.dir, "bin", "snapctl"), "./cmd/snapctl")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building snapctl: %v\n%s", err, out)
	}
}

// writeInitialEnv writes the variables the first block starts with: the
// caller's PATH and Go settings (its build and module caches, so that `go
// run` does not start cold), the test node's state directory for
// scripts/cassandra.sh, and HOME, GOBIN and SNAPID_BINDING_DIR of the
// run's own.
func (r *shellRun) writeInitialEnv(t *testing.T) {
	t.Helper()
	vars := map[string]string{
		"PATH":               filepath.Join(r.dir, "bin") + ":" + os.Getenv("PATH"),
		"HOME":               filepath.Join(r.dir, "home"),
		"GOBIN":              filepath.Join(r.dir, "bin"),
		"SNAPID_BINDING_DIR": filepath.Join(r.dir, hostState, "names"),
		"LANG":               "C.UTF-8",
	}
	out, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	goenv := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(goenv) != 3 {
		t.Fatalf("go env GOCACHE GOMODCACHE GOPATH: %q", out)
	}
	vars["GOCACHE"], vars["GOMODCACHE"], vars["GOPATH"] = goenv[0], goenv[1], goenv[2]
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GO") && vars[k] == "" && k != "GOBIN" {
			vars[k] = v
		}
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	for k, def := range map[string]string{
		"SNAPID_CASSANDRA_DIR": filepath.Join(home, ".cache", "snapid", "run"),
		"SNAPID_CACHE":         filepath.Join(home, ".cache", "snapid"),
	} {
		if v := os.Getenv(k); v != "" {
			def = v
		}
		vars[k] = def
	}
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(vars[k]))
	}
	if err := os.WriteFile(filepath.Join(r.stateDir, "env"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.stateDir, "cwd"), []byte(abs), 0o600); err != nil {
		t.Fatal(err)
	}
}

// export adds a variable for the blocks that follow.
func (r *shellRun) export(t *testing.T, k, v string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(r.stateDir, "env"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "export %s=%s\n", k, shellQuote(v)); err != nil {
		t.Fatal(err)
	}
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// runBlock runs one block and checks its exit status and output.
func (r *shellRun) runBlock(t *testing.T, path string, b fence, want *fence) {
	t.Helper()
	moved := filepath.Join(r.dir, hostState)
	env, cwd := filepath.Join(r.stateDir, "env"), filepath.Join(r.stateDir, "cwd")
	script := fmt.Sprintf("set -e -o pipefail\nsource %s\ncd \"$(cat %s)\"\n%s\nexport -p >%s\npwd >%s\n",
		shellQuote(env), shellQuote(cwd), strings.ReplaceAll(b.text, hostState, moved), shellQuote(env), shellQuote(cwd))
	ctx, cancel := context.WithTimeout(context.Background(), blockTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Env = []string{}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	got := strings.ReplaceAll(out.String(), moved, hostState)
	t.Logf("%s:%d: ran in %v:\n%s%s", path, b.line, time.Since(start).Round(time.Millisecond), b.text, got)
	if err != nil {
		t.Fatalf("%s:%d: the block failed (%v); its output:\n%s", path, b.line, err, got)
	}
	if want != nil && !matchOutput(want.text, got) {
		t.Fatalf("%s:%d: the block's output is not the expected output of line %d\nexpected:\n%s\ngot:\n%s",
			path, b.line, want.line, want.text, got)
	}
}
