// Command report runs the comparison benchmarks of the bench module and the
// library's own BenchmarkUniqueID and BenchmarkFloor, each -count times,
// summarizes every benchmark's runs as benchstat does (median and its 95 %
// confidence interval, from golang.org/x/perf/benchmath), and writes, in
// results/:
//
//	latest.txt          the machine and the raw go test output
//	latest.json         the machine and every result: all runs' values and their summaries
//	tables.md           markdown tables of the medians, their intervals and ratios of medians
//	ids_per_second.png  median ids/s by generator, mode and callers (log scale)
//
// and replaces the generated part of BENCHMARKS.md (between its markers)
// with the tables. Run it from the bench directory (bench/run.sh does):
//
//	go run ./report [-count 6] [-benchtime 2s] [-quick] [-bench REGEXP] [-root-bench REGEXP] [-out results] [-benchmarks-md ../BENCHMARKS.md]
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchmath"
	"golang.org/x/sys/unix"
)

// Machine describes where the benchmarks ran.
type Machine struct {
	CPU        string `json:"cpu"`
	Cores      int    `json:"cores"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	Memory     string `json:"memory"`
	Kernel     string `json:"kernel"`
	Go         string `json:"go"`
	TempDir    string `json:"temp_dir"`
	TempFS     string `json:"temp_fs"`
}

func (m Machine) String() string {
	return fmt.Sprintf("%s, %d cores (GOMAXPROCS %d), %s RAM, Linux %s, %s, temp dir %s on %s",
		m.CPU, m.Cores, m.GOMAXPROCS, m.Memory, m.Kernel, m.Go, m.TempDir, m.TempFS)
}

// Run is one go test invocation.
type Run struct {
	Dir     string  `json:"dir"`
	Command string  `json:"command"`
	Seconds float64 `json:"seconds"`
	Error   string  `json:"error,omitempty"`
	output  []byte
}

// Confidence is the confidence level of the intervals, as benchstat's
// default.
const Confidence = 0.95

// Stat summarizes one unit's values over a benchmark's runs: the median
// and a distribution-free confidence interval for it, as benchstat reports
// them (benchmath.AssumeNothing).
type Stat struct {
	Median     float64   `json:"median"`
	Lo         float64   `json:"lo"`
	Hi         float64   `json:"hi"`
	Confidence float64   `json:"confidence"` // of [Lo, Hi]; at least the Confidence asked for
	Values     []float64 `json:"values"`     // every run's value, ascending
	// Bounded: [Lo, Hi] is finite. With too few runs it is not (benchmath
	// needs 6 at 95 %), and Lo and Hi are 0.
	Bounded bool   `json:"bounded"`
	Warning string `json:"warning,omitempty"`
}

// summarize returns the Stat of values.
func summarize(values []float64) Stat {
	vs := append([]float64(nil), values...)
	s := benchmath.AssumeNothing.Summary(benchmath.NewSample(vs, &benchmath.DefaultThresholds), Confidence)
	st := Stat{Median: s.Center, Lo: s.Lo, Hi: s.Hi, Confidence: s.Confidence, Values: vs}
	var ws []string
	for _, w := range s.Warnings {
		ws = append(ws, w.Error())
	}
	st.Warning = strings.Join(ws, "; ")
	st.Bounded = !math.IsInf(st.Lo, 0) && !math.IsInf(st.Hi, 0)
	if !st.Bounded { // JSON has no infinity
		st.Lo, st.Hi = 0, 0
	}
	return st
}

// Result is one benchmark: its runs summarized unit by unit. The medians
// of the usual units are copied out for convenience.
type Result struct {
	Package     string          `json:"package"`
	Name        string          `json:"name"` // without the -GOMAXPROCS suffix
	Procs       int             `json:"procs,omitempty"`
	Runs        int             `json:"runs"`
	Units       map[string]Stat `json:"units"` // by unit as go test prints it: "ns/op", "ids/s", "p99-µs", …
	NsPerOp     float64         `json:"ns_per_op"`
	IDsPerSec   float64         `json:"ids_per_s,omitempty"`
	BytesPerOp  *float64        `json:"bytes_per_op,omitempty"`
	AllocsPerOp *float64        `json:"allocs_per_op,omitempty"`
}

// Stat returns the summary of unit, and whether the benchmark reported it.
func (r *Result) Stat(unit string) (Stat, bool) {
	st, ok := r.Units[unit]
	return st, ok
}

// Report is latest.json.
type Report struct {
	Generated string   `json:"generated"`
	Benchtime string   `json:"benchtime"`
	Count     int      `json:"count"`
	Machine   Machine  `json:"machine"`
	Runs      []*Run   `json:"runs"`
	Results   []Result `json:"results"`
}

// Marks of the part of BENCHMARKS.md that the report writes.
const (
	beginMark = "<!-- begin: written by bench/run.sh (bench/report), edit the report program instead -->"
	endMark   = "<!-- end: written by bench/run.sh -->"
)

type options struct {
	dir, out, benchtime, bench, rootBench, benchmarksMD string
	count                                               int
}

func main() {
	var o options
	flag.IntVar(&o.count, "count", 6, "go test -count: runs of each benchmark (the tables show their median and its 95 % confidence interval)")
	flag.StringVar(&o.benchtime, "benchtime", "2s", "go test -benchtime (use a duration: the multi-process benchmarks run b.N whole rounds)")
	quick := flag.Bool("quick", false, "a quick try: -count 2 -benchtime 200ms, results in a temporary directory unless -out is given, BENCHMARKS.md left alone unless -benchmarks-md is given")
	flag.StringVar(&o.bench, "bench", ".", "go test -bench pattern for the bench module")
	flag.StringVar(&o.rootBench, "root-bench", "^(BenchmarkUniqueID|BenchmarkFloor|BenchmarkForms)$", "go test -bench pattern for the library (empty: skip)")
	flag.StringVar(&o.dir, "dir", ".", "the bench module's directory")
	flag.StringVar(&o.out, "out", "results", "output directory (relative to -dir)")
	flag.StringVar(&o.benchmarksMD, "benchmarks-md", "../BENCHMARKS.md", "file whose generated part (between its markers) gets the tables, relative to -dir (empty: none)")
	replot := flag.Bool("replot", false, "run nothing: rewrite tables.md, the PNG and BENCHMARKS.md's generated part from latest.json")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *quick {
		if !set["count"] {
			o.count = 2
		}
		if !set["benchtime"] {
			o.benchtime = "200ms"
		}
		if !set["out"] {
			o.out = filepath.Join(os.TempDir(), "snapid-bench-quick")
		}
		if !set["benchmarks-md"] {
			o.benchmarksMD = ""
		}
	}
	var err error
	if *replot {
		err = rerender(o)
	} else {
		err = run(o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.count < 1 {
		return fmt.Errorf("-count %d: want at least 1", o.count)
	}
	benchDir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(benchDir, "compare_test.go")); err != nil {
		return fmt.Errorf("%s is not the bench directory: %w", benchDir, err)
	}
	out := o.out
	if !filepath.IsAbs(out) {
		out = filepath.Join(benchDir, out)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	m := machine(benchDir)
	fmt.Println("machine:", m)

	rep := &Report{Generated: time.Now().UTC().Format(time.RFC3339), Benchtime: o.benchtime, Count: o.count, Machine: m}
	rep.Runs = append(rep.Runs, goTest(benchDir, "bench", o.bench, o.benchtime, o.count))
	if o.rootBench != "" {
		rep.Runs = append(rep.Runs, goTest(filepath.Join(filepath.Dir(benchDir), "internal", "engine"), "internal/engine", o.rootBench, o.benchtime, o.count))
	}
	var raw bytes.Buffer
	fmt.Fprintf(&raw, "# machine: %s\n# generated: %s, -benchtime %s -count %d\n", m, rep.Generated, o.benchtime, o.count)
	var failed []string
	var output bytes.Buffer
	for _, r := range rep.Runs {
		fmt.Fprintf(&raw, "\n# in %s: %s\n", r.Dir, r.Command)
		raw.Write(r.output)
		output.Write(r.output)
		if r.Error != "" {
			failed = append(failed, fmt.Sprintf("in %s: %s", r.Dir, r.Error))
			fmt.Fprintf(&raw, "# FAILED: %s\n", r.Error)
		}
	}
	if rep.Results, err = parse(&output); err != nil {
		failed = append(failed, "parsing the output: "+err.Error())
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(out, "latest.txt"), raw.Bytes()); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(out, "latest.json"), append(js, '\n')); err != nil {
		return err
	}
	if err := render(rep, out, o.dir, o.benchmarksMD); err != nil {
		failed = append(failed, err.Error())
	}
	fmt.Println()
	fmt.Print(markdown(rep))
	fmt.Printf("\nwrote %s/{latest.txt,latest.json,tables.md,ids_per_second.png}\n", out)
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	return nil
}

// render writes tables.md, the PNG and the generated part of benchmarksMD
// (relative to dir; none if empty) from rep.
func render(rep *Report, out, dir, benchmarksMD string) error {
	body := markdown(rep)
	if err := writeFile(filepath.Join(out, "tables.md"), []byte("# snapid benchmarks\n\n"+body)); err != nil {
		return err
	}
	if benchmarksMD != "" {
		if !filepath.IsAbs(benchmarksMD) {
			benchmarksMD = filepath.Join(dir, benchmarksMD)
		}
		if err := embed(benchmarksMD, body); err != nil {
			return err
		}
	}
	png, err := plotIDs(rep)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return writeFile(filepath.Join(out, "ids_per_second.png"), png)
}

// embed replaces what lies between the markers in the file name with body.
func embed(name, body string) error {
	b, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, beginMark), strings.Index(s, endMark)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %q … %q markers to write the tables between", name, beginMark, endMark)
	}
	s = s[:i+len(beginMark)] + "\n\n" + body + "\n" + s[j:]
	return writeFile(name, []byte(s))
}

// rerender redoes tables.md, the PNG and BENCHMARKS.md's part from
// latest.json.
func rerender(o options) error {
	out := o.out
	if !filepath.IsAbs(out) {
		out = filepath.Join(o.dir, out)
	}
	js, err := os.ReadFile(filepath.Join(out, "latest.json"))
	if err != nil {
		return err
	}
	rep := &Report{}
	if err := json.Unmarshal(js, rep); err != nil {
		return err
	}
	return render(rep, out, o.dir, o.benchmarksMD)
}

// writeFile replaces name with data through a temporary file.
func writeFile(name string, data []byte) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

// goTest runs the benchmarks matching pattern in dir, echoing the output.
func goTest(dir, rel, pattern, benchtime string, count int) *Run {
	args := []string{"test", "-run", "^$", "-bench", pattern, "-benchtime", benchtime, "-count", strconv.Itoa(count), "-timeout", "60m", "."}
	r := &Run{Dir: rel, Command: "go " + quoteArgs(args)}
	fmt.Printf("\n== in %s: %s\n", dir, r.Command)
	var buf bytes.Buffer
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Stdout = io.MultiWriter(os.Stdout, &buf)
	cmd.Stderr = cmd.Stdout
	start := time.Now()
	if err := cmd.Run(); err != nil {
		r.Error = err.Error()
	}
	r.Seconds = math.Round(time.Since(start).Seconds()*10) / 10
	r.output = buf.Bytes()
	return r
}

func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, "^$|()*? ") {
			a = "'" + a + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

var procsSuffix = regexp.MustCompile(`-(\d+)$`)

// parse reads go test benchmark output (benchfmt: any number of runs of
// each benchmark, of one or more packages) and summarizes each
// benchmark's values unit by unit, in the order benchmarks first appear.
// Units are kept as go test prints them (ns/op, not benchfmt's sec/op).
func parse(r io.Reader) ([]Result, error) {
	type key struct{ pkg, name string }
	var order []key
	values := map[key]map[string][]float64{}
	runs := map[key]int{}
	procs := map[key]int{}
	var errs []error
	br := benchfmt.NewReader(r, "go test output")
	for br.Scan() {
		switch rec := br.Result().(type) {
		case *benchfmt.SyntaxError:
			errs = append(errs, rec)
		case *benchfmt.Result:
			// benchfmt drops the "Benchmark" prefix; the tables use go test's names.
			k := key{pkg: rec.GetConfig("pkg"), name: "Benchmark" + rec.Name.String()}
			p := 0
			if m := procsSuffix.FindStringSubmatch(k.name); m != nil {
				p, _ = strconv.Atoi(m[1])
				k.name = strings.TrimSuffix(k.name, m[0])
			}
			if values[k] == nil {
				values[k] = map[string][]float64{}
				order = append(order, k)
			}
			procs[k] = p
			runs[k]++
			for _, v := range rec.Values {
				unit, val := v.Unit, v.Value
				if v.OrigUnit != "" {
					unit, val = v.OrigUnit, v.OrigValue
				}
				values[k][unit] = append(values[k][unit], val)
			}
		}
	}
	if err := br.Err(); err != nil {
		errs = append(errs, err)
	}
	res := make([]Result, 0, len(order))
	for _, k := range order {
		r := Result{Package: k.pkg, Name: k.name, Procs: procs[k], Runs: runs[k], Units: map[string]Stat{}}
		for unit, vs := range values[k] {
			r.Units[unit] = summarize(vs)
		}
		r.NsPerOp = r.Units["ns/op"].Median
		r.IDsPerSec = r.Units["ids/s"].Median
		if st, ok := r.Units["B/op"]; ok {
			r.BytesPerOp = &st.Median
		}
		if st, ok := r.Units["allocs/op"]; ok {
			r.AllocsPerOp = &st.Median
		}
		res = append(res, r)
	}
	return res, errors.Join(errs...)
}

// machine describes this machine.
func machine(benchDir string) Machine {
	m := Machine{Cores: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), CPU: "unknown", Memory: "unknown"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
					m.Memory = fmt.Sprintf("%.1f GiB", kb/(1<<20))
				}
			}
		}
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	cmd := exec.Command("go", "version")
	cmd.Dir = benchDir
	if b, err := cmd.Output(); err == nil {
		m.Go = strings.TrimPrefix(strings.TrimSpace(string(b)), "go version ")
	} else {
		m.Go = runtime.Version()
	}
	m.TempDir = os.TempDir()
	m.TempFS = fileSystem(m.TempDir)
	return m
}

// fileSystem names the file system holding dir, from /proc/self/mounts.
func fileSystem(dir string) string {
	if d, err := filepath.EvalSymlinks(dir); err == nil {
		dir = d
	}
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return "unknown"
	}
	best, fs := -1, "unknown"
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		mnt := strings.ReplaceAll(f[1], `\040`, " ")
		if dir == mnt || mnt == "/" || strings.HasPrefix(dir, mnt+"/") {
			if len(mnt) >= best { // later mounts over the same point win
				best, fs = len(mnt), fmt.Sprintf("%s (%s, mounted at %s)", f[2], f[0], mnt)
			}
		}
	}
	return fs
}
