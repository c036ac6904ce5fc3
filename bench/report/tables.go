package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

const (
	benchPkg = "github.com/snapid/snapid/bench"
	rootPkg  = "github.com/snapid/snapid"

	baseStrict = "BenchmarkCompare/snapid/strict-sync=off/c1"
	baseBlock  = "BenchmarkCompare/snapid/block=65536/c1"
)

// entry is a comparison or multi-process result split into its parts.
type entry struct {
	Result
	impl, mode string // "snapid", "block=65536"
	unit       byte   // 'c' (callers in one process) or 'p' (processes)
	n          int    // how many callers or processes
}

// entries returns the bench module's results with names of the form
// Benchmark{Compare/<impl>,MultiProcess}/<mode>/{c,p}<N>, in order.
func entries(rep *Report) []entry {
	var es []entry
	for _, r := range rep.Results {
		if r.Package != benchPkg {
			continue
		}
		var impl, rest string
		if s, ok := strings.CutPrefix(r.Name, "BenchmarkCompare/"); ok {
			impl, rest, _ = strings.Cut(s, "/")
		} else if s, ok := strings.CutPrefix(r.Name, "BenchmarkMultiProcess/"); ok {
			impl, rest = "snapid", s
		} else {
			continue
		}
		i := strings.LastIndexByte(rest, '/')
		if i < 0 || i+2 > len(rest) {
			continue
		}
		n, err := strconv.Atoi(rest[i+2:])
		if err != nil {
			continue
		}
		es = append(es, entry{Result: r, impl: impl, mode: rest[:i], unit: rest[i+1], n: n})
	}
	return es
}

func find(rep *Report, pkg, name string) *Result {
	for i := range rep.Results {
		if r := &rep.Results[i]; r.Package == pkg && r.Name == name {
			return r
		}
	}
	return nil
}

// markdown renders tables.md.
func markdown(rep *Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# snapid benchmarks\n\nMachine: %s.\n\nGenerated %s with `-benchtime %s -count 1` by `bench/run.sh`; raw output in latest.txt. ",
		rep.Machine, rep.Generated, rep.Benchtime)
	b.WriteString("Every generator returns its ids as strings. ns/op is per id; for the multi-process rows it is the span of the run divided by the ids of all processes.\n")
	for _, r := range rep.Runs {
		if r.Error != "" {
			fmt.Fprintf(&b, "\n**The run in %s failed: %s** (see latest.txt); its tables may be incomplete.\n", r.Dir, r.Error)
		}
	}

	es := entries(rep)
	ids := func(name string) float64 {
		if r := find(rep, benchPkg, name); r != nil {
			return r.IDsPerSec
		}
		return 0
	}
	strictBase, blockBase := ids(baseStrict), ids(baseBlock)

	b.WriteString("\n## snapid in one process\n\n")
	b.WriteString("| mode | callers | ns/op | ids/s | × strict sync=off c1 | × block c1 | B/op | allocs/op |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, e := range es {
		if e.impl != "snapid" || e.unit != 'c' {
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s |\n", e.mode, e.n, ns(e.NsPerOp), count(e.IDsPerSec),
			ratio(e.IDsPerSec, strictBase), ratio(e.IDsPerSec, blockBase), optional(e.BytesPerOp), optional(e.AllocsPerOp))
	}

	b.WriteString("\n## snapid, processes sharing one counter file\n\n")
	b.WriteString("Each process opens its own Generator on the same file and draws a fixed count of ids in one goroutine; ids/s is for all processes together.\n\n")
	b.WriteString("| mode | processes | ids per process | ns/id | ids/s | × same mode in one process, c1 | × strict sync=off c1 |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|\n")
	for _, e := range es {
		if e.unit != 'p' {
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s |\n", e.mode, e.n, count(e.Metrics["ids/process"]), ns(e.NsPerOp), count(e.IDsPerSec),
			ratio(e.IDsPerSec, ids("BenchmarkCompare/snapid/"+e.mode+"/c1")), ratio(e.IDsPerSec, strictBase))
	}

	b.WriteString("\n## Other generators\n\n")
	b.WriteString("snapid block ÷ peer compares with snapid block=65536 at the same number of callers: above 1, snapid is faster.\n\n")
	b.WriteString("| generator | mode | callers | ns/op | ids/s | snapid block ÷ peer | snapid strict sync=off c1 ÷ peer | B/op | allocs/op |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, e := range es {
		if e.impl == "snapid" {
			continue
		}
		block := ids(fmt.Sprintf("BenchmarkCompare/snapid/block=65536/c%d", e.n))
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s | %s | %s |\n", e.impl, e.mode, e.n, ns(e.NsPerOp), count(e.IDsPerSec),
			ratio(block, e.IDsPerSec), ratio(strictBase, e.IDsPerSec), optional(e.BytesPerOp), optional(e.AllocsPerOp))
	}

	b.WriteString("\n## The library's own benchmarks (`go test -bench` in the repository root)\n\n")
	b.WriteString("| benchmark | ns/op | ids/s | B/op | allocs/op |\n|---|--:|--:|--:|--:|\n")
	for _, r := range rep.Results {
		if r.Package != rootPkg {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.Name, ns(r.NsPerOp), count(r.IDsPerSec), optional(r.BytesPerOp), optional(r.AllocsPerOp))
	}
	return b.String()
}

// count formats v rounded, with thousands separators.
func count(v float64) string {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	s := strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func ns(v float64) string {
	switch {
	case v <= 0:
		return "–"
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return count(v)
}

func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "–"
	}
	r := a / b
	switch {
	case r >= 100:
		return count(r) + "×"
	case r >= 10:
		return strconv.FormatFloat(r, 'f', 1, 64) + "×"
	case r >= 1:
		return strconv.FormatFloat(r, 'f', 2, 64) + "×"
	}
	if r >= 0.1 {
		return strconv.FormatFloat(r, 'f', 2, 64) + "×"
	}
	return "1/" + strings.TrimSuffix(ratio(b, a), "×") // 1/5,004 reads better than 0.0002×
}

func optional(p *float64) string {
	if p == nil {
		return "–"
	}
	if *p == 0 {
		return "0"
	}
	return count(*p)
}
