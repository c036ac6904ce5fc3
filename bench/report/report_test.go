package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// goTestOutput writes runs of benchmark lines as go test prints them: for
// each package, every benchmark count times in a row (as -count does),
// run i's ids/s being ids[name][i].
func goTestOutput(pkgs map[string]map[string][]float64, order map[string][]string, extra map[string]string) string {
	var b strings.Builder
	for _, pkg := range []string{benchPkg, rootPkg} {
		if pkgs[pkg] == nil {
			continue
		}
		fmt.Fprintf(&b, "goos: linux\ngoarch: amd64\npkg: %s\ncpu: Test CPU\n", pkg)
		for _, name := range order[pkg] {
			for _, ids := range pkgs[pkg][name] {
				fmt.Fprintf(&b, "%s-2   \t  1000\t  %.2f ns/op\t  %.0f ids/s%s\t  16 B/op\t  1 allocs/op\n", name, 1e9/ids, ids, extra[name])
			}
		}
		fmt.Fprintf(&b, "PASS\nok  \t%s\t12.3s\n", pkg)
	}
	return b.String()
}

// six returns six runs around median m: m×(0.9, 0.95, 1, 1, 1.05, 1.1).
func six(m float64) []float64 {
	return []float64{m * 0.9, m * 1.1, m, m * 0.95, m * 1.05, m}
}

func TestParseSummarizes(t *testing.T) {
	out := goTestOutput(map[string]map[string][]float64{
		rootPkg:  {"BenchmarkA/x=1/c1": {100, 600, 300, 200, 500, 400}, "BenchmarkB": {10, 30}},
		benchPkg: {"BenchmarkC/c2": six(1000)},
	}, map[string][]string{rootPkg: {"BenchmarkA/x=1/c1", "BenchmarkB"}, benchPkg: {"BenchmarkC/c2"}}, nil)
	res, err := parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 || res[0].Name != "BenchmarkC/c2" || res[1].Name != "BenchmarkA/x=1/c1" || res[2].Name != "BenchmarkB" {
		t.Fatalf("results %+v: want C, A, B in the order they first appear", res)
	}
	a := res[1]
	if a.Package != rootPkg || a.Procs != 2 || a.Runs != 6 {
		t.Fatalf("A: package %q, procs %d, runs %d", a.Package, a.Procs, a.Runs)
	}
	ids, ok := a.Stat("ids/s")
	if !ok || ids.Median != 350 || ids.Lo != 100 || ids.Hi != 600 || !ids.Bounded || len(ids.Values) != 6 || ids.Confidence < 0.95 {
		t.Fatalf("A ids/s: %+v, want median 350 of 6 runs, interval 100..600 (lowest to highest run)", ids)
	}
	if a.IDsPerSec != 350 {
		t.Fatalf("A IDsPerSec %v, want the median 350", a.IDsPerSec)
	}
	nsop, ok := a.Stat("ns/op")
	if !ok || a.NsPerOp != nsop.Median || nsop.Median < 2.8e6 || nsop.Median > 3e6 {
		t.Fatalf("A ns/op %+v (NsPerOp %v): want the median in ns, as go test prints it", nsop, a.NsPerOp)
	}
	if a.AllocsPerOp == nil || *a.AllocsPerOp != 1 || a.BytesPerOp == nil || *a.BytesPerOp != 16 {
		t.Fatalf("A B/op %v, allocs/op %v", a.BytesPerOp, a.AllocsPerOp)
	}
	if b, _ := res[2].Stat("ids/s"); b.Bounded || b.Median != 20 || b.Warning == "" {
		t.Fatalf("B with 2 runs: %+v, want median 20 and an unbounded interval with a warning", b)
	}
}

// testReport parses a run with every benchmark the goals use, each six
// times around the given medians.
func testReport(t *testing.T, medians map[string]float64, extra map[string]string) *Report {
	t.Helper()
	pkgs := map[string]map[string][]float64{}
	order := map[string][]string{}
	for name, m := range medians {
		pkg, name, _ := strings.Cut(name, " ")
		if pkgs[pkg] == nil {
			pkgs[pkg] = map[string][]float64{}
		}
		pkgs[pkg][name] = six(m)
		order[pkg] = append(order[pkg], name)
	}
	for _, o := range order {
		slices.Sort(o) // map order is random; the tables follow the output's
	}
	res, err := parse(strings.NewReader(goTestOutput(pkgs, order, extra)))
	if err != nil {
		t.Fatal(err)
	}
	return &Report{Generated: "now", Benchtime: "2s", Count: 6, Machine: Machine{CPU: "Test CPU", Cores: 2, TempFS: "ext4 (/dev/x, mounted at /)"}, Results: res}
}

var goalMedians = map[string]float64{
	rootPkg + " " + uniqueID + "strict/sync=off/c1":     400_000,
	rootPkg + " " + floorFlock:                          1_000_000, // goal 1: 0.40, fail
	rootPkg + " " + uniqueID + "strict/sync=on/c1":      9_500,
	rootPkg + " " + floorFsync:                          10_000, // goal 2: 0.95, pass
	rootPkg + " " + uniqueID + "strict/sync=on/c64":     240_000,
	rootPkg + " " + uniqueID + "block=65536/sync=on/c1": 20_000_000,
	rootPkg + " " + floorString + "1":                   30_000_000, // goal 4: 0.67, fail
}

func TestGoals(t *testing.T) {
	// 32 ids per update: the matching floor is 320,000 ids/s, goal 3 0.75.
	rep := testReport(t, goalMedians, map[string]string{uniqueID + "strict/sync=on/c64": "\t  32 ids/update"})
	want := []struct {
		ratio   float64
		verdict string
	}{{0.4, "fail"}, {0.95, "pass (the interval reaches below the goal)"}, {0.75, "fail (the interval reaches the goal)"}, {2.0 / 3, "fail"}}
	gs := goals(rep)
	if len(gs) != len(want)+4 {
		t.Fatalf("%d goals, want %d and 4 of BenchmarkCompareHeap", len(gs), len(want))
	}
	for _, g := range gs[len(want):] {
		if v := g.verdict(); v != "not measured" {
			t.Errorf("goal %q without BenchmarkCompareHeap: %q", g.what, v)
		}
	}
	for i, g := range gs[:len(want)] {
		if !g.q.ok || g.q.ratio < want[i].ratio-1e-9 || g.q.ratio > want[i].ratio+1e-9 {
			t.Errorf("goal %q: ratio %v, want %v (ratio of medians)", g.what, g.q.ratio, want[i].ratio)
		}
		if g.verdict() != want[i].verdict {
			t.Errorf("goal %q: %q, want %q", g.what, g.verdict(), want[i].verdict)
		}
		// Runs 0.9..1.1 of the median: the extremes are 0.9/1.1 and 1.1/0.9.
		if lo, hi := want[i].ratio*0.9/1.1, want[i].ratio*1.1/0.9; g.q.lo < lo-1e-9 || g.q.lo > lo+1e-9 || g.q.hi < hi-1e-9 || g.q.hi > hi+1e-9 {
			t.Errorf("goal %q: range %v..%v, want %v..%v", g.what, g.q.lo, g.q.hi, lo, hi)
		}
	}
	// Without the benchmarks, a goal is not measured, not failed or passed.
	if v := goals(&Report{})[0].verdict(); v != "not measured" {
		t.Errorf("empty report: %q", v)
	}
}

func TestMarkdown(t *testing.T) {
	medians := map[string]float64{}
	for k, v := range goalMedians {
		medians[k] = v
	}
	for k, v := range map[string]float64{
		"BenchmarkCompare/snapid/block=65536/c1":           20_000_000,
		"BenchmarkCompare/snowflake/node=1/c1":             4_096_000,
		"BenchmarkCompare/snowflake/node=1+stepbits=21/c1": 10_000_000,
		"BenchmarkCompare/sonyflake/machine=1/c1":          25_600,
		"BenchmarkCompare/xid/new/c1":                      5_000_000,
		"BenchmarkMultiProcess/strict-sync=on/p1":          5_000,
		"BenchmarkMultiProcess/strict-sync=on/p4":          4_000,
	} {
		medians[benchPkg+" "+k] = v
	}
	rep := testReport(t, medians, map[string]string{
		uniqueID + "strict/sync=on/c1":  "\t  1 ids/update",
		uniqueID + "strict/sync=on/c64": "\t  32 ids/update",
	})
	rep.Runs = []*Run{{Dir: ".", Command: "go test -bench '^(A|B)$'", Seconds: 1}}
	md := markdown(rep)
	row := func(prefix string) string {
		for line := range strings.SplitSeq(md, "\n") {
			if strings.HasPrefix(line, prefix) {
				return line
			}
		}
		t.Fatalf("no row %q in\n%s", prefix, md)
		return ""
	}
	for _, tc := range []struct{ row, want string }{
		{"| snowflake | node=1 | 1 |", "| – | rate limit"},
		{"| sonyflake | machine=1 | 1 |", "| – | design rate limit"},
		{"| snowflake | node=1+stepbits=21 | 1 |", "| 2.00× | speed"},
		{"| xid | new | 1 |", "| 4.00× | speed |"},
		{"| strict-sync=on | 4 |", "| 0.80× |"},
		{"| 1 | 20,000,000 |", "| 0.67× |"},
		{"| on | 1 | 9,500 | ±10 % |", "| 10,000 | 0.95× |"},
		{"| on | 64 | 240,000 | ±10 % | 32.0 |", "| 320,000 | 0.75× |"},
		{"| strict, sync on, 1 caller ÷ flock+pread+pwrite+fdatasync floor |", "| 0.95 |"},
		{"| . |", "`go test -bench '^(A\\|B)$'`"},
	} {
		if r := row(tc.row); !strings.Contains(r, tc.want) {
			t.Errorf("row %q: want %q in it", r, tc.want)
		}
	}
	for _, want := range []string{"Test CPU", "ext4", "median", "-count 6 -benchtime 2s"} {
		if !strings.Contains(md, want) {
			t.Errorf("no %q in the tables", want)
		}
	}
}

func TestEmbed(t *testing.T) {
	name := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	before := "# Benchmarks\n\nhand-written\n\n" + beginMark + "\n\nold tables\n\n" + endMark + "\n\n## Registry\n\nhand-written too\n"
	if err := os.WriteFile(name, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := embed(name, "new tables\n"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(name)
	want := "# Benchmarks\n\nhand-written\n\n" + beginMark + "\n\nnew tables\n\n" + endMark + "\n\n## Registry\n\nhand-written too\n"
	if string(got) != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	// Twice gives the same file.
	if err := embed(name, "new tables\n"); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(name); string(again) != want {
		t.Fatalf("second embed changed the file:\n%s", again)
	}

	// No markers: an error, and the file is left alone.
	if err := os.WriteFile(name, []byte("no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := embed(name, "x"); err == nil {
		t.Fatal("embed without markers: no error")
	}
	if got, _ := os.ReadFile(name); string(got) != "no markers\n" {
		t.Fatalf("file changed to %q", got)
	}
}

// TestReplot renders tables.md, the PNG and BENCHMARKS.md's part from a
// latest.json alone.
func TestReplot(t *testing.T) {
	dir := t.TempDir()
	rep := testReport(t, goalMedians, nil)
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "latest.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	md := filepath.Join(dir, "B.md")
	if err := os.WriteFile(md, []byte(beginMark+"\n"+endMark+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rerender(options{dir: dir, out: ".", benchmarksMD: "B.md"}); err != nil {
		t.Fatal(err)
	}
	tables, err := os.ReadFile(filepath.Join(dir, "tables.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(tables), markdown(rep)) {
		t.Fatal("tables.md is not the report's tables")
	}
	embedded, _ := os.ReadFile(md)
	if !strings.Contains(string(embedded), markdown(rep)) {
		t.Fatal("B.md does not hold the tables")
	}
	png, err := os.ReadFile(filepath.Join(dir, "ids_per_second.png"))
	if err != nil || len(png) < 1000 || string(png[1:4]) != "PNG" {
		t.Fatalf("ids_per_second.png: %d bytes, %v", len(png), err)
	}
}

func TestHeapGoals(t *testing.T) {
	medians := map[string]float64{}
	for k, v := range map[string]float64{
		"fresh/string/snapid/block=65536/c1":                     30_000_000,
		"fresh/string/snapid/block=65536+striped/c1":             31_000_000,
		"fresh/string/snowflake/node=1+stepbits=21/c1":           15_000_000,
		"fresh/string/xid/new/c1":                                20_000_000, // the fastest peer: 1.5, pass
		"fresh/native/snapid/block=65536+AppendUniqueID/c1":      40_000_000,
		"fresh/native/snowflake/node=1+stepbits=21+Int64/c1":     50_000_000, // 0.8, fail
		"busy/string/snapid/block=65536/c1":                      20_000_000,
		"busy/string/uuid/v7/c1":                                 5_000_000,  // 4, pass
		"busy/native/snapid/block=65536+striped+UniqueUint64/c1": 90_000_000, // no AppendUniqueID line: not measured
		"busy/native/xid/new+ID/c1":                              18_000_000,
	} {
		medians[benchPkg+" "+compareHeap+k] = v
	}
	rep := testReport(t, medians, nil)
	gs := heapGoals(rep)
	want := []struct {
		ratio   float64
		peer    string
		verdict string
	}{
		{1.5, "(xid new)", "pass"},
		{0.8, "(snowflake node=1+stepbits=21+Int64)", "fail"},
		{4, "(uuid v7)", "pass"},
		{0, "(xid new+ID)", "not measured"},
	}
	if len(gs) != len(want) {
		t.Fatalf("%d goals, want %d", len(gs), len(want))
	}
	for i, g := range gs {
		if g.verdict() != want[i].verdict || !strings.HasSuffix(g.what, want[i].peer) {
			t.Errorf("goal %q: %q, want %q against %s", g.what, g.verdict(), want[i].verdict, want[i].peer)
		}
		if g.q.ok && (g.q.ratio < want[i].ratio-1e-9 || g.q.ratio > want[i].ratio+1e-9) {
			t.Errorf("goal %q: ratio %v, want %v", g.what, g.q.ratio, want[i].ratio)
		}
	}
	var b strings.Builder
	writeHeap(&b, rep)
	md := b.String()
	for _, row := range []string{
		"| fresh | string | xid | new | 50.0 | 20,000,000 | ±10 % | 1.50× |",
		"| fresh | string | snapid | block=65536 | 33.3 | 30,000,000 | ±10 % | – |",
		"| fresh | string | snapid | block=65536+striped | 32.3 | 31,000,000 | ±10 % | 0.97× |",
		"| busy | string | uuid | v7 | 200 | 5,000,000 | ±10 % | 4.00× |",
	} {
		if !strings.Contains(md, row) {
			t.Errorf("no row %q in\n%s", row, md)
		}
	}
}

func TestLibraryLabel(t *testing.T) {
	for name, want := range map[string]string{
		"BenchmarkForms/block=65536/sync=on/decimal/AppendUniqueID": "AppendUniqueID, decimal form, block=65536, sync on, 1 caller",
		"BenchmarkForms/strict/sync=on/striped/UniqueUint64":        "UniqueUint64, striped form, strict, sync on, 1 caller",
		uniqueID + "strict/sync=off/c16":                            "UniqueID strict, sync off, 16 callers",
		"BenchmarkOther/x":                                          "BenchmarkOther/x",
	} {
		if got := libraryLabel(name); got != want {
			t.Errorf("libraryLabel(%q) = %q, want %q", name, got, want)
		}
	}
}
