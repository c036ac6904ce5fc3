package docstest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// fence is one fenced code block of a Markdown file.
type fence struct {
	lang string   // the info string's first word: sh, output, go, …
	args []string // the rest of the info string: no-run
	text string   // the block's content, ending in a newline
	line int      // 1-based line of the opening fence
}

func (f fence) has(arg string) bool {
	for _, a := range f.args {
		if a == arg {
			return true
		}
	}
	return false
}

// mdFile is a Markdown file: its lines, and its fenced blocks.
type mdFile struct {
	path   string // relative to the repository's root
	lines  []string
	fences []fence
	// inFence[i] is true for line i (0-based) inside a fence, fences
	// included.
	inFence []bool
}

// readMD reads path (relative to the repository's root).
func readMD(t *testing.T, path string) *mdFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	f := &mdFile{path: path, lines: strings.Split(string(b), "\n")}
	f.inFence = make([]bool, len(f.lines))
	var cur *fence
	var body []string
	for i, l := range f.lines {
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			words := strings.Fields(strings.TrimPrefix(l, "```"))
			cur = &fence{line: i + 1}
			if len(words) > 0 {
				cur.lang, cur.args = words[0], words[1:]
			}
			body = nil
			f.inFence[i] = true
		case cur != nil && strings.TrimSpace(l) == "```":
			cur.text = strings.Join(body, "\n") + "\n"
			f.fences = append(f.fences, *cur)
			cur = nil
			f.inFence[i] = true
		case cur != nil:
			body = append(body, l)
			f.inFence[i] = true
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: a fence that is never closed", path, cur.line)
	}
	return f
}

// mdFiles returns README.md and every .md file under docs/, relative to
// the repository's root.
func mdFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
