package docstest

import (
	"bytes"
	"context"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/snapid/snapid/internal/cli"
	"github.com/snapid/snapid/internal/docdefaults"
)

// defaultsOwners are the key prefixes of docs/reference/defaults.md and
// the tests that compare those rows with the code.
var defaultsOwners = map[string]string{
	"lib.":       "TestDocsDefaults of internal/engine",
	"admin.":     "TestDocsDefaults of package admin",
	"cassandra.": "TestDocsDefaults of package cassandra",
	"cli.":       "TestDocsDefaults of internal/docstest",
}

var flagDefaultRe = regexp.MustCompile(`\(default ([^)]+)\)`)

// flagDefault returns the default snapctl's help for cmd prints for flag.
func flagDefault(t *testing.T, cmd, flag string) string {
	t.Helper()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli.Run(ctx, []string{"help", cmd}, cli.Env{Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }})
	lines := strings.Split(out.String(), "\n")
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) == 0 || strings.TrimLeft(f[0], "-") != flag || !strings.HasPrefix(f[0], "-") {
			continue
		}
		// The default ends the flag's description, on its line or the next.
		for _, d := range lines[i:min(i+2, len(lines))] {
			if m := flagDefaultRe.FindStringSubmatch(d); m != nil {
				return m[1]
			}
		}
	}
	t.Fatalf("snapctl help %s: no default for --%s in:\n%s", cmd, flag, out.String())
	return ""
}

// TestDocsDefaults compares snapctl's rows of docs/reference/defaults.md
// with its flags, and checks that every row belongs to a test that
// compares it with the code.
func TestDocsDefaults(t *testing.T) {
	var want []string
	for _, cmd := range []string{"next", "names"} {
		d, err := time.ParseDuration(flagDefault(t, cmd, "timeout"))
		if err != nil {
			t.Fatalf("snapctl help %s: --timeout's default: %v", cmd, err)
		}
		want = append(want, docdefaults.Duration(d))
	}
	if want[0] != want[1] {
		t.Fatalf("--timeout defaults to %s on next and %s on names: the table has one row for both", want[0], want[1])
	}
	table := filepath.Join(root, docdefaults.Path)
	docdefaults.Check(t, table, "cli.", map[string]string{"cli.timeout": want[0]})
	rows, err := docdefaults.Load(table)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		owned := false
		for prefix := range defaultsOwners {
			owned = owned || strings.HasPrefix(r.Key, prefix)
		}
		if !owned {
			t.Errorf("%s:%d: %s: no test compares it with the code (keys start with lib., admin., cassandra. or cli.)", docdefaults.Path, r.Line, r.Key)
		}
	}
}

// TestDocDefaultLinks checks that every link to a row of
// docs/reference/defaults.md says what the row says: a doc quoting a
// default writes it as [value](reference/defaults.md#key).
func TestDocDefaultLinks(t *testing.T) {
	rows, err := docdefaults.Load(filepath.Join(root, docdefaults.Path))
	if err != nil {
		t.Fatal(err)
	}
	value := map[string]string{}
	for _, r := range rows {
		value[r.Key] = r.Value
	}
	quotes := 0
	for _, p := range mdFiles(t) {
		for _, l := range relativeLinks(readMD(t, p)) {
			if l.file != path.Clean(docdefaults.Path) || l.anchor == "" {
				continue
			}
			v, ok := value[l.anchor]
			switch {
			case !ok:
				t.Errorf("%s:%d: link %q: no row %s in %s", p, l.line, l.target, l.anchor, docdefaults.Path)
			case !strings.Contains(strings.Join(strings.Fields(l.text), " "), v):
				t.Errorf("%s:%d: [%s](%s) quotes the default %s, but the table says %q: write what the table says", p, l.line, l.text, l.target, l.anchor, v)
			default:
				quotes++
			}
		}
	}
	if quotes == 0 {
		t.Error("no doc links to a row of the defaults: the check would pass by checking nothing")
	}
}

var (
	// quantityRe is a number with the unit of a default: ids, numbers or
	// a duration.
	quantityRe    = regexp.MustCompile(`\b\d[\d,]*(\.\d+)?\s*(ids|numbers|ms|s|seconds?|minutes?|min|hours?|h)\b`)
	defaultWordRe = regexp.MustCompile(`\bdefault\b`)
	sentenceEndRe = regexp.MustCompile(`[.;:]\s+|\s[*-]\s|\|`)
)

// notOurDefault marks a sentence that quotes a number "by default" that
// is not one of snapid's defaults (Cassandra's, or one derived from
// several of ours).
const notOurDefault = "<!-- not snapid's default -->"

// TestDocQuotedDefaultsLinked looks for defaults quoted without a link to
// their row: a sentence that says "default" next to a number of ids,
// numbers or time must link to docs/reference/defaults.md, or say why not
// (notOurDefault). ARCHITECTURE.md is left out: it describes the code's
// constants by name, next to them.
func TestDocQuotedDefaultsLinked(t *testing.T) {
	for _, p := range mdFiles(t) {
		if p == "docs/ARCHITECTURE.md" || p == docdefaults.Path {
			continue
		}
		f := readMD(t, p)
		var text strings.Builder
		for i, l := range f.lines {
			if !f.inFence[i] {
				text.WriteString(inlineCodeRe.ReplaceAllString(l, "") + " ")
			}
		}
		for _, s := range sentenceEndRe.Split(text.String(), -1) {
			if strings.Contains(s, "defaults.md") || strings.Contains(s, notOurDefault) {
				continue
			}
			if defaultWordRe.MatchString(s) && quantityRe.MatchString(s) {
				t.Errorf("%s: %q quotes a default without linking to its row: write it as [value](reference/defaults.md#key) (or mark it %s)",
					p, strings.Join(strings.Fields(s), " "), notOurDefault)
			}
		}
	}
}
