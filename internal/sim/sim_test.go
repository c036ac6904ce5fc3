package sim

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Environment:
//
//	SNAPID_SIM_SEED=N        run that one history (and its shrunk form, if it fails), printing it
//	SNAPID_SIM_HISTORIES=N   how many histories (default 10000; 2000 with the race detector; 300 with -short)
//	SNAPID_SIM_DURATION=D    run histories for D instead (a soak: make soak)
//	SNAPID_SIM_STEPS=N       steps per history (default 100)
//	SNAPID_SIM_FIRST=N       the first seed (default 1; seeds are consecutive)
//	SNAPID_SIM_STEP_LIMIT=D  how long a step may run before it is reported as a hang (default 20s)
//	SNAPID_SIM_SERIAL=1      leave out the concurrent steps (Serial): one operation at a time, every replay the same
func envInt(t *testing.T, k string, def int) int {
	v := os.Getenv(k)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a number", k, v)
	}
	return n
}

// base is where the hosts' files go: tmpfs when there is one (the
// simulator makes a power cut itself; real syncs only cost time).
func base(t *testing.T) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "snapid-sim-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return t.TempDir()
}

// TestSimulation runs thousands of random histories (operations and
// faults from a seed) against the real library and checks every
// guarantee over each; a failure prints the seed, the shrunk history and
// the command that replays it.
func TestSimulation(t *testing.T) {
	dir := base(t)
	steps := envInt(t, "SNAPID_SIM_STEPS", 100)
	if v := os.Getenv("SNAPID_SIM_STEP_LIMIT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("SNAPID_SIM_STEP_LIMIT=%q: want a duration", v)
		}
		stepLimit = d
	}
	if s := os.Getenv("SNAPID_SIM_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SNAPID_SIM_SEED=%q: want a number", s)
		}
		replay(t, dir, generate(seed, steps))
		return
	}
	def := 10000
	switch {
	case testing.Short():
		def = 300
	case raceBuild:
		def = 500
	}
	histories := envInt(t, "SNAPID_SIM_HISTORIES", def)
	var until time.Time
	if d := os.Getenv("SNAPID_SIM_DURATION"); d != "" {
		dur, err := time.ParseDuration(d)
		if err != nil {
			t.Fatalf("SNAPID_SIM_DURATION=%q: %v", d, err)
		}
		until, histories = time.Now().Add(dur), int(^uint(0)>>1)
	} else if dl, ok := t.Deadline(); ok {
		// On a busy machine the histories take longer: the run stops
		// starting new ones in time to report (it says how many ran;
		// the events must still be reached, from 1,000 on).
		until = dl.Add(-time.Until(dl) / 5)
	}
	first := uint64(envInt(t, "SNAPID_SIM_FIRST", 1))
	var runs, ops, faults, violations int
	reached := map[string]int{} // histories that reached each event
	// Histories run side by side, one per core (each is a world of its
	// own); their results are taken in seed order, so the first
	// violation reported is the lowest seed's, as in a serial run.
	type done struct {
		h   History
		res Result
		err error
	}
	var stop atomic.Bool
	next := atomic.Int64{}
	// results[i] is history i's, made by whichever side gets to it first
	// (a run for a duration has no bound on i).
	var mu sync.Mutex
	results := map[int]chan done{}
	slot := func(i int) chan done {
		mu.Lock()
		defer mu.Unlock()
		c, ok := results[i]
		if !ok {
			c = make(chan done, 1)
			results[i] = c
		}
		return c
	}
	var running sync.WaitGroup
	for range workers() {
		running.Add(1)
		go func() {
			defer running.Done()
			for {
				// Every index a worker takes gets a result: a worker that
				// stops (the count reached, a violation, the time up)
				// reports its last one as not run, so the first not run
				// comes after every history that ran.
				i := int(next.Add(1) - 1)
				if i >= histories || stop.Load() || !until.IsZero() && time.Now().After(until) {
					slot(i) <- done{err: errSkipped}
					return
				}
				h := generate(first+uint64(i), steps)
				res, err := Run(h, dir)
				slot(i) <- done{h, res, err}
			}
		}()
	}
	for i := 0; ; i++ {
		d := <-slot(i)
		mu.Lock()
		delete(results, i)
		mu.Unlock()
		if errors.Is(d.err, errSkipped) {
			break
		}
		h, res, err := d.h, d.res, d.err
		if err != nil {
			stop.Store(true)
			t.Fatalf("seed %d: %v", h.Seed, err)
		}
		runs++
		ops += res.Ops
		faults += res.Faults
		for k, n := range res.Reached {
			if n > 0 {
				reached[k]++
			}
		}
		if len(res.Violations) > 0 {
			stop.Store(true)
			running.Wait() // the histories still running finish before the report
			violations += len(res.Violations)
			report(t, dir, h, res)
			break
		}
	}
	stop.Store(true)
	printReached(reached)
	if violations == 0 && runs >= 1000 {
		// A run that never reached an event did not test it.
		for _, k := range reachedEvents {
			if reached[k] == 0 {
				t.Errorf("%d histories never reached %s", runs, k)
			}
		}
	}
	fmt.Printf("sim: %d histories, %d operations, %d faults, %d violations\n", runs, ops, faults, violations)
}

// errSkipped: a history not run, because one before it failed or the
// run's time was up.
var errSkipped = errors.New("not run")

// workers is how many histories run at once: one per core
// (SNAPID_SIM_WORKERS changes it; 1 runs them one after another).
func workers() int {
	if v, err := strconv.Atoi(os.Getenv("SNAPID_SIM_WORKERS")); err == nil && v > 0 {
		return v
	}
	return runtime.GOMAXPROCS(0)
}

// reachedEvents are the events the reached line names, with the number
// of histories that reached each; a run of 1,000 histories or more fails
// if one of them was never reached.
var reachedEvents = []string{"cassandra", "applied-later", "stale-read",
	"released-reopened", "second-counter", "counter-renamed", "replaced-counter-refused", "rolled-back-refused", "stride-change", "stride-change-while-running", "group-member", "snapctl",
	"heartbeat-refresh", "heartbeat-handover", "taken-propagated", "clock-skew",
	"fault-inside-op", "cut-inside-op", "kill-inside-op", "lease-refill-cut", "takeover-while-running", "close-held", "heartbeat-removed-when-taken", "cancel-while-waiting", "restored-below-floor", "restored-one-below-floor", "replica-loss"}

// printReached prints "sim: reached: <event>=<histories> …".
func printReached(reached map[string]int) {
	var b strings.Builder
	b.WriteString("sim: reached:")
	for _, k := range reachedEvents {
		fmt.Fprintf(&b, " %s=%d", k, reached[k])
	}
	fmt.Println(b.String())
}

// report prints a failing history shrunk, and how to replay it.
func report(t *testing.T, dir string, h History, res Result) {
	t.Helper()
	// A try that hangs costs stepLimit and leaves a goroutine running:
	// a few of them at most.
	hangs := 0
	if res.Hung {
		hangs++
	}
	small := Shrink(h, 400, func(try History) bool {
		if hangs >= 4 {
			return false
		}
		r, err := Run(try, dir)
		if r.Hung {
			hangs++
		}
		return err == nil && len(r.Violations) > 0
	})
	sres, _ := Run(small, dir)
	note := ""
	if h.concurrent() {
		note = "\n(the history has concurrent steps, whose interleaving the scheduler decides: a replay may differ; SNAPID_SIM_SERIAL=1 leaves them out)"
	}
	t.Errorf("seed %d broke a guarantee:\n  %s\nshrunk to %d of %d steps:\n%s(violations of the shrunk history: %q)\nreplay: SNAPID_SIM_SEED=%d go test -run TestSimulation -v ./internal/sim%s",
		h.Seed, res.Violations[0], len(small.Steps), len(h.Steps), small, sres.Violations, h.Seed, note)
}

// generate is Generate, without the concurrent steps when
// SNAPID_SIM_SERIAL is set.
func generate(seed uint64, steps int) History {
	h := Generate(seed, steps)
	if os.Getenv("SNAPID_SIM_SERIAL") != "" {
		h = Serial(h)
	}
	return h
}

// TestSimulationSerialReplays: without concurrent steps a seed replays
// exactly: the same operations, faults, violations and events reached.
func TestSimulationSerialReplays(t *testing.T) {
	dir := t.TempDir()
	var drifted []uint64
	for seed := uint64(1); seed <= 60; seed++ {
		h := Serial(Generate(seed, 100))
		if h.concurrent() {
			t.Fatalf("seed %d: Serial left concurrent steps", seed)
		}
		a, err := Run(h, dir)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Run(h, dir)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a.Violations, b.Violations) {
			t.Errorf("seed %d replayed with other violations: %q, then %q", seed, a.Violations, b.Violations)
		}
		if a.Ops != b.Ops || a.Faults != b.Faults || !reflect.DeepEqual(a.Reached, b.Reached) {
			drifted = append(drifted, seed)
			t.Logf("seed %d replayed with other counts: %+v, then %+v", seed, a, b)
		}
	}
	// A background prefetch sent in one run and not in the other (the
	// scheduler decides when it starts) moves the later draws of a few
	// seeds; more than a few means a step no longer replays.
	if len(drifted) > maxDrifted {
		t.Errorf("%d of 60 serial seeds replayed with other counts (%v); at most %d may", len(drifted), drifted, maxDrifted)
	}
}

// maxDrifted is how many of TestSimulationSerialReplays' 60 seeds may
// replay with other counts of operations, faults or events reached (never
// other violations).
const maxDrifted = 6

func replay(t *testing.T, dir string, h History) {
	res, err := Run(h, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("history:\n%s", h)
	fmt.Printf("sim: 1 histories, %d operations, %d faults, %d violations\n", res.Ops, res.Faults, len(res.Violations))
	if len(res.Violations) > 0 {
		report(t, dir, h, res)
	}
}

// TestSimulationReaches: the histories reach what the simulator claims
// to exercise (a generator that never got there would check nothing).
func TestSimulationReaches(t *testing.T) {
	if testing.Short() || raceBuild {
		t.Skip("400 histories one after another: the simulation step runs it, without -short and the race detector")
	}
	dir := t.TempDir()
	want := []string{
		"sequence numbers taken in a data centre cut off",
		"sequence numbers taken in a second data centre",
		"counters repaired",
		"counters repaired under running processes",
		"sequence lease files restored in place while in use",
		"damaged lease files removed by an operator",
		"ids handed out in the decimal form",
		"ids handed out in the striped form",
	}
	got := map[string]int{}
	for seed := uint64(1); seed <= 400; seed++ {
		res, err := Run(Generate(seed, 100), dir)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		for k, n := range res.Reached {
			got[k] += n
		}
	}
	for _, k := range want {
		if got[k] == 0 {
			t.Errorf("400 histories never reached %q (reached: %v)", k, got)
		}
	}
	t.Logf("reached in 400 histories: %v", got)
}

// TestWatchdog: a step that never returns is reported as a hang within
// the limit, not waited for; one that returns is not.
func TestWatchdog(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	start := time.Now()
	if guard(200*time.Millisecond, func() { <-release }) {
		t.Fatal("a step blocked for good was reported as finished")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the hang was reported after %v", d)
	}
	if !guard(10*time.Second, func() {}) {
		t.Error("a step that returned was reported as a hang")
	}
}
