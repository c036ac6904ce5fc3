package docstest

import (
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
