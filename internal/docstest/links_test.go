package docstest

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var (
	linkRe       = regexp.MustCompile(`\[([^\]]*)\]\(([^)\s]+)\)`)
	inlineCodeRe = regexp.MustCompile("`[^`]*`")
	headingRe    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlAnchorRe = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)
	slugDropRe   = regexp.MustCompile(`[^\p{L}\p{N}\s_-]`)
)

// link is a relative link of a Markdown file.
type link struct {
	text, target string // target as written: path, #anchor or path#anchor
	file         string // the file it resolves to, relative to the root
	anchor       string
	line         int
}

// relativeLinks returns f's links to files of the repository (not to
// web addresses), outside code blocks and inline code.
func relativeLinks(f *mdFile) []link {
	var links []link
	for i, l := range f.lines {
		if f.inFence[i] {
			continue
		}
		// A link's text may wrap onto the next line: join them.
		l = inlineCodeRe.ReplaceAllString(l, "")
		first := len(l)
		if i+1 < len(f.lines) && !f.inFence[i+1] {
			l += " " + inlineCodeRe.ReplaceAllString(f.lines[i+1], "")
		}
		for _, m := range linkRe.FindAllStringSubmatchIndex(l, -1) {
			if m[0] >= first {
				continue // starts on the next line: found there
			}
			text, target := l[m[2]:m[3]], l[m[4]:m[5]]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			p, anchor, _ := strings.Cut(target, "#")
			file := f.path
			if p != "" {
				file = path.Clean(path.Join(path.Dir(f.path), p))
			}
			links = append(links, link{text: text, target: target, file: file, anchor: anchor, line: i + 1})
		}
	}
	return links
}

// anchors returns the anchors of a Markdown file as GitHub makes them:
// each heading's slug (lower case, punctuation dropped, blanks to "-",
// "-1", "-2" … for repeats) and each <a id> or <a name>.
func anchors(f *mdFile) map[string]bool {
	set := map[string]bool{}
	seen := map[string]int{}
	for i, l := range f.lines {
		if f.inFence[i] {
			continue
		}
		for _, m := range htmlAnchorRe.FindAllStringSubmatch(l, -1) {
			set[m[1]] = true
		}
		m := headingRe.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		slug := strings.ToLower(m[1])
		slug = strings.ReplaceAll(slug, "`", "")
		slug = slugDropRe.ReplaceAllString(slug, "")
		slug = strings.ReplaceAll(slug, " ", "-")
		if n := seen[slug]; n > 0 {
			set[slug+"-"+strconv.Itoa(n)] = true
		} else {
			set[slug] = true
		}
		seen[slug]++
	}
	return set
}

// TestDocLinks checks every relative link of README.md and docs/: its
// file exists, and its anchor is a heading or an <a id> of that file.
func TestDocLinks(t *testing.T) {
	parsed := map[string]*mdFile{}
	for _, p := range mdFiles(t) {
		parsed[p] = readMD(t, p)
	}
	for _, p := range mdFiles(t) {
		for _, l := range relativeLinks(parsed[p]) {
			if _, err := os.Stat(filepath.Join(root, l.file)); err != nil {
				t.Errorf("%s:%d: link %q: %s does not exist", p, l.line, l.target, l.file)
				continue
			}
			if l.anchor == "" || !strings.HasSuffix(l.file, ".md") {
				continue
			}
			target, ok := parsed[l.file]
			if !ok {
				target = readMD(t, l.file)
				parsed[l.file] = target
			}
			if !anchors(target)[l.anchor] {
				t.Errorf("%s:%d: link %q: %s has no heading or <a id> for #%s", p, l.line, l.target, l.file, l.anchor)
			}
		}
	}
}
