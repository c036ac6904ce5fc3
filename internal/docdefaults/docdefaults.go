// Package docdefaults reads docs/reference/defaults.md, the one table of
// every default the documentation quotes, so that the tests of each
// package can compare the table with the package's code. A doc that
// quotes a default links to its row (reference/defaults.md#<key>), and
// internal/docstest checks the link's text against the row: the code, the
// table and the prose cannot drift apart.
//
// Each row's key starts with the part of the code that owns the value:
// "lib." (the root package's options and constants, checked by its
// tests), "cassandra." (the registry adapter's), "cli." (snapctl's
// flags, checked through cli.Run).
//
// Imports: the standard library only. Imported by tests only (the root
// package's, cassandra's and internal/docstest's); never by non-test code.
// Its functions are safe for concurrent use.
package docdefaults

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Path is the table's path from the module's root.
const Path = "docs/reference/defaults.md"

// Row is one default of the table.
type Row struct {
	Key   string // e.g. "lib.reserve-step", also the row's anchor
	Value string // as the docs quote it, e.g. "1,000 numbers"
	Line  int    // 1-based line in the table's file
}

var anchorRe = regexp.MustCompile(`^<a id="([a-z]+\.[a-z0-9-]+)"></a>`)

// Load reads the table's rows: the table lines whose first cell starts
// with an anchor <a id="key"></a>; the second cell is the value.
func Load(path string) ([]Row, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the table of defaults: %w", err)
	}
	var rows []Row
	seen := map[string]int{}
	for i, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 2 {
			continue
		}
		m := anchorRe.FindStringSubmatch(strings.TrimSpace(cells[0]))
		if m == nil {
			continue
		}
		if prev, ok := seen[m[1]]; ok {
			return nil, fmt.Errorf("%s:%d: key %s is already the row of line %d", path, i+1, m[1], prev)
		}
		seen[m[1]] = i + 1
		rows = append(rows, Row{Key: m[1], Value: strings.TrimSpace(cells[1]), Line: i + 1})
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no row of defaults (a row starts with <a id=\"key\"></a>)", path)
	}
	return rows, nil
}

// Check compares the rows whose key starts with prefix with want (key →
// the value as the code gives it, formatted with Duration and Count):
// every row of the prefix must be wanted with the same value, and every
// wanted key must have a row. Each difference is an error of t naming
// the line, what the table says and what the code says.
func Check(t testing.TB, path, prefix string, want map[string]string) {
	t.Helper()
	rows, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, r := range rows {
		if !strings.HasPrefix(r.Key, prefix) {
			continue
		}
		have[r.Key] = true
		w, ok := want[r.Key]
		switch {
		case !ok:
			t.Errorf("%s:%d: %s is not a default of the code this test knows: remove the row, or make the test compare it with the code", path, r.Line, r.Key)
		case w != r.Value:
			t.Errorf("%s:%d: %s says %q, the code's default is %q: correct the table (the docs that quote it are checked against the table)", path, r.Line, r.Key, r.Value, w)
		}
	}
	var missing []string
	for k := range want {
		if !have[k] {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	for _, k := range missing {
		t.Errorf("%s: no row for %s (the code's default is %q): add it", path, k, want[k])
	}
}

// Duration formats d as the docs quote durations: "20 ms", "1 s" below a
// minute when not whole seconds or below 10 s in a range, else "15
// seconds", "1 minute", "5 minutes", "2 hours", "24 hours".
func Duration(d time.Duration) string {
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	case d%time.Hour == 0:
		return plural(int64(d/time.Hour), "hour")
	case d%time.Minute == 0:
		return plural(int64(d/time.Minute), "minute")
	case d%time.Second == 0:
		return plural(int64(d/time.Second), "second")
	}
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
}

// Short formats d in the short form of ranges ("10 ms", "1 s").
func Short(d time.Duration) string {
	if d < time.Second {
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
}

func plural(n int64, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return strconv.FormatInt(n, 10) + " " + unit + "s"
}

// Count formats n with thousands separators, then unit: "1,000 numbers".
func Count(n uint64, unit string) string {
	s := Thousands(n)
	if unit == "" {
		return s
	}
	return s + " " + unit
}

// Thousands formats n with a comma every three digits: 1000000 →
// "1,000,000".
func Thousands(n uint64) string {
	s := strconv.FormatUint(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
