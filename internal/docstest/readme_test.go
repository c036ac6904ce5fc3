package docstest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// readmeMaxLines is the README's budget: five minutes of reading.
const readmeMaxLines = 250

// readmeSections are the README's sections, in the order a newcomer needs
// them (what it is comes first, under the title).
var readmeSections = []string{
	"Install",
	"The two commands",
	"Embedding",
	"The registry in one short path",
	"Where to read next",
}

// TestReadmeShape keeps the README a newcomer's page: at most
// readmeMaxLines lines, its sections in readmeSections' order and no
// others (reference and explanations live in docs/).
func TestReadmeShape(t *testing.T) {
	f := readMD(t, "README.md")
	lines := len(f.lines)
	if f.lines[lines-1] == "" {
		lines--
	}
	if lines > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move reference and explanations to docs/", lines, readmeMaxLines)
	}
	var got []string
	for i, l := range f.lines {
		if !f.inFence[i] && strings.HasPrefix(l, "## ") {
			got = append(got, strings.TrimPrefix(l, "## "))
		}
	}
	if strings.Join(got, "\n") != strings.Join(readmeSections, "\n") {
		t.Errorf("README.md's sections are %q, want %q in that order", got, readmeSections)
	}
}

// The placeholders of the README's commands that build a reader's
// program against a checkout of snapid.
const (
	programPlaceholder  = "/path/to/your/program"
	checkoutPlaceholder = "/path/to/snapid"
)

// checkoutProgram is a program of the reader's own module, importing the
// library and its registry adapter.
const checkoutProgram = `package main

import (
	"fmt"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/cassandra"
)

func main() { fmt.Println(snapid.ValidateName("cms_1"), cassandra.EnvHosts) }
`

// TestReadmeCheckoutRoutes runs the README's routes from a checkout (its
// no-run block naming the placeholders: the workspace, and the replace
// its comment gives) with the placeholders filled in, for a new module
// made as its comment says, then builds a program of that module
// importing the library: the commands work as written.
func TestReadmeCheckoutRoutes(t *testing.T) {
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	var block string
	for _, b := range readMD(t, "README.md").fences {
		if b.lang == "sh" && b.has("no-run") && strings.Contains(b.text, checkoutPlaceholder) {
			block = b.text
		}
	}
	if block == "" {
		t.Fatal("README.md: no no-run block builds a program against a checkout (" + checkoutPlaceholder + ")")
	}
	// The block's commands, then the alternative its comment gives
	// ("# or: …"), each after the cd; a new module is made as the cd's
	// comment says ("# … a new one: go mod init …").
	var cd, work, replace, initCmd string
	for _, l := range strings.Split(block, "\n") {
		cmd, comment, _ := strings.Cut(l, " #")
		cmd, comment = strings.TrimSpace(cmd), strings.TrimSpace(comment)
		switch {
		case strings.HasPrefix(cmd, "cd "):
			cd = cmd
			_, initCmd, _ = strings.Cut(comment, ": ")
			initCmd = strings.TrimSuffix(initCmd, ")")
		case strings.HasPrefix(cmd, "go work init"):
			work = cmd
			_, replace, _ = strings.Cut(comment, "or: ")
		}
	}
	if cd == "" || work == "" || replace == "" || !strings.HasPrefix(initCmd, "go mod init ") {
		t.Fatalf("README.md's checkout block: want a cd with 'a new one: go mod init …', go work init, and '# or: …' the replace; got %q", block)
	}
	for name, route := range map[string]string{"workspace": work, "replace": replace} {
		t.Run(name, func(t *testing.T) {
			program := t.TempDir()
			if err := os.WriteFile(filepath.Join(program, "main.go"), []byte(checkoutProgram), 0o600); err != nil {
				t.Fatal(err)
			}
			script := strings.Join([]string{"set -e", cd, initCmd, route, "go build -o /dev/null ."}, "\n")
			script = strings.NewReplacer(programPlaceholder, program, checkoutPlaceholder, abs).Replace(script)
			cmd := exec.Command("bash", "-c", script)
			// The reader's own module: no workspace of the caller's. The
			// replace's go mod tidy would ask the checksum database for
			// the hashes of the checkout's dependencies, which the module
			// cache holds already: the test command may run without
			// network (docs/testing.md), so it does not ask.
			cmd.Env = append(os.Environ(), "GOWORK=", "GOSUMDB=off")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("README.md's %s route from a checkout failed (%v):\n%s\n%s", name, err, script, out)
			}
		})
	}
}
