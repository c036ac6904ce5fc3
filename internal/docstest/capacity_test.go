package docstest

import (
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snapid/snapid/internal/docdefaults"
)

// capacityMarker opens production.md's table of the LWT load by fleet
// size.
const capacityMarker = "<!-- capacity: checked by internal/docstest (TestCapacityArithmetic) -->"

// TestCapacityArithmetic recomputes every row of production.md's capacity
// table from the defaults' rows (heartbeat, reserve step, outage horizon),
// which the packages' TestDocsDefaults compare with the code: per host and
// hour, 3,600 s ÷ the heartbeat heartbeats, and at a steady rate of r ids
// an hour one extension per half step, the step being the larger of the
// reserve step and r × the horizon; for the fleet, hosts × their sum ÷
// 3,600 LWT/s.
func TestCapacityArithmetic(t *testing.T) {
	rows, err := docdefaults.Load(filepath.Join(root, docdefaults.Path))
	if err != nil {
		t.Fatal(err)
	}
	def := map[string]string{}
	for _, r := range rows {
		def[r.Key] = r.Value
	}
	heartbeat := parseDocDuration(t, def["lib.heartbeat"])
	horizon := parseDocDuration(t, def["lib.outage-horizon"])
	step := parseDocNumber(t, strings.TrimSuffix(def["lib.reserve-step"], " numbers"))

	const path = "docs/production.md"
	f := readMD(t, path)
	start := -1
	for i, l := range f.lines {
		if strings.TrimSpace(l) == capacityMarker {
			start = i + 1
		}
	}
	if start < 0 {
		t.Fatalf("%s: no capacity table (marked %s)", path, capacityMarker)
	}
	checked := 0
	for i := start + 2; i < len(f.lines) && strings.HasPrefix(f.lines[i], "|"); i++ {
		cells := strings.Split(strings.Trim(f.lines[i], "| "), "|")
		if len(cells) != 5 {
			t.Fatalf("%s:%d: want 5 cells (hosts, ids per host per hour, heartbeats, extensions, LWT/s), got %d", path, i+1, len(cells))
		}
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		hosts := parseDocNumber(t, cells[0])
		rate := parseDocNumber(t, cells[1])
		hb := float64(time.Hour) / float64(heartbeat)
		stepNow := math.Max(step, rate*horizon.Hours())
		ext := rate / (stepNow / 2)
		lwt := hosts * (hb + ext) / 3600
		want := []string{cells[0], cells[1], oneDecimal(hb), oneDecimal(ext), oneDecimal(lwt)}
		if strings.Join(want, " | ") != strings.Join(cells, " | ") {
			t.Errorf("%s:%d: the row says %s; from the defaults (heartbeat %v, step %v, horizon %v) it is %s",
				path, i+1, strings.Join(cells, " | "), heartbeat, step, horizon, strings.Join(want, " | "))
		}
		checked++
	}
	if checked == 0 {
		t.Fatalf("%s:%d: the capacity table has no rows", path, start+1)
	}
}

// oneDecimal formats v rounded to one decimal, without a trailing ".0",
// with thousands separators: 1694.44 → "1,694.4", 60 → "60".
func oneDecimal(v float64) string {
	s := strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
	whole, frac, _ := strings.Cut(s, ".")
	n, _ := strconv.ParseUint(whole, 10, 64)
	s = docdefaults.Thousands(n)
	if frac != "" {
		s += "." + frac
	}
	return s
}

func parseDocNumber(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(strings.ReplaceAll(s, ",", ""), 64)
	if err != nil {
		t.Fatalf("%q is not a number: %v", s, err)
	}
	return v
}

// parseDocDuration reads a duration as the table of defaults writes it
// ("1 minute", "2 hours").
func parseDocDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	n, unit, ok := strings.Cut(s, " ")
	units := map[string]time.Duration{"second": time.Second, "minute": time.Minute, "hour": time.Hour}
	u, known := units[strings.TrimSuffix(unit, "s")]
	v, err := strconv.Atoi(n)
	if !ok || !known || err != nil {
		t.Fatalf("%q is not a duration of the table of defaults", s)
	}
	d := time.Duration(v) * u
	if docdefaults.Duration(d) != s {
		t.Fatalf("%q reads as %v, which the table would write %q", s, d, docdefaults.Duration(d))
	}
	return d
}

func TestOneDecimal(t *testing.T) {
	for v, want := range map[float64]string{60: "60", 0.2: "0.2", 1694.444: "1,694.4", 16.94: "16.9", 1.672: "1.7"} {
		if got := oneDecimal(v); got != want {
			t.Errorf("oneDecimal(%v) = %q, want %q", v, got, want)
		}
	}
}
