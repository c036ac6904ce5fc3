package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

const (
	benchPkg = "github.com/snapid/snapid/bench"
	rootPkg  = "github.com/snapid/snapid/internal/engine"
)

// Names of the library's benchmarks that the goals and ratios use.
const (
	uniqueID      = "BenchmarkUniqueID/"
	floorFlock    = "BenchmarkFloor/flock+pread+pwrite"
	floorFsync    = "BenchmarkFloor/flock+pread+pwrite+fdatasync"
	floorString   = "BenchmarkFloor/atomic-add+string/c"
	strictCallers = "1,4,16,64"
)

// entry is a result of the comparisons, the multi-process runs or the
// library's strict mode, split into its parts.
type entry struct {
	Result
	impl, mode string // "snapid", "block=65536"
	unit       byte   // 'c' (callers in one process) or 'p' (processes)
	n          int    // how many callers or processes
}

// entries returns, in order, the bench module's results with names of the
// form Benchmark{Compare/<impl>,MultiProcess}/<mode>/{c,p}<N>, and the
// library's BenchmarkUniqueID/strict/sync=<on|off>/c<N> as snapid
// strict-sync=<on|off>.
func entries(rep *Report) []entry {
	var es []entry
	for _, r := range rep.Results {
		var impl, rest string
		switch {
		case r.Package == benchPkg && strings.HasPrefix(r.Name, "BenchmarkCompare/"):
			impl, rest, _ = strings.Cut(strings.TrimPrefix(r.Name, "BenchmarkCompare/"), "/")
		case r.Package == benchPkg && strings.HasPrefix(r.Name, "BenchmarkMultiProcess/"):
			impl, rest = "snapid", strings.TrimPrefix(r.Name, "BenchmarkMultiProcess/")
		case r.Package == rootPkg && strings.HasPrefix(r.Name, uniqueID+"strict/sync="):
			impl, rest = "snapid", "strict-"+strings.TrimPrefix(r.Name, uniqueID+"strict/")
		default:
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

// stat returns the summary of unit for the benchmark, if it ran.
func stat(rep *Report, pkg, name, unit string) (Stat, bool) {
	if r := find(rep, pkg, name); r != nil {
		return r.Stat(unit)
	}
	return Stat{}, false
}

// quotient is a/b for two summaries: the ratio of the medians, and the
// widest it could be within the intervals (lo: a's low end over b's high
// end); the range is unknown (0, 0) unless both intervals are bounded.
type quotient struct {
	ratio, lo, hi float64
	ok            bool // both medians exist and are positive
}

func divide(a, b Stat) quotient {
	if a.Median <= 0 || b.Median <= 0 {
		return quotient{}
	}
	q := quotient{ratio: a.Median / b.Median, ok: true}
	if a.Bounded && b.Bounded && b.Lo > 0 {
		q.lo, q.hi = a.Lo/b.Hi, a.Hi/b.Lo
	}
	return q
}

// times is s multiplied by k's median, interval ends by interval ends.
func times(s, k Stat) Stat {
	s.Median *= k.Median
	s.Lo *= k.Lo
	s.Hi *= k.Hi
	s.Bounded = s.Bounded && k.Bounded
	s.Values = nil
	return s
}

// A goal is a ratio of medians of one run that the library is measured
// against.
type goal struct {
	what string
	want float64 // the ratio must be at least this
	q    quotient
}

func (g goal) verdict() string {
	switch {
	case !g.q.ok:
		return "not measured"
	case g.q.ratio >= g.want && g.q.hi > 0 && g.q.lo < g.want:
		return "pass (the interval reaches below the goal)"
	case g.q.ratio >= g.want:
		return "pass"
	case g.q.hi >= g.want:
		return "fail (the interval reaches the goal)"
	}
	return "fail"
}

// goals computes the goals from rep.
func goals(rep *Report) []goal {
	ids := func(name string) Stat { st, _ := stat(rep, rootPkg, name, "ids/s"); return st }
	ipu, _ := stat(rep, rootPkg, uniqueID+"strict/sync=on/c64", "ids/update")
	return append([]goal{
		{"strict, sync off, 1 caller ÷ flock+pread+pwrite floor", 0.5,
			divide(ids(uniqueID+"strict/sync=off/c1"), ids(floorFlock))},
		{"strict, sync on, 1 caller ÷ flock+pread+pwrite+fdatasync floor", 0.9,
			divide(ids(uniqueID+"strict/sync=on/c1"), ids(floorFsync))},
		{"strict, sync on, 64 callers ÷ (ids per update × flock+pread+pwrite+fdatasync floor)", 0.8,
			divide(ids(uniqueID+"strict/sync=on/c64"), times(ids(floorFsync), ipu))},
		{"block=65536, 1 caller ÷ same-output floor (atomic add + id string), 1 caller", 0.85,
			divide(ids(uniqueID+"block=65536/sync=on/c1"), ids(floorString+"1"))},
	}, heapGoals(rep)...)
}

// markdown renders the tables: the body of tables.md and of BENCHMARKS.md's
// generated part.
func markdown(rep *Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "**Machine:** %s.\n\n", rep.Machine)
	fmt.Fprintf(&b, "Generated %s by `bench/run.sh`: every benchmark ran %d times (`go test -count %d -benchtime %s`); ", rep.Generated, rep.Count, rep.Count, rep.Benchtime)
	b.WriteString("the raw output is in `bench/results/latest.txt`, every run's values in `latest.json`. ")
	b.WriteString("A figure is the **median** of the runs, and ± is its 95 % confidence interval as benchstat computes it (golang.org/x/perf/benchmath, no assumption about the distribution; ")
	b.WriteString("with 6 runs it spans the lowest to the highest run; with fewer than 6 it is unbounded, ±∞). ")
	b.WriteString("Every ratio is between medians of this one run. ")
	b.WriteString("All figures hold for this machine, its disk and what else ran on it; scaling with callers depends on the CPU (core count, cost of sharing a cache line) in particular.\n")
	for _, r := range rep.Runs {
		if r.Error != "" {
			fmt.Fprintf(&b, "\n**The run in %s failed: %s** (see latest.txt); its tables may be incomplete.\n", r.Dir, r.Error)
		}
	}

	b.WriteString("\n## Goals\n\n")
	b.WriteString("Ratios of medians; the range is the ratio's extremes over the two confidence intervals.\n\n")
	b.WriteString("| goal | ratio | range | at least | verdict |\n|---|--:|--:|--:|---|\n")
	for _, g := range goals(rep) {
		rng := "–"
		if g.q.hi > 0 {
			rng = fmt.Sprintf("%s – %s", plain(g.q.lo), plain(g.q.hi))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", g.what, plainOrDash(g.q), rng, plain(g.want), g.verdict())
	}

	writeLibrary(&b, rep)
	writeStrict(&b, rep)
	writeFloors(&b, rep)
	writeProcesses(&b, rep)
	writePeers(&b, rep)
	writeHeap(&b, rep)
	writeSequences(&b, rep)

	b.WriteString("\n## Runs\n\n| where | command | seconds |\n|---|---|--:|\n")
	for _, r := range rep.Runs {
		// A | in a table cell ends it, even in code.
		fmt.Fprintf(&b, "| %s | `%s` | %s |\n", r.Dir, strings.ReplaceAll(r.Command, "|", `\|`), strconv.FormatFloat(r.Seconds, 'f', 1, 64))
	}
	return b.String()
}

// libraryLabels name the library's benchmarks in the tables.
var libraryLabels = []struct{ name, label string }{
	{uniqueID + "block=65536/sync=on/c1", "UniqueID block=65536, 1 caller"},
	{uniqueID + "block=65536/sync=on/c2", "UniqueID block=65536, 2 callers"},
	{uniqueID + "block=65536+cpushards/sync=on/c1", "UniqueID block=65536 + CPU shards, 1 caller"},
	{uniqueID + "block=65536+cpushards/sync=on/c2", "UniqueID block=65536 + CPU shards, 2 callers"},
	{floorFlock, "floor: flock + pread + pwrite (held descriptor)"},
	{floorFsync, "floor: flock + pread + pwrite + fdatasync"},
	{"BenchmarkFloor/pwrite+fdatasync", "floor: pwrite + fdatasync"},
	{"BenchmarkFloor/atomic-add/c1", "floor: atomic add, 1 caller"},
	{"BenchmarkFloor/atomic-add/c2", "floor: atomic add, 2 callers"},
	{floorString + "1", "floor: atomic add + id string, 1 caller"},
	{floorString + "2", "floor: atomic add + id string, 2 callers"},
}

func libraryLabel(name string) string {
	for _, l := range libraryLabels {
		if l.name == name {
			return l.label
		}
	}
	if rest, ok := strings.CutPrefix(name, "BenchmarkForms/"); ok {
		// <mode>/sync=<on|off>/<form>/<call>
		if p := strings.Split(rest, "/"); len(p) == 4 {
			return fmt.Sprintf("%s, %s form, %s, %s, 1 caller", p[3], p[2], p[0], strings.Replace(p[1], "=", " ", 1))
		}
	}
	if mode, ok := strings.CutPrefix(name, uniqueID+"strict/"); ok {
		sync, c, _ := strings.Cut(mode, "/c")
		return fmt.Sprintf("UniqueID strict, %s, %s", strings.Replace(sync, "=", " ", 1), callers(c))
	}
	return name
}

func callers(n string) string {
	if n == "1" {
		return "1 caller"
	}
	return n + " callers"
}

// writeLibrary: every result of the library's benchmarks.
func writeLibrary(b *strings.Builder, rep *Report) {
	b.WriteString("\n## The library (`go test -bench` in `internal/engine`)\n\n")
	b.WriteString("| benchmark | ns/op | ids/s | ± | B/op | allocs/op |\n|---|--:|--:|--:|--:|--:|\n")
	for _, r := range rep.Results {
		if r.Package != rootPkg {
			continue
		}
		st, _ := r.Stat("ids/s")
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", libraryLabel(r.Name), ns(r.NsPerOp), count(r.IDsPerSec), spread(st),
			optional(r.BytesPerOp), optional(r.AllocsPerOp))
	}
}

// writeStrict: strict mode's counter updates and latency by callers, and
// the floor matching its batching.
func writeStrict(b *strings.Builder, rep *Report) {
	b.WriteString("\n## Strict mode: counter updates and latency\n\n")
	b.WriteString("From `Generator.Stats()` over the timed part: ids per update (numbers reserved per counter file update; callers of one Generator that arrive during an update share the next one) and µs per update (lock waits included). ")
	b.WriteString("Latency is per call: each run reports the quantiles of its calls (those of the b.N loop go test keeps), and the table shows their median over the runs. ")
	b.WriteString("The matching floor is ids per update × the floor of one update (flock+pread+pwrite, with fdatasync for sync on), in ids/s.\n\n")
	b.WriteString("| sync | callers | ids/s | ± | ids/update | µs/update | p50 µs | p99 µs | p99.9 µs | matching floor, ids/s | ÷ matching floor |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, sync := range []string{"off", "on"} {
		floor := floorFlock
		if sync == "on" {
			floor = floorFsync
		}
		floorIDs, _ := stat(rep, rootPkg, floor, "ids/s")
		for c := range strings.SplitSeq(strictCallers, ",") {
			r := find(rep, rootPkg, uniqueID+"strict/sync="+sync+"/c"+c)
			if r == nil {
				continue
			}
			med := func(unit string) float64 { st, _ := r.Stat(unit); return st.Median }
			idsSt, _ := r.Stat("ids/s")
			ipu, _ := r.Stat("ids/update")
			match := times(floorIDs, ipu)
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", sync, c, count(idsSt.Median), spread(idsSt),
				plain(ipu.Median), plain(med("µs/update")), plain(med("p50-µs")), plain(med("p99-µs")), plain(med("p999-µs")),
				count(match.Median), ratio(idsSt.Median, match.Median))
		}
	}
}

// writeFloors: block mode against the floor with the same output.
func writeFloors(b *strings.Builder, rep *Report) {
	b.WriteString("\n## Block mode and the same-output floor\n\n")
	b.WriteString("The floor makes what block mode's `UniqueID` returns, with nothing else: an atomic add on one shared counter, then `server_a-<number>` appended in a stack buffer and made a string (one allocation). ")
	b.WriteString("The atomic add alone is listed for reference.\n\n")
	b.WriteString("| callers | block=65536, ids/s | + CPU shards, ids/s | floor, ids/s | atomic add alone, ids/s | block ÷ floor | CPU shards ÷ floor |\n|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, c := range []string{"1", "2"} {
		block, _ := stat(rep, rootPkg, uniqueID+"block=65536/sync=on/c"+c, "ids/s")
		shards, _ := stat(rep, rootPkg, uniqueID+"block=65536+cpushards/sync=on/c"+c, "ids/s")
		floor, _ := stat(rep, rootPkg, floorString+c, "ids/s")
		add, _ := stat(rep, rootPkg, "BenchmarkFloor/atomic-add/c"+c, "ids/s")
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s |\n", c, count(block.Median), count(shards.Median), count(floor.Median), count(add.Median),
			ratio(block.Median, floor.Median), ratio(shards.Median, floor.Median))
	}
}

// writeProcesses: processes sharing one counter file.
func writeProcesses(b *strings.Builder, rep *Report) {
	b.WriteString("\n## Processes sharing one counter file (`BenchmarkMultiProcess`)\n\n")
	b.WriteString("Each process opens its own Generator on the same file and draws a fixed count of ids in one goroutine; ids/s is for all processes together, from the earliest start to the latest end. ")
	b.WriteString("Group commit shares updates among the callers of one Generator only: across processes every update takes the file's flock, so in strict mode each update serves one process (ids/update). ")
	b.WriteString("Block mode reserves 65,536 numbers per update; programs in several processes that need more ids/s than strict mode gives use block mode (`Config.Block`).\n\n")
	b.WriteString("| mode | processes | ids per process | ns/id | ids/s | ± | ids/update | ÷ same mode, 1 process |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, e := range entries(rep) {
		if e.unit != 'p' {
			continue
		}
		st, _ := e.Stat("ids/s")
		ipu, _ := e.Stat("ids/update")
		per, _ := e.Stat("ids/process")
		one, _ := stat(rep, benchPkg, "BenchmarkMultiProcess/"+e.mode+"/p1", "ids/s")
		fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s | %s | %s |\n", e.mode, e.n, count(per.Median), ns(e.NsPerOp), count(st.Median), spread(st),
			plain(ipu.Median), ratio(st.Median, one.Median))
	}
}

// peerNotes say what a generator's line measures.
var peerNotes = map[string]string{
	"snowflake/node=1":             "rate limit: 4,096 ids per ms (4,096,000/s), then spins; not speed",
	"snowflake/node=1+stepbits=21": "speed: `snowflake.StepBits = 21`, `NodeBits = 1` (package globals, set before `NewNode`)",
	"sonyflake/machine=1":          "design rate limit: 256 ids per 10 ms (25,600/s), then sleeps; not speed",
}

// rateLimited marks the peers whose line measures a cap.
var rateLimited = map[string]bool{"snowflake/node=1": true, "sonyflake/machine=1": true}

// writePeers: the other generators against snapid's block mode.
func writePeers(b *strings.Builder, rep *Report) {
	b.WriteString("\n## Other generators, same workload (ids as strings)\n\n")
	b.WriteString("snapid block ÷ peer compares with snapid block=65536 at the same number of callers, from the same `go test` run (above 1: snapid gives more ids/s). ")
	b.WriteString("Lines that measure a rate limit have no ratio: their figure is the limit, not the generator's speed.\n\n")
	b.WriteString("| generator | mode | callers | ns/op | ids/s | ± | snapid block ÷ peer | what the line measures | B/op | allocs/op |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|---|--:|--:|\n")
	for _, e := range entries(rep) {
		if e.unit != 'c' || e.Package != benchPkg {
			continue
		}
		st, _ := e.Stat("ids/s")
		key := e.impl + "/" + e.mode
		vs := "–"
		if e.impl != "snapid" && !rateLimited[key] {
			block, _ := stat(rep, benchPkg, fmt.Sprintf("BenchmarkCompare/snapid/block=65536/c%d", e.n), "ids/s")
			vs = ratio(block.Median, st.Median)
		}
		note := peerNotes[key]
		if note == "" {
			note = "speed"
		}
		fmt.Fprintf(b, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", e.impl, e.mode, e.n, ns(e.NsPerOp), count(st.Median), spread(st),
			vs, note, optional(e.BytesPerOp), optional(e.AllocsPerOp))
	}
}

// spread formats a Stat's confidence interval as ± the larger distance
// from the median, in percent, as benchstat does.
func spread(st Stat) string {
	switch {
	case st.Median <= 0:
		return "–"
	case !st.Bounded:
		return "±∞"
	}
	d := math.Max(st.Hi/st.Median-1, 1-st.Lo/st.Median)
	return fmt.Sprintf("±%.0f %%", 100*d)
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

// plain formats v with 2 decimals below 10, 1 below 100, else as count.
func plain(v float64) string { return ns(v) }

func plainOrDash(q quotient) string {
	if !q.ok {
		return "–"
	}
	return plain(q.ratio)
}

func ratio(a, b float64) string {
	if a <= 0 || b <= 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "–"
	}
	r := a / b
	switch {
	case r >= 100:
		return count(r) + "×"
	case r >= 10:
		return strconv.FormatFloat(r, 'f', 1, 64) + "×"
	case r >= 0.1:
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
	if *p < 10 {
		return strconv.FormatFloat(*p, 'f', -1, 64)
	}
	return count(*p)
}

// writeSequences: a sequence's Next beside one LWT round trip on the test
// node and beside block mode.
func writeSequences(b *strings.Builder, rep *Report) {
	lwt := find(rep, benchPkg, "BenchmarkSequence/lwt-round-trip")
	if lwt == nil && find(rep, benchPkg, "BenchmarkSequence/next/c1") == nil {
		return
	}
	b.WriteString("\n## Integer sequences (`BenchmarkSequence`, the test's Cassandra node)\n\n")
	b.WriteString("`s.Next()` takes numbers from a block of the host's lease file (synced before any of its numbers is returned); the lease comes from the data centre's range, the range from GLOBAL, in the background at half use. ")
	b.WriteString("The LWT line is one conditional update on the same node per operation: what a sequence that pays a lightweight transaction (or a lock) per number costs. ")
	b.WriteString("÷ LWT and ÷ block mode compare medians of this run.\n\n")
	b.WriteString("| benchmark | ns/op | ids/s | ± | ÷ one LWT per number | ÷ snapid block=65536 UniqueID, same callers |\n|---|--:|--:|--:|--:|--:|\n")
	lwtRate := 0.0
	if lwt != nil && lwt.NsPerOp > 0 {
		lwtRate = 1e9 / lwt.NsPerOp
	}
	for _, c := range []string{"1", "2"} {
		r := find(rep, benchPkg, "BenchmarkSequence/next/c"+c)
		if r == nil {
			continue
		}
		st, _ := r.Stat("ids/s")
		block, _ := stat(rep, rootPkg, uniqueID+"block=65536/sync=on/c"+c, "ids/s")
		fmt.Fprintf(b, "| Next, %s | %s | %s | %s | %s | %s |\n", callers(c), ns(r.NsPerOp), count(st.Median), spread(st), ratio(st.Median, lwtRate), ratio(st.Median, block.Median))
	}
	if lwt != nil {
		fmt.Fprintf(b, "| one LWT round trip (Registry.Touch) | %s | %s | | 1.00× | |\n", ns(lwt.NsPerOp), count(lwtRate))
	}
}
