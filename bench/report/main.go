// Command report runs the comparison benchmarks of the bench module and the
// library's own BenchmarkUniqueID and BenchmarkFloor, and writes, in
// results/:
//
//	latest.txt          the machine and the raw go test output
//	latest.json         the machine and every parsed result
//	tables.md           markdown tables of ids/s and ratios
//	ids_per_second.png  ids/s by generator, mode and callers (log scale)
//
// Run it from the bench directory (bench/run.sh does):
//
//	go run ./report [-benchtime 1s] [-bench REGEXP] [-root-bench REGEXP] [-out results]
package main

import (
	"bufio"
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

// Result is one benchmark line.
type Result struct {
	Package     string             `json:"package"`
	Name        string             `json:"name"` // without the -GOMAXPROCS suffix
	Procs       int                `json:"procs,omitempty"`
	Iterations  int64              `json:"iterations"`
	NsPerOp     float64            `json:"ns_per_op"`
	IDsPerSec   float64            `json:"ids_per_s,omitempty"`
	BytesPerOp  *float64           `json:"bytes_per_op,omitempty"`
	AllocsPerOp *float64           `json:"allocs_per_op,omitempty"`
	Metrics     map[string]float64 `json:"metrics"`
}

// Report is latest.json.
type Report struct {
	Generated string   `json:"generated"`
	Benchtime string   `json:"benchtime"`
	Machine   Machine  `json:"machine"`
	Runs      []*Run   `json:"runs"`
	Results   []Result `json:"results"`
}

func main() {
	benchtime := flag.String("benchtime", "1s", "go test -benchtime (use a duration: the multi-process benchmarks run b.N whole rounds)")
	bench := flag.String("bench", ".", "go test -bench pattern for the bench module")
	rootBench := flag.String("root-bench", "^(BenchmarkUniqueID|BenchmarkFloor)$", "go test -bench pattern for the library (empty: skip)")
	dir := flag.String("dir", ".", "the bench module's directory")
	out := flag.String("out", "results", "output directory (relative to -dir)")
	replot := flag.Bool("replot", false, "run nothing: rewrite tables.md and the PNG from latest.json")
	flag.Parse()
	var err error
	if *replot {
		err = rerender(*dir, *out)
	} else {
		err = run(*dir, *out, *benchtime, *bench, *rootBench)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(dir, out, benchtime, bench, rootBench string) error {
	benchDir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(benchDir, "compare_test.go")); err != nil {
		return fmt.Errorf("%s is not the bench directory: %w", benchDir, err)
	}
	if !filepath.IsAbs(out) {
		out = filepath.Join(benchDir, out)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	m := machine(benchDir)
	fmt.Println("machine:", m)

	rep := &Report{Generated: time.Now().UTC().Format(time.RFC3339), Benchtime: benchtime, Machine: m}
	rep.Runs = append(rep.Runs, goTest(benchDir, "bench", bench, benchtime))
	if rootBench != "" {
		rep.Runs = append(rep.Runs, goTest(filepath.Dir(benchDir), ".", rootBench, benchtime))
	}
	var raw bytes.Buffer
	fmt.Fprintf(&raw, "# machine: %s\n# generated: %s, -benchtime %s -count 1\n", m, rep.Generated, benchtime)
	var failed []string
	for _, r := range rep.Runs {
		fmt.Fprintf(&raw, "\n# in %s: %s\n", r.Dir, r.Command)
		raw.Write(r.output)
		rep.Results = append(rep.Results, parse(r.output)...)
		if r.Error != "" {
			failed = append(failed, fmt.Sprintf("in %s: %s", r.Dir, r.Error))
			fmt.Fprintf(&raw, "# FAILED: %s\n", r.Error)
		}
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	tables := markdown(rep)
	files := []struct {
		name string
		data []byte
	}{
		{"latest.txt", raw.Bytes()},
		{"latest.json", append(js, '\n')},
		{"tables.md", []byte(tables)},
	}
	for _, f := range files {
		if err := writeFile(filepath.Join(out, f.name), f.data); err != nil {
			return err
		}
	}
	png, err := plotIDs(rep)
	if err != nil {
		failed = append(failed, "plot: "+err.Error())
	} else if err := writeFile(filepath.Join(out, "ids_per_second.png"), png); err != nil {
		return err
	}
	fmt.Println()
	fmt.Print(tables)
	fmt.Printf("\nwrote %s/{latest.txt,latest.json,tables.md,ids_per_second.png}\n", out)
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	return nil
}

// rerender rewrites tables.md and the PNG from latest.json.
func rerender(dir, out string) error {
	if !filepath.IsAbs(out) {
		out = filepath.Join(dir, out)
	}
	js, err := os.ReadFile(filepath.Join(out, "latest.json"))
	if err != nil {
		return err
	}
	rep := &Report{}
	if err := json.Unmarshal(js, rep); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(out, "tables.md"), []byte(markdown(rep))); err != nil {
		return err
	}
	png, err := plotIDs(rep)
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(out, "ids_per_second.png"), png)
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
func goTest(dir, rel, pattern, benchtime string) *Run {
	args := []string{"test", "-run", "^$", "-bench", pattern, "-benchtime", benchtime, "-count", "1", "."}
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

// parse reads the benchmark lines of go test output.
func parse(out []byte) []Result {
	var res []Result
	pkg := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		r := Result{Package: pkg, Name: f[0], Iterations: n, Metrics: map[string]float64{}}
		if m := procsSuffix.FindStringSubmatch(r.Name); m != nil {
			r.Procs, _ = strconv.Atoi(m[1])
			r.Name = strings.TrimSuffix(r.Name, m[0])
		}
		ok := true
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				ok = false
				break
			}
			r.Metrics[f[i+1]] = v
		}
		if !ok {
			continue
		}
		r.NsPerOp = r.Metrics["ns/op"]
		r.IDsPerSec = r.Metrics["ids/s"]
		if v, ok := r.Metrics["B/op"]; ok {
			r.BytesPerOp = &v
		}
		if v, ok := r.Metrics["allocs/op"]; ok {
			r.AllocsPerOp = &v
		}
		res = append(res, r)
	}
	return res
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
