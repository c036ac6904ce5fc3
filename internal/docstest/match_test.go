package docstest

import (
	"regexp"
	"strings"
	"testing"
)

var (
	placeholderRe = regexp.MustCompile(`<[a-z][a-z ]*>`)
	blanksRe      = regexp.MustCompile(`[ \t]+`)
)

// lineRegexp turns one expected line into a regular expression: "..."
// is any text, <word> one run of non-blank characters, blanks any blanks.
func lineRegexp(line string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString(`^`)
	for i, part := range strings.Split(strings.TrimSpace(line), "...") {
		if i > 0 {
			b.WriteString(`.*`)
		}
		last := 0
		for _, m := range placeholderRe.FindAllStringIndex(part, -1) {
			b.WriteString(blanks(part[last:m[0]]))
			b.WriteString(`\S+`)
			last = m[1]
		}
		b.WriteString(blanks(part[last:]))
	}
	b.WriteString(`$`)
	return regexp.MustCompile(b.String())
}

func blanks(s string) string {
	parts := blanksRe.Split(s, -1)
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return strings.Join(parts, `[ \t]+`)
}

// outputLines splits s into lines without trailing blanks and without
// blank lines at the end.
func outputLines(s string) []string {
	lines := strings.Split(strings.TrimRight(s, " \t\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t\r")
	}
	if len(lines) == 1 && lines[0] == "" {
		return nil
	}
	return lines
}

// matchOutput reports whether got matches the expected output want (see
// the package documentation for its placeholders).
func matchOutput(want, got string) bool {
	return matchLines(outputLines(want), outputLines(got))
}

func matchLines(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if strings.TrimSpace(want[0]) == "..." {
		for skip := 0; skip <= len(got); skip++ {
			if matchLines(want[1:], got[skip:]) {
				return true
			}
		}
		return false
	}
	if len(got) == 0 || !lineRegexp(want[0]).MatchString(strings.TrimSpace(got[0])) {
		return false
	}
	return matchLines(want[1:], got[1:])
}

func TestMatchOutput(t *testing.T) {
	tests := []struct {
		name, want, got string
		match           bool
	}{
		{"exact", "web_1-1\nweb_1-2\n", "web_1-1\nweb_1-2\n", true},
		{"a line differs", "web_1-1\n", "web_1-2\n", false},
		{"a line more", "web_1-1\n", "web_1-1\nweb_1-2\n", false},
		{"a line less", "web_1-1\nweb_1-2\n", "web_1-1\n", false},
		{"any lines", "...\nrunning (plain mode)\n", "a\nb\nrunning (plain mode)\n", true},
		{"any lines, none", "...\nrunning (plain mode)\n", "running (plain mode)\n", true},
		{"any lines, last line missing", "...\nrunning (plain mode)\n", "a\n", false},
		{"any text", "snapctl: ...taken...\n", "snapctl: node name taken by x\n", true},
		{"placeholder", "<name>-1\n", "vm-1\n", true},
		{"placeholder is one word", "<name>-1\n", "my vm-1\n", false},
		{"blanks", "NAME HOST\n", "NAME   HOST\n", true},
		{"regexp characters are literal", "a.b (c)\n", "axb (c)\n", false},
		{"empty output", "", "", true},
		{"empty output expected", "", "x\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := matchOutput(tt.want, tt.got); got != tt.match {
				t.Errorf("matchOutput(%q, %q) = %v, want %v", tt.want, tt.got, got, tt.match)
			}
		})
	}
}
