package sim

import (
	"fmt"
	"os"
	"runtime"
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

// Run runs h in a new directory under base and checks it.
func Run(h History, base string) (Result, error) {
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
	goroutines, fds := runtime.NumGoroutine(), openFDs()
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
	// 7: after every Close, no goroutine or descriptor is left.
	deadline := time.Now().Add(2 * time.Second)
	for {
		g, f := runtime.NumGoroutine(), openFDs()
		if g <= goroutines && f <= fds {
			break
		}
		if time.Now().After(deadline) {
			res.Violations = append(res.Violations, fmt.Sprintf("after every process closed: %d goroutines (%d before), %d descriptors (%d before)", g, goroutines, f, fds))
			break
		}
		time.Sleep(time.Millisecond)
	}
	return res, nil
}

// openFDs counts this process's open descriptors.
func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(ents)
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
