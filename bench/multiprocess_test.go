package bench

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/snapid/snapid"
)

// Multi-process workloads: several processes draw ids from ONE counter
// file at once, each with its own Generator, as separate programs on one
// host would.
//
// The children are this test binary run again with workerEnv set (see
// TestMain). A child opens the Generator, allocates room for its ids,
// prints "ready", waits for "go" on stdin, draws its count of ids with
// UniqueID in one goroutine, keeping the strings, and only then prints
// "done <start> <end> <flushes> <reserved>" (wall-clock UnixNano, and the
// counter updates of the draw and the numbers they reserved, from
// Generator.Stats) and writes the numbers, as
// little-endian uint64 in the order drawn, to its output file. Process
// start-up, Open and output are outside the measured span, which runs from
// the earliest start to the latest end over all children.

const (
	workerEnv = "SNAPID_BENCH_WORKER" // "1" in a child
	envPath   = "SNAPID_BENCH_COUNTER"
	envMode   = "SNAPID_BENCH_MODE"
	envCount  = "SNAPID_BENCH_COUNT"
	envOut    = "SNAPID_BENCH_OUT"
	envPlace  = "SNAPID_BENCH_RECORDS" // the round's place of records of names
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		os.Exit(workerMain())
	}
	os.Exit(m.Run())
}

// A mpMode is one multi-process workload.
type mpMode struct {
	name       string
	benchCount int // ids per child in BenchmarkMultiProcess
	testCount  int // ids per child in TestMultiProcess
	dense      bool
}

var mpModes = []mpMode{
	{name: "strict-sync=on", benchCount: 2_000, testCount: 200, dense: true},
	{name: "strict-sync=off", benchCount: 50_000, testCount: 5_000, dense: true},
	{name: "block=65536", benchCount: 2_000_000, testCount: 150_000},
}

// mpProcs are the process counts of BenchmarkMultiProcess;
// TestMultiProcess uses the last.
var mpProcs = []int{1, 2, 4}

func modeConfig(mode string) (snapid.Config, error) {
	switch mode {
	case "strict-sync=on":
		return snapid.Config{}, nil
	case "strict-sync=off":
		return snapid.Config{NoSync: true}, nil
	case "block=65536":
		return snapid.Config{Block: &snapid.Block{Size: blockSize}}, nil
	}
	return snapid.Config{}, fmt.Errorf("unknown mode %q", mode)
}

// workerMain is a child's body; it returns the exit status.
func workerMain() int {
	if err := worker(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return 0
}

func worker() error {
	cfg, err := modeConfig(os.Getenv(envMode))
	if err != nil {
		return err
	}
	count, err := strconv.Atoi(os.Getenv(envCount))
	if err != nil || count < 1 {
		return fmt.Errorf("bad %s %q", envCount, os.Getenv(envCount))
	}
	cfg.BindingDir = os.Getenv(envPlace)
	g, err := snapid.Open(os.Getenv(envPath), nodeName, cfg)
	if err != nil {
		return err
	}
	defer g.Close()
	ids := make([]string, count)
	before := g.Stats()
	fmt.Println("ready")
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil || line != "go\n" {
		return fmt.Errorf("waiting for go: %q, %v", line, err)
	}
	start := time.Now()
	for i := range ids {
		if ids[i], err = g.UniqueID(); err != nil {
			return err
		}
	}
	end := time.Now()
	after := g.Stats()
	if err := g.Close(); err != nil {
		return err
	}
	f, err := os.Create(os.Getenv(envOut))
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<16)
	var buf [8]byte
	for _, id := range ids {
		p, err := snapid.ParseID(id)
		if err != nil {
			return err
		}
		if p.Name != nodeName {
			return fmt.Errorf("id %q: name %q, want %q", id, p.Name, nodeName)
		}
		binary.LittleEndian.PutUint64(buf[:], p.Number)
		w.Write(buf[:])
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Printf("done %d %d %d %d\n", start.UnixNano(), end.UnixNano(),
		after.CounterUpdates-before.CounterUpdates, after.NumbersReserved-before.NumbersReserved)
	return nil
}

type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr bytes.Buffer
	out    string
}

func (c *child) line() (string, error) {
	s, err := c.stdout.ReadString('\n')
	if err != nil {
		c.cmd.Wait()
		return "", fmt.Errorf("child: %v; stderr: %s", err, strings.TrimSpace(c.stderr.String()))
	}
	return strings.TrimSuffix(s, "\n"), nil
}

// roundResult is what one round of children did.
type roundResult struct {
	numbers [][]uint64    // every child's numbers, in the order drawn
	span    time.Duration // from the earliest start to the latest end
	// Counter updates of all children while drawing, and the numbers they
	// reserved.
	flushes, reserved uint64
}

// round runs procs children drawing count ids each from one fresh counter
// file in dir.
func round(dir, mode string, procs, count int) (rr roundResult, err error) {
	exe, err := os.Executable()
	if err != nil {
		return rr, err
	}
	counter := filepath.Join(dir, "counter.u64")
	os.Remove(counter)
	// Each round is a host of its own, with a fresh counter and its own
	// records of names (the last round's record names a counter removed).
	place := filepath.Join(dir, "records")
	if err := os.RemoveAll(place); err != nil {
		return rr, err
	}
	// The counter exists before the children start: they measure drawing,
	// not creating the file.
	g, err := snapid.Open(counter, nodeName, snapid.Config{BindingDir: place})
	if err != nil {
		return rr, err
	}
	if err := g.Close(); err != nil {
		return rr, err
	}
	children := make([]*child, procs)
	defer func() {
		for _, c := range children {
			if c != nil && c.cmd.ProcessState == nil {
				c.cmd.Process.Kill()
				c.cmd.Wait()
			}
		}
	}()
	for i := range children {
		c := &child{out: filepath.Join(dir, fmt.Sprintf("numbers.%d", i))}
		c.cmd = exec.Command(exe)
		c.cmd.Env = append(os.Environ(), workerEnv+"=1", envPath+"="+counter, envMode+"="+mode,
			envCount+"="+strconv.Itoa(count), envOut+"="+c.out, envPlace+"="+place)
		c.cmd.Stderr = &c.stderr
		if c.stdin, err = c.cmd.StdinPipe(); err != nil {
			return rr, err
		}
		stdout, err := c.cmd.StdoutPipe()
		if err != nil {
			return rr, err
		}
		c.stdout = bufio.NewReader(stdout)
		if err := c.cmd.Start(); err != nil {
			return rr, err
		}
		children[i] = c
	}
	for _, c := range children {
		if s, err := c.line(); err != nil || s != "ready" {
			return rr, fmt.Errorf("waiting for ready: %q, %v", s, err)
		}
	}
	for _, c := range children {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			return rr, err
		}
	}
	var first, last int64
	for i, c := range children {
		s, err := c.line()
		if err != nil {
			return rr, err
		}
		var start, end int64
		var flushes, reserved uint64
		if _, err := fmt.Sscanf(s, "done %d %d %d %d", &start, &end, &flushes, &reserved); err != nil {
			return rr, fmt.Errorf("child said %q: %v", s, err)
		}
		if i == 0 || start < first {
			first = start
		}
		if i == 0 || end > last {
			last = end
		}
		rr.flushes += flushes
		rr.reserved += reserved
		c.stdin.Close()
		if err := c.cmd.Wait(); err != nil {
			return rr, fmt.Errorf("child: %v; stderr: %s", err, strings.TrimSpace(c.stderr.String()))
		}
	}
	numbers := make([][]uint64, procs)
	for i, c := range children {
		b, err := os.ReadFile(c.out)
		if err != nil {
			return rr, err
		}
		os.Remove(c.out)
		if len(b) != 8*count {
			return rr, fmt.Errorf("child %d wrote %d numbers, want %d", i, len(b)/8, count)
		}
		ns := make([]uint64, count)
		for j := range ns {
			ns[j] = binary.LittleEndian.Uint64(b[8*j:])
		}
		numbers[i] = ns
	}
	rr.numbers, rr.span = numbers, time.Duration(last-first)
	return rr, nil
}

// checkNumbers checks that every child's numbers increase, that no number
// was issued twice, and, if dense, that together they are exactly 1..n.
func checkNumbers(numbers [][]uint64, dense bool) error {
	var all []uint64
	for i, ns := range numbers {
		for j := 1; j < len(ns); j++ {
			if ns[j] <= ns[j-1] {
				return fmt.Errorf("process %d: number %d after %d", i, ns[j], ns[j-1])
			}
		}
		all = append(all, ns...)
	}
	slices.Sort(all)
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			return fmt.Errorf("number %d issued twice", all[i])
		}
	}
	if len(all) > 0 && all[0] == 0 {
		return errors.New("number 0 issued")
	}
	if dense && len(all) > 0 && all[len(all)-1] != uint64(len(all)) {
		return fmt.Errorf("%d numbers up to %d: not exactly 1..%d", len(all), all[len(all)-1], len(all))
	}
	return nil
}

// TestMultiProcess checks that processes sharing one counter file never
// repeat a number, with small counts.
func TestMultiProcess(t *testing.T) {
	for _, m := range mpModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			procs := mpProcs[len(mpProcs)-1]
			rr, err := round(t.TempDir(), m.name, procs, m.testCount)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkNumbers(rr.numbers, m.dense); err != nil {
				t.Fatal(err)
			}
			// The children's counter updates reserved at least what they
			// drew (block mode reserves whole blocks).
			if n := uint64(procs * m.testCount); rr.flushes == 0 || rr.reserved < n || m.dense && rr.reserved != n {
				t.Fatalf("%d updates reserved %d numbers for %d ids", rr.flushes, rr.reserved, n)
			}
		})
	}
}

// BenchmarkMultiProcess/<mode>/p<N> reports the aggregate ids/s of N
// processes drawing from one counter file, and their ids per counter
// update. One iteration is one round of all the processes; ns/op is
// overridden with the span per id (all processes together), so it reads
// like the other benchmarks' ns/op.
func BenchmarkMultiProcess(b *testing.B) {
	for _, m := range mpModes {
		for _, procs := range mpProcs {
			b.Run(fmt.Sprintf("%s/p%d", m.name, procs), func(b *testing.B) {
				dir := b.TempDir()
				var ids int
				var span time.Duration
				var flushes, reserved uint64
				for i := 0; i < b.N; i++ {
					rr, err := round(dir, m.name, procs, m.benchCount)
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					if err := checkNumbers(rr.numbers, m.dense); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					ids += procs * m.benchCount
					span += rr.span
					flushes += rr.flushes
					reserved += rr.reserved
				}
				b.ReportMetric(float64(ids)/span.Seconds(), "ids/s")
				b.ReportMetric(float64(span.Nanoseconds())/float64(ids), "ns/op")
				b.ReportMetric(float64(m.benchCount), "ids/process")
				if flushes > 0 {
					b.ReportMetric(float64(reserved)/float64(flushes), "ids/update")
				}
			})
		}
	}
}
