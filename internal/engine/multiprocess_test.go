package engine

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/big"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Multi-process tests re-run this test binary as children, selected by
// environment variables (as Go's cmd/go/internal/lockedfile tests do): the
// parent runs "-test.run=^TestX$" with mpEnvRole set, and TestX, seeing the
// variable, acts as the child instead of the parent.
const (
	mpEnvRole       = "SNAPID_TEST_MP_ROLE" // "draw": a fixed count; "crash": until killed
	mpEnvPath       = "SNAPID_TEST_MP_PATH"
	mpEnvCount      = "SNAPID_TEST_MP_COUNT" // numbers per goroutine ("draw")
	mpEnvGoroutines = "SNAPID_TEST_MP_GOROUTINES"
	mpEnvBlock      = "SNAPID_TEST_MP_BLOCK"  // block size, 0: strict mode
	mpEnvSync       = "SNAPID_TEST_MP_SYNC"   // "true" or "false"
	mpEnvShards     = "SNAPID_TEST_MP_SHARDS" // "true": WithCPUShards in block mode
	mpEnvForm       = "SNAPID_TEST_MP_FORM"   // "", "decimal:<node>" or "striped:<node>:<stride>": print ids ("I <goroutine> <id>")
	mpEnvName       = "SNAPID_TEST_MP_NAME"   // the node name ("": ctName)
)

// mpChildConfig describes what a child does.
type mpChildConfig struct {
	role       string
	goroutines int
	count      int
	block      uint64
	sync       bool
	shards     bool
	form       string // see mpEnvForm
	name       string
}

// mpChild runs the child's work when this process is a child, and reports
// whether it was one. The child prints "READY" once the counter is open,
// then "N <goroutine> <number>" for each number as soon as it has it, one
// write per line, so that a parent that kills it has seen every number it
// printed completely.
func mpChild(t *testing.T) bool {
	role := os.Getenv(mpEnvRole)
	if role == "" {
		return false
	}
	atoi := func(k string) int {
		n, err := strconv.Atoi(os.Getenv(k))
		require.NoError(t, err, k)
		return n
	}
	cfg := mpChildConfig{
		role:       role,
		goroutines: atoi(mpEnvGoroutines),
		block:      uint64(atoi(mpEnvBlock)),
		sync:       os.Getenv(mpEnvSync) != "false",
		shards:     os.Getenv(mpEnvShards) == "true",
	}
	if role == "draw" {
		cfg.count = atoi(mpEnvCount)
	}
	opts := []Option{WithSync(cfg.sync)}
	if cfg.block > 0 {
		opts = append(opts, WithBlock(cfg.block), WithCPUShards(cfg.shards))
	}
	cfg.form = os.Getenv(mpEnvForm)
	if f := strings.Split(cfg.form, ":"); cfg.form != "" {
		node, err := strconv.ParseUint(f[1], 10, 64)
		require.NoError(t, err)
		opts = append(opts, WithNodeNumber(node))
		if f[0] == "decimal" {
			opts = append(opts, WithFormat(FormatDecimal))
		} else {
			stride, err := strconv.ParseUint(f[2], 10, 64)
			require.NoError(t, err)
			opts = append(opts, WithFormat(FormatStriped), WithStride(stride))
		}
	}
	name := ctName
	if n := os.Getenv(mpEnvName); n != "" {
		name = n
	}
	g, err := Open(os.Getenv(mpEnvPath), name, opts...)
	require.NoError(t, err)
	defer g.Close()
	_, err = os.Stdout.WriteString("READY\n")
	require.NoError(t, err)

	// A child that outlives its parent stops: writing to the closed pipe
	// kills it with SIGPIPE, and in any case it stops after a minute.
	deadline := time.Now().Add(time.Minute)
	errs := make([]error, cfg.goroutines)
	var wg sync.WaitGroup
	for i := range cfg.goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for j := 0; cfg.role == "crash" || j < cfg.count; j++ {
				if cfg.role == "crash" && j%1024 == 0 && time.Now().After(deadline) {
					return
				}
				if cfg.form != "" {
					buf = fmt.Appendf(buf[:0], "I %d ", i)
					var err error
					if buf, err = g.AppendUniqueID(buf); err != nil {
						errs[i] = err
						return
					}
					buf = append(buf, '\n')
					if _, err := os.Stdout.Write(buf); err != nil {
						errs[i] = err
						return
					}
					continue
				}
				n, err := g.Next()
				if err != nil {
					errs[i] = err
					return
				}
				buf = fmt.Appendf(buf[:0], "N %d %d\n", i, n)
				if _, err := os.Stdout.Write(buf); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.NoError(t, g.Close())
	return true
}

// mpNum is a number a child printed, with the goroutine that got it.
type mpNum struct {
	goroutine int
	n         uint64
}

// mpProc is a running child.
type mpProc struct {
	cmd     *exec.Cmd
	stderr  bytes.Buffer
	ready   chan struct{} // closed at "READY"
	done    chan struct{} // closed when stdout is at EOF
	nums    []mpNum       // complete lines only; read after done
	ids     []string      // ids of a child with a form ("I" lines)
	readErr error
}

// mpStart starts a child running test testName (the caller) with cfg.
func mpStart(t *testing.T, path string, cfg mpChildConfig) *mpProc {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self, "-test.run="+ctRunPattern(strings.Split(t.Name(), "/")[0]), "-test.count=1", "-test.timeout=120s")
	cmd.Env = append(ctChildEnv(),
		mpEnvRole+"="+cfg.role,
		mpEnvPath+"="+path,
		mpEnvCount+"="+strconv.Itoa(cfg.count),
		mpEnvGoroutines+"="+strconv.Itoa(cfg.goroutines),
		mpEnvBlock+"="+strconv.FormatUint(cfg.block, 10),
		mpEnvSync+"="+strconv.FormatBool(cfg.sync),
		mpEnvShards+"="+strconv.FormatBool(cfg.shards),
		mpEnvForm+"="+cfg.form,
		mpEnvName+"="+cfg.name,
	)
	p := &mpProc{cmd: cmd, ready: make(chan struct{}), done: make(chan struct{})}
	cmd.Stderr = &p.stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	go p.read(out)
	return p
}

func (p *mpProc) read(out io.Reader) {
	defer close(p.done)
	r := bufio.NewReader(out)
	readyClosed := false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			// A last line without its newline was cut by a kill: the
			// child wrote each line at once, so this cannot happen, but
			// a partial line is never counted.
			if err != io.EOF {
				p.readErr = err
			}
			break
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "READY":
			if !readyClosed {
				close(p.ready)
				readyClosed = true
			}
		case strings.HasPrefix(line, "I "):
			f := strings.Fields(line)
			if len(f) != 3 {
				p.readErr = fmt.Errorf("bad line %q", line)
				continue
			}
			p.ids = append(p.ids, f[2])
		case strings.HasPrefix(line, "N "):
			f := strings.Fields(line)
			if len(f) != 3 {
				p.readErr = fmt.Errorf("bad line %q", line)
				continue
			}
			gi, err1 := strconv.Atoi(f[1])
			n, err2 := strconv.ParseUint(f[2], 10, 64)
			if err1 != nil || err2 != nil {
				p.readErr = fmt.Errorf("bad line %q", line)
				continue
			}
			p.nums = append(p.nums, mpNum{gi, n})
		}
	}
	io.Copy(io.Discard, out)
}

// waitReady waits until the child has opened the counter; it fails if the
// child ended first.
func (p *mpProc) waitReady(t *testing.T) {
	t.Helper()
	select {
	case <-p.ready:
	case <-p.done:
		p.cmd.Wait()
		t.Fatalf("child ended before it was ready: %s", p.stderr.String())
	case <-time.After(60 * time.Second):
		p.cmd.Process.Kill()
		t.Fatalf("child not ready after 60 s")
	}
}

// wait waits for a child that ends by itself and requires success.
func (p *mpProc) wait(t *testing.T) []mpNum {
	t.Helper()
	<-p.done
	err := p.cmd.Wait()
	require.NoError(t, err, "child failed: %s", p.stderr.String())
	require.NoError(t, p.readErr)
	return p.nums
}

// mpPerGoroutine splits a child's numbers by goroutine.
func mpPerGoroutine(nums []mpNum) map[int][]uint64 {
	m := map[int][]uint64{}
	for _, x := range nums {
		m[x.goroutine] = append(m[x.goroutine], x.n)
	}
	return m
}

func mpNumbers(nums []mpNum) []uint64 {
	out := make([]uint64, len(nums))
	for i, x := range nums {
		out[i] = x.n
	}
	return out
}

// TestMultiProcessStrict: 4 children and goroutines of this process draw
// from one counter file at once; the numbers are exactly 1..total, each
// goroutine's numbers increase, and the file holds total.
func TestMultiProcessStrict(t *testing.T) {
	t.Parallel()
	skipShort(t)
	if mpChild(t) {
		return
	}
	const children, goroutines, count = 4, 3, 800
	const parentGoroutines, parentCount = 4, 600
	const total = children*goroutines*count + parentGoroutines*parentCount
	for _, syncOn := range []bool{true, false} {
		t.Run(fmt.Sprintf("sync=%v", syncOn), func(t *testing.T) {
			_, path := ctPath(t)
			procs := make([]*mpProc, children)
			for i := range procs {
				procs[i] = mpStart(t, path, mpChildConfig{role: "draw", goroutines: goroutines, count: count, sync: syncOn})
			}
			g := ctOpen(t, path, WithSync(syncOn))
			mine := ctDrawAll(t, parentGoroutines, parentCount, g.Next)
			all := slices.Clone(mine)
			for i, p := range procs {
				nums := p.wait(t)
				require.Len(t, nums, goroutines*count, "child %d", i)
				for gi, l := range mpPerGoroutine(nums) {
					require.True(t, slices.IsSorted(l), "child %d goroutine %d: not increasing", i, gi)
				}
				all = append(all, mpNumbers(nums))
			}
			for _, l := range mine {
				require.True(t, slices.IsSorted(l))
			}
			ctRequireDense(t, total, all...)
			require.NoError(t, g.Close())
			assert.Equal(t, uint64(total), ctValue(t, path))
		})
	}
}

// TestMultiProcessMixedBlock: strict and block-mode processes on one file.
func TestMultiProcessMixedBlock(t *testing.T) {
	t.Parallel()
	skipShort(t)
	if mpChild(t) {
		return
	}
	_, path := ctPath(t)
	configs := []mpChildConfig{
		{role: "draw", goroutines: 3, count: 700, block: 100, sync: true},
		{role: "draw", goroutines: 3, count: 700, block: 100, sync: false},
		{role: "draw", goroutines: 2, count: 700, sync: true},
		{role: "draw", goroutines: 2, count: 700, sync: false},
		{role: "draw", goroutines: 1, count: 500, block: 7, sync: true},
	}
	procs := make([]*mpProc, len(configs))
	for i, c := range configs {
		procs[i] = mpStart(t, path, c)
	}
	g := ctOpen(t, path, WithBlock(100))
	all := ctDrawAll(t, 4, 500, g.Next)
	for i, p := range procs {
		nums := p.wait(t)
		require.Len(t, nums, configs[i].goroutines*configs[i].count, "child %d", i)
		for gi, l := range mpPerGoroutine(nums) {
			require.True(t, slices.IsSorted(l), "child %d goroutine %d: not increasing", i, gi)
		}
		all = append(all, mpNumbers(nums))
	}
	max, _ := ctRequireDistinct(t, all...)
	require.NoError(t, g.Close())
	assert.GreaterOrEqual(t, ctValue(t, path), max, "the file covers every number issued")
}

// mpBuildSnapctl builds cmd/snapctl into dir.
func mpBuildSnapctl(t *testing.T, dir string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go command builds snapctl for this test")
	bin := filepath.Join(dir, "snapctl")
	cmd := exec.Command(goTool, "build", "-o", bin, "github.com/snapid/snapid/cmd/snapctl")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/snapctl:\n%s", out)
	return bin
}

// TestMultiProcessWithSnapctl: two goroutines run the snapctl binary over
// and over while library children draw from the same file.
func TestMultiProcessWithSnapctl(t *testing.T) {
	skipShort(t)
	if mpChild(t) {
		return
	}
	bin := mpBuildSnapctl(t, t.TempDir())
	_, path := ctPath(t)
	const children, goroutines, count = 3, 2, 600
	const runners, runs, perRun = 2, 12, 25
	procs := make([]*mpProc, children)
	for i := range procs {
		procs[i] = mpStart(t, path, mpChildConfig{role: "draw", goroutines: goroutines, count: count, sync: i != 1})
	}
	lists := make([][]uint64, runners)
	errs := make([]error, runners)
	var wg sync.WaitGroup
	for r := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range runs {
				cmd := exec.Command(bin, "next", "-n", strconv.Itoa(perRun), "--counter", path, "--name", ctName)
				// The library children's host: the test's binding directory.
				cmd.Env = []string{"HOME=/nonexistent", "PATH=/usr/bin:/bin", "SNAPID_BINDING_DIR=" + ExportTestBindingDir(path)}
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				if err != nil {
					errs[r] = fmt.Errorf("snapctl: %v: %s", err, stderr.String())
					return
				}
				// Without a registry, snapctl says once that the name is
				// checked on this host only; anything else is a warning.
				var other []string
				for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
					if line != "" && !strings.HasPrefix(line, "snapctl: notice: without a registry,") {
						other = append(other, line)
					}
				}
				if len(other) > 0 {
					errs[r] = fmt.Errorf("snapctl wrote to stderr: %s", strings.Join(other, "\n"))
					return
				}
				lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
				if len(lines) != perRun {
					errs[r] = fmt.Errorf("snapctl printed %d lines: %q", len(lines), out)
					return
				}
				var prev uint64
				for _, l := range lines {
					id, err := ParseID(l)
					if err != nil || id.Name != ctName {
						errs[r] = fmt.Errorf("snapctl printed %q: %v", l, err)
						return
					}
					if prev != 0 && id.Number != prev+1 {
						errs[r] = fmt.Errorf("snapctl next -n %d printed non-consecutive ids: %q", perRun, out)
						return
					}
					prev = id.Number
					lists[r] = append(lists[r], id.Number)
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	all := lists
	for i, p := range procs {
		nums := p.wait(t)
		require.Len(t, nums, goroutines*count, "child %d", i)
		all = append(all, mpNumbers(nums))
	}
	const total = children*goroutines*count + runners*runs*perRun
	ctRequireDense(t, total, all...)
	assert.Equal(t, uint64(total), ctValue(t, path))
}

// TestCrashKill9: rounds of 3 children drawing continuously are killed with
// SIGKILL at random moments. Across all rounds no number is ever printed
// twice, the file stays exactly 8 bytes, and it covers every number
// printed.
func TestCrashKill9(t *testing.T) {
	t.Parallel()
	skipShort(t)
	if mpChild(t) {
		return
	}
	const minRounds, maxRounds, budget = 20, 40, 12 * time.Second
	dir, path := ctPath(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 42))
	seen := map[uint64]int{} // number -> round
	var max uint64
	start := time.Now()
	rounds := 0
	for ; rounds < maxRounds && (rounds < minRounds || time.Since(start) < budget); rounds++ {
		syncOn := rounds%2 == 0
		var block uint64
		switch rounds % 3 {
		case 1:
			block = 10
		case 2:
			block = 100
		}
		procs := make([]*mpProc, 3)
		for i := range procs {
			b := block
			if i == 2 {
				b = 0 // one strict child in every round
			}
			// The middle child of block rounds serves from per-CPU runs.
			procs[i] = mpStart(t, path, mpChildConfig{role: "crash", goroutines: 1 + i, block: b, sync: syncOn, shards: i == 1})
		}
		for _, p := range procs {
			p.waitReady(t)
		}
		var wg sync.WaitGroup
		for _, p := range procs {
			delay := time.Duration(5+rng.IntN(96)) * time.Millisecond
			wg.Add(1)
			time.AfterFunc(delay, func() {
				defer wg.Done()
				p.cmd.Process.Signal(syscall.SIGKILL)
			})
		}
		wg.Wait()
		for i, p := range procs {
			<-p.done
			err := p.cmd.Wait()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				ws := ee.Sys().(syscall.WaitStatus)
				require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL,
					"round %d child %d ended by itself: %v\n%s", rounds, i, err, p.stderr.String())
			} else {
				require.Fail(t, "child not killed", "round %d child %d: %v\n%s", rounds, i, err, p.stderr.String())
			}
			require.NoError(t, p.readErr)
			for _, x := range p.nums {
				if r, dup := seen[x.n]; dup {
					require.Failf(t, "number issued twice", "%d: in round %d and again in round %d (sync=%v block=%d)",
						x.n, r, rounds, syncOn, block)
				}
				seen[x.n] = rounds
				if x.n > max {
					max = x.n
				}
			}
		}
		info, err := os.Stat(path)
		require.NoError(t, err)
		require.Equal(t, int64(CounterSize), info.Size(), "round %d: the file is not 8 bytes", rounds)
		require.GreaterOrEqual(t, ctValue(t, path), max, "round %d: a printed number is above the file's value", rounds)
	}
	require.GreaterOrEqual(t, rounds, minRounds)
	require.NotEmpty(t, seen, "the children issued numbers before they were killed")
	t.Logf("%d rounds, %d numbers, last issued %d", rounds, len(seen), ctValue(t, path))

	// The file is usable after all the kills and continues above them.
	testfs.RequireNoTemp(t, dir)
	g := ctOpen(t, path)
	n, err := g.Next()
	require.NoError(t, err)
	assert.Greater(t, n, max)
}

// TestCrashKill9NumericForms: two hosts (counters of their own, node
// numbers 1 and 2), one handing out decimal ids and one striped ids, each
// with children killed with SIGKILL at random moments, strict and block
// mode: no id is printed twice, and no two are equal as exact decimals.
func TestCrashKill9NumericForms(t *testing.T) {
	t.Parallel()
	skipShort(t)
	if mpChild(t) {
		return
	}
	dir, _ := ctPath(t)
	hosts := []struct{ path, name, form string }{
		{filepath.Join(dir, "a.u64"), "host_a", "decimal:1"},
		{filepath.Join(dir, "b.u64"), "host_b", "striped:2:10"},
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 43))
	seen := map[string]string{} // exact decimal -> id
	for round := range 12 {
		var procs []*mpProc
		for _, h := range hosts {
			for i := range 2 {
				block := uint64(0)
				if i == 1 && round%2 == 1 {
					block = 10
				}
				procs = append(procs, mpStart(t, h.path, mpChildConfig{role: "crash", goroutines: 2, block: block, sync: round%3 != 2, form: h.form, name: h.name}))
			}
		}
		for _, p := range procs {
			p.waitReady(t)
		}
		var wg sync.WaitGroup
		for _, p := range procs {
			wg.Add(1)
			time.AfterFunc(time.Duration(5+rng.IntN(60))*time.Millisecond, func() {
				defer wg.Done()
				p.cmd.Process.Signal(syscall.SIGKILL)
			})
		}
		wg.Wait()
		for _, p := range procs {
			<-p.done
			_ = p.cmd.Wait()
			require.NoError(t, p.readErr)
			for _, id := range p.ids {
				r, ok := new(big.Rat).SetString(id)
				require.True(t, ok, "%q is not a number", id)
				if prev, dup := seen[r.RatString()]; dup {
					require.Failf(t, "ids equal as numbers", "%q and %q (round %d)", prev, id, round)
				}
				seen[r.RatString()] = id
			}
		}
	}
	require.NotEmpty(t, seen)
	t.Logf("%d ids from two hosts, none equal as numbers", len(seen))
}
