package sim

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Result is what running one history showed.
type Result struct {
	Ops        int      // operations that did something (a call handing out n numbers counts n; see world.did)
	Faults     int      // faults that fired (disk, registry, power cuts, crashes)
	Violations []string // guarantees broken, in the order found
	// Reached counts events a history is meant to reach, by name (see
	// world.reached), so that a test can tell the simulator exercises
	// what it claims to.
	Reached map[string]int
	// Hung: a step made no progress within stepLimit (the first
	// violation says which); its goroutine is left running.
	Hung bool
}

var warmPoller sync.Once

// simLabel is the profiler label every goroutine of a history carries
// (the library's goroutines inherit it from the calls that start them),
// with the history's directory as its value: so that histories may run
// side by side and each still counts what it left behind.
const simLabel = "snapid-sim"

// Run runs h in a new directory under base and checks it. Several Runs
// may run at once (each has its own directory, disks, clocks and
// registry).
func Run(h History, base string) (res Result, err error) {
	dir, err := os.MkdirTemp(base, fmt.Sprintf("sim-%d-", h.Seed))
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	warmPoller.Do(func() {
		// The runtime makes its poller's descriptors at the first file
		// opened non-blocking; counted in a history, they would read as
		// descriptors left behind.
		if f, err := os.OpenFile(os.DevNull, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	pprof.Do(context.Background(), pprof.Labels(simLabel, dir), func(context.Context) { res, err = run(h, dir) })
	return res, err
}

func run(h History, dir string) (Result, error) {
	w, err := newWorld(h, dir)
	if err != nil {
		return Result{}, err
	}
	if hung := w.run(); hung != "" {
		// The step's goroutine still runs: nothing of w is read, and
		// nothing is closed (that could wait for it).
		return Result{Violations: []string{hung}, Reached: map[string]int{}, Hung: true}, nil
	}
	res := Result{Ops: w.ops, Violations: w.check.violations, Reached: w.reached}
	res.Faults = w.faults + w.reg.fault.count() + w.reg0.faults()
	for k, n := range w.reg0.reached() {
		res.Reached[k] += n
	}
	for _, ho := range w.hosts {
		res.Faults += ho.disk.fault.count()
		ho.disk.mu.Lock()
		if ho.disk.lies > 0 {
			res.Reached["fsyncs reporting success after a failed one, nothing written"] += ho.disk.lies
		}
		ho.disk.mu.Unlock()
	}
	// 7: after every Close, no goroutine of the history (but this one)
	// and no descriptor of a file under its directory is left.
	deadline := time.Now().Add(2 * time.Second)
	for {
		g, f := goroutinesOf(dir)-1, fdsUnder(dir)
		if g <= 0 && len(f) == 0 {
			break
		}
		if time.Now().After(deadline) {
			res.Violations = append(res.Violations, fmt.Sprintf("after every process closed: %d goroutines and %d descriptors (%q) of the history left", g, len(f), f))
			break
		}
		time.Sleep(time.Millisecond)
	}
	return res, nil
}

// goroutinesOf counts the goroutines labelled with the history of dir.
func goroutinesOf(dir string) int {
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		return 0
	}
	// Records: "N @ pc…", then, for labelled goroutines, "# labels: {…}".
	want := strconv.Quote(simLabel) + ":" + strconv.Quote(dir)
	n, count := 0, 0
	for _, line := range strings.Split(b.String(), "\n") {
		if i := strings.Index(line, " @ "); i > 0 && !strings.HasPrefix(line, "#") {
			count, _ = strconv.Atoi(line[:i])
			continue
		}
		if strings.HasPrefix(line, "# labels: ") && strings.Contains(line, want) {
			n += count
		}
	}
	return n
}

// fdsUnder lists this process's descriptors open on files under dir.
func fdsUnder(dir string) []string {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if t, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && (t == dir || strings.HasPrefix(t, dir+"/")) {
			out = append(out, t)
		}
	}
	return out
}

// Shrink returns a shorter history of h that still breaks a guarantee
// (steps removed in chunks, then one at a time, while it still fails),
// and the result of running it. fails runs a history and reports whether
// it still fails; it is called at most budget times.
func Shrink(h History, budget int, fails func(History) bool) History {
	cur := h
	for chunk := len(cur.Steps) / 2; chunk >= 1 && budget > 0; chunk /= 2 {
		for i := 0; i+chunk <= len(cur.Steps) && budget > 0; {
			try := cur
			try.Steps = append(append([]Step{}, cur.Steps[:i]...), cur.Steps[i+chunk:]...)
			budget--
			if fails(try) {
				cur = try
				continue
			}
			i += chunk
		}
	}
	return cur
}
