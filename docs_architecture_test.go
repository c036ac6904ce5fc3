package snapid_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// architectureDoc is the document whose file tables say which file holds
// which responsibility.
const architectureDoc = "docs/ARCHITECTURE.md"

// goPathInCell matches a Go file's path, in backquotes, in a table cell.
var goPathInCell = regexp.MustCompile("`([^`]+\\.go)`")

// fileTablePaths returns the Go files named in the first column of the
// document's file tables (the tables whose header's first cell is
// "file"), each with the line that names it.
func fileTablePaths(t *testing.T, doc string) map[string]int {
	t.Helper()
	f, err := os.Open(doc)
	if err != nil {
		t.Fatalf("read %s: %v", doc, err)
	}
	defer f.Close()
	paths := map[string]int{}
	found := false
	const (
		outside = iota
		fileTable
		otherTable
	)
	state := outside
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			state = outside
			continue
		}
		first := strings.TrimSpace(strings.Split(line, "|")[1])
		switch state {
		case outside: // a table's header row
			state = otherTable
			if strings.EqualFold(first, "file") {
				state, found = fileTable, true
			}
		case fileTable:
			for _, m := range goPathInCell.FindAllStringSubmatch(first, -1) {
				if _, ok := paths[m[1]]; !ok {
					paths[m[1]] = n
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read %s: %v", doc, err)
	}
	if !found {
		t.Fatalf("%s has no file table (a table whose first column is \"file\")", doc)
	}
	return paths
}

// moduleGoFiles returns the module's non-test Go files, relative to its
// root (the package's directory): nested modules, testdata and hidden
// directories are not the module's.
func moduleGoFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == "." {
				return nil
			}
			name := d.Name()
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" {
				return fs.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return fs.SkipDir // a module of its own
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			files = append(files, filepath.ToSlash(path))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("list the module's files: %v", err)
	}
	slices.Sort(files)
	return files
}

// docs/ARCHITECTURE.md's file tables name every non-test Go file of the
// module, and only files that exist: a file added, moved or removed
// without its row fails here, naming the file and what to do.
func TestArchitectureFileTable(t *testing.T) {
	named := fileTablePaths(t, architectureDoc)
	for _, path := range moduleGoFiles(t) {
		if _, ok := named[path]; !ok {
			t.Errorf("%s: the file table does not name %s: add a row (`%s` | what it holds) to the table of which file holds what", architectureDoc, path, path)
		}
	}
	var gone []string
	for path := range named {
		if _, err := os.Stat(filepath.FromSlash(path)); err != nil {
			gone = append(gone, path)
		}
	}
	slices.Sort(gone)
	for _, path := range gone {
		t.Errorf("%s:%d: the file table names %s, which does not exist: remove its row, or name the file that holds it now", architectureDoc, named[path], path)
	}
}
