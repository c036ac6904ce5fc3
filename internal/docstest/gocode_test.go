package docstest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	importDeclRe = regexp.MustCompile(`(?s)^\s*import\s*(\([^)]*\)|"[^"]*")\s*`)
	definedRe    = regexp.MustCompile(`(?m)^([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*:=`)
)

// TestReadmeGoCompiles compiles every ```go block of README.md against the
// tree: its import declaration heads a file of a package that exists only
// in a build overlay (nothing is written into the tree), the rest becomes
// the body of a function returning error. A renamed option or call fails
// here.
func TestReadmeGoCompiles(t *testing.T) {
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	f := readMD(t, "README.md")
	dir := t.TempDir()
	overlay := map[string]string{}
	n := 0
	for _, b := range f.fences {
		if b.lang != "go" {
			continue
		}
		n++
		imports := ""
		body := b.text
		bodyLine := b.line + 1 // the block's first line
		if m := importDeclRe.FindStringSubmatch(body); m != nil {
			imports = fmt.Sprintf("//line README.md:%d\nimport %s\n", bodyLine+strings.Count(m[0][:strings.Index(m[0], "import")], "\n"), m[1])
			bodyLine += strings.Count(m[0], "\n")
			body = body[len(m[0]):]
		}
		var used strings.Builder
		for _, m := range definedRe.FindAllStringSubmatch(body, -1) {
			for _, name := range strings.Split(m[1], ",") {
				if name = strings.TrimSpace(name); name != "_" {
					fmt.Fprintf(&used, "\t_ = %s\n", name)
				}
			}
		}
		// Line directives make the compiler's errors name README.md's lines.
		src := fmt.Sprintf("package readmeexample\n\n%s\nfunc example%d() error {\n//line README.md:%d\n%s%s\treturn nil\n}\n",
			imports, n, bodyLine, body, used.String())
		gen := filepath.Join(dir, fmt.Sprintf("example%d.go", n))
		if err := os.WriteFile(gen, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		overlay[filepath.Join(abs, "internal", "docstest", "readmeexample", fmt.Sprintf("example%d.go", n))] = gen
	}
	if n == 0 {
		t.Fatal("README.md: no ```go block (the embedding example?)")
	}
	js, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, js, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-overlay", ov, "./internal/docstest/readmeexample")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("README.md's Go examples do not compile against the tree (%v):\n%s", err, out)
	}
}
