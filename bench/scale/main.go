// Command scale measures what a fleet of hosts costs the registry, and
// what the registry can take, with the library's own Cassandra client.
//
//	go run ./scale [flags]          (from bench/; make scale runs it)
//
// Three measurements, each against the cluster at -cassandra, in a keyspace
// of its own (dropped at the end):
//
//   - capacity: W workers send the registry's heartbeat LWT (Registry.Touch)
//     as fast as they can for -capacity-duration, each on a name of its own
//     (distinct partitions) and then all on one name (one partition); for
//     each W of -workers, LWTs per second and latency. The most LWTs per
//     second over W is the capacity.
//   - steady: for each N of -hosts, N hosts (each a state directory with
//     -procs Generators on one counter, as processes) with every interval
//     of the library divided by -compress K (heartbeat a minute / K; the
//     space-left metric of a sequence read every minute / K by one process
//     per host): N hosts so load the registry as N×K hosts do. For
//     -duration it counts every registry call by kind, its latency, the
//     failures (ErrRegistry: timeouts, unknown outcomes) and refusals.
//   - storm: -storm-hosts hosts that ran before (claimed, issued an id,
//     closed) all start again at the same moment, as a data centre
//     does after a power loss: each opens, issues its first id and takes
//     its first sequence number (all from one data centre's partition)
//     within -storm-deadline. It reports how long each host took, errors
//     returned to callers (the goal is none), and the calls' latencies.
//
// The results go to -out as JSON and to standard output as tables; -plot
// draws registry load against equivalent hosts with the capacity lines.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/registry"
	"golang.org/x/sys/unix"
)

type config struct {
	hosts            []string
	localDC          string
	keyspace         string
	replication      map[string]string
	label            string
	modes            map[string]bool
	workers          []int
	capacityDuration time.Duration
	fleet            []int
	procs            int
	compress         int
	duration         time.Duration
	stormHosts       int
	stormDeadline    time.Duration
	sessions         int
	out, plot        string
}

func parseFlags() config {
	var c config
	var hosts, repl, modes, workers, fleet string
	flag.StringVar(&hosts, "cassandra", "127.0.0.1:9042", "Cassandra contact points, comma-separated")
	flag.StringVar(&c.localDC, "local-dc", "", "the data centre every simulated host is in (needed with several)")
	flag.StringVar(&repl, "replication", "class=SimpleStrategy,replication_factor=1", "the keyspace's replication, key=value,…")
	flag.StringVar(&c.label, "label", "", "what the run is on, for the tables (for example \"1 node, paxos v1\")")
	flag.StringVar(&modes, "mode", "capacity,steady,storm", "measurements to run, comma-separated")
	flag.StringVar(&workers, "workers", "8,32,128", "capacity: concurrent workers to try")
	flag.DurationVar(&c.capacityDuration, "capacity-duration", 15*time.Second, "capacity: time per worker count and partition layout")
	flag.StringVar(&fleet, "hosts", "50,100,200,400", "steady: hosts per run")
	flag.IntVar(&c.procs, "procs", 8, "steady: processes (Generators) per host")
	flag.IntVar(&c.compress, "compress", 25, "steady: the library's intervals are divided by this")
	flag.DurationVar(&c.duration, "duration", time.Minute, "steady: measurement window per run")
	flag.IntVar(&c.stormHosts, "storm-hosts", 500, "storm: hosts starting at once")
	flag.DurationVar(&c.stormDeadline, "storm-deadline", 30*time.Second, "storm: each host's deadline for its first id and first sequence number")
	flag.IntVar(&c.sessions, "sessions", 4, "registry clients (sessions) the simulated hosts share")
	flag.StringVar(&c.out, "out", "results/scale.json", "JSON results (empty: none)")
	flag.StringVar(&c.plot, "plot", "results/scale.png", "plot of load against hosts (empty: none)")
	flag.Parse()
	c.hosts = strings.Split(hosts, ",")
	c.replication = map[string]string{}
	for kv := range strings.SplitSeq(repl, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			log.Fatalf("-replication: %q is not key=value", kv)
		}
		c.replication[k] = v
	}
	c.modes = map[string]bool{}
	for m := range strings.SplitSeq(modes, ",") {
		c.modes[m] = true
	}
	c.workers = ints("-workers", workers)
	c.fleet = ints("-hosts", fleet)
	if c.compress < 1 || c.procs < 1 || c.sessions < 1 {
		log.Fatal("-compress, -procs and -sessions must be at least 1")
	}
	c.keyspace = fmt.Sprintf("snapid_scale_%08x", rand.Uint32())
	return c
}

func ints(flagName, s string) []int {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			log.Fatalf("%s: %q is not a positive integer", flagName, f)
		}
		out = append(out, n)
	}
	return out
}

// Results is what -out holds.
type Results struct {
	Label    string         `json:"label"`
	Machine  string         `json:"machine"`
	Started  string         `json:"started"`
	Command  string         `json:"command"`
	Capacity []CapacityRun  `json:"capacity,omitempty"`
	Steady   []SteadyRun    `json:"steady,omitempty"`
	Storm    *StormRun      `json:"storm,omitempty"`
	Limits   map[string]int `json:"limits,omitempty"`
}

func main() {
	c := parseFlags()
	raiseFileLimit()
	ctx := context.Background()
	res := &Results{Label: c.label, Started: time.Now().UTC().Format(time.RFC3339), Command: strings.Join(os.Args, " "),
		Machine: fmt.Sprintf("%d CPUs, %s/%s, %s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())}
	cfg := cassandra.Config{Hosts: c.hosts, Keyspace: c.keyspace, Replication: c.replication, AllowFragileReplication: true, Timeout: 12 * time.Second,
		LocalDC: c.localDC}
	createKeyspace(ctx, cfg)
	defer dropKeyspace(c)
	rec := newRecorder()
	regs := openRegistries(ctx, cfg, c.sessions, rec)
	defer closeRegistries(regs)
	if _, err := admin.CreateSequence(ctx, regs[0], "scale", 1, registry.MaxSequence); err != nil {
		log.Fatal(err)
	}
	root, err := os.MkdirTemp("", "snapid-scale-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)

	runModes(ctx, c, regs, rec, root, res)
	printTables(os.Stdout, res)
	writeResults(c, res)
}

// createKeyspace creates the keyspace and tables of cfg, trying again for
// a minute before it gives up (log.Fatal).
func createKeyspace(ctx context.Context, cfg cassandra.Config) {
	// A cluster just started may not know every data centre yet: its
	// nodes' views converge within seconds.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(2 * time.Second) {
		_, err := cassandra.CreateSchema(ctx, cfg)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			log.Fatalf("creating keyspace %s: %v", cfg.Keyspace, err)
		}
		log.Printf("creating keyspace %s: %v; trying again", cfg.Keyspace, err)
	}
}

// openRegistries opens n registry sessions on cfg whose calls rec times.
func openRegistries(ctx context.Context, cfg cassandra.Config, n int, rec *recorder) []*timedRegistry {
	regs := make([]*timedRegistry, n)
	for i := range regs {
		r, err := cassandra.NewRegistry(ctx, cfg)
		if err != nil {
			log.Fatal(err)
		}
		regs[i] = &timedRegistry{Registry: r, rec: rec}
	}
	return regs
}

// closeRegistries closes the registry sessions, the last opened first.
func closeRegistries(regs []*timedRegistry) {
	for i := len(regs) - 1; i >= 0; i-- {
		regs[i].Registry.Close()
	}
}

// runModes runs the measurements c.modes asks for, in directories under
// root, and records them in res.
func runModes(ctx context.Context, c config, regs []*timedRegistry, rec *recorder, root string, res *Results) {
	if c.modes["capacity"] {
		res.Capacity = runCapacity(ctx, c, regs, rec)
	}
	if c.modes["steady"] {
		for _, n := range c.fleet {
			run, err := runSteady(ctx, c, regs, rec, filepath.Join(root, fmt.Sprintf("steady_%d", n)), n)
			if err != nil {
				log.Fatalf("steady, %d hosts: %v", n, err)
			}
			res.Steady = append(res.Steady, run)
		}
	}
	if c.modes["storm"] {
		run, err := runStorm(ctx, c, regs, rec, filepath.Join(root, "storm"))
		if err != nil {
			log.Fatalf("storm: %v", err)
		}
		res.Storm = &run
	}
}

// writeResults writes res as JSON to -out and draws the load plot to
// -plot, each if asked.
func writeResults(c config, res *Results) {
	if c.out != "" {
		if err := os.MkdirAll(filepath.Dir(c.out), 0o755); err != nil {
			log.Fatal(err)
		}
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(c.out, append(b, '\n'), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	if c.plot != "" && len(res.Steady) > 0 {
		if err := plotLoad(c.plot, res); err != nil {
			log.Fatalf("plot: %v", err)
		}
	}
}

// raiseFileLimit lifts the soft limit on open files to the hard one:
// every simulated process holds a few descriptors.
func raiseFileLimit() {
	var l unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = unix.Setrlimit(unix.RLIMIT_NOFILE, &l)
	}
}

func dropKeyspace(c config) {
	cluster := gocql.NewCluster(c.hosts...)
	cluster.Timeout = 30 * time.Second
	s, err := cluster.CreateSession()
	if err != nil {
		log.Printf("dropping %s: %v", c.keyspace, err)
		return
	}
	defer s.Close()
	if err := s.Query(`DROP KEYSPACE IF EXISTS "` + c.keyspace + `"`).Exec(); err != nil {
		log.Printf("dropping %s: %v", c.keyspace, err)
	}
}

// CapacityRun is one worker count on one partition layout.
type CapacityRun struct {
	Layout     string  `json:"layout"` // "distinct" or "one"
	Workers    int     `json:"workers"`
	LWTPerSec  float64 `json:"lwt_per_sec"`
	Failed     int     `json:"failed"`
	Latency    Latency `json:"latency"`
	DurationS  float64 `json:"duration_s"`
	Throughput string  `json:"-"`
}

// runCapacity drives heartbeats (Registry.Touch, one LWT each) as fast as
// W workers can, on distinct names and on one name.
func runCapacity(ctx context.Context, c config, regs []*timedRegistry, rec *recorder) []CapacityRun {
	maxW := 0
	for _, w := range c.workers {
		maxW = max(maxW, w)
	}
	type claim struct{ name, owner, session string }
	claims := make([]claim, maxW)
	for i := range claims {
		owner := fmt.Sprintf("%032x", rand.Uint64())
		name := fmt.Sprintf("cap_%d", i)
		h, err := regs[i%len(regs)].Registry.Claim(ctx, registry.Claim{Name: name, Owner: owner, Hostname: "cap", MachineID: "cap-" + name})
		if err != nil {
			log.Fatalf("capacity: claiming %s: %v", name, err)
		}
		claims[i] = claim{name, owner, h.Session}
	}
	var runs []CapacityRun
	for _, layout := range []string{"distinct", "one"} {
		for _, w := range c.workers {
			rec.start()
			var stop atomic.Bool
			var wg sync.WaitGroup
			start := time.Now()
			for i := range w {
				cl := claims[i]
				if layout == "one" {
					cl = claims[0]
				}
				reg := regs[i%len(regs)]
				wg.Go(func() {
					for !stop.Load() {
						cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
						_ = reg.Touch(cctx, cl.name, cl.owner, cl.session)
						cancel()
					}
				})
			}
			time.Sleep(c.capacityDuration)
			stop.Store(true)
			wg.Wait()
			elapsed := time.Since(start)
			lat, failed, _ := rec.stop()
			run := CapacityRun{Layout: layout, Workers: w, LWTPerSec: float64(len(lat["touch"])) / elapsed.Seconds(),
				Failed: failed["touch"], Latency: summarize(lat["touch"]), DurationS: elapsed.Seconds()}
			log.Printf("capacity %s, %d workers: %.0f LWT/s, p99 %.1f ms, %d failed", layout, w, run.LWTPerSec, run.Latency.P99, run.Failed)
			runs = append(runs, run)
		}
	}
	return runs
}

// StormRun is one start-up storm.
type StormRun struct {
	Hosts        int                `json:"hosts"`
	Errors       []string           `json:"errors,omitempty"`
	FirstID      Latency            `json:"first_id"`       // from the common start to each host's first id
	FirstNumber  Latency            `json:"first_number"`   // to each host's first sequence number
	AllServedS   float64            `json:"all_served_s"`   // until the last host had both
	CallLatency  map[string]Latency `json:"call_latency"`   // registry calls during the storm
	Failed       map[string]int     `json:"failed"`         // calls that failed (and were retried, or not)
	LeasesPerSec float64            `json:"leases_per_sec"` // on the data centre's one partition, over the storm
}

// runStorm prepares c.stormHosts hosts that ran before, then starts them
// all at once.
func runStorm(ctx context.Context, c config, regs []*timedRegistry, rec *recorder, dir string) (StormRun, error) {
	n := c.stormHosts
	paths := make([]string, n)
	names := make([]string, n)
	cfg := func(h int) snapid.Config {
		return snapid.Config{
			Registry: &snapid.RegistryConfig{
				Registry: regs[h%len(regs)],
				Host:     snapid.HostInfo{Hostname: fmt.Sprintf("s%d", h), MachineID: fmt.Sprintf("storm-%d", h)},
			},
			NoSync: true,
			// Each host keeps its records of names in a place of its own.
			BindingDir: filepath.Join(dir, strconv.Itoa(h), "records"),
		}
	}
	// Before: every host ran once (claimed, issued an id) and stopped.
	// None holds a sequence lease yet: each first number of the storm is
	// a lease from the data centre's one partition, the worst case.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	errs := make([]error, n)
	for h := range n {
		paths[h] = filepath.Join(dir, strconv.Itoa(h), "counter.u64")
		names[h] = fmt.Sprintf("storm_%d", h)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := os.MkdirAll(filepath.Dir(paths[h]), 0o755); err != nil {
				errs[h] = err
				return
			}
			g, err := snapid.Open(paths[h], names[h], cfg(h))
			if err != nil {
				errs[h] = err
				return
			}
			defer g.Close()
			_, errs[h] = g.UniqueID()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return StormRun{}, fmt.Errorf("preparing: %w", err)
	}
	// The storm: every host at once.
	rec.start()
	firstID := make([]time.Duration, n)
	firstNum := make([]time.Duration, n)
	gens := make([]*snapid.Generator, n)
	seqs := make([]*snapid.Sequence, n)
	var mu sync.Mutex
	var callerErrs []string
	fail := func(h int, what string, err error) {
		mu.Lock()
		callerErrs = append(callerErrs, fmt.Sprintf("host %d, %s: %v", h, what, err))
		mu.Unlock()
	}
	begin := make(chan struct{})
	t0 := time.Now()
	for h := range n {
		wg.Go(func() {
			<-begin
			hctx, cancel := context.WithTimeout(ctx, c.stormDeadline)
			defer cancel()
			g, err := snapid.OpenContext(hctx, paths[h], names[h], cfg(h))
			if err != nil {
				fail(h, "open", err)
				return
			}
			gens[h] = g
			if _, err := g.UniqueIDContext(hctx); err != nil {
				fail(h, "first id", err)
				return
			}
			firstID[h] = time.Since(t0)
			s, err := g.Sequence("scale")
			if err != nil {
				fail(h, "sequence", err)
				return
			}
			seqs[h] = s
			if _, err := s.NextContext(hctx); err != nil {
				fail(h, "first sequence number", err)
				return
			}
			firstNum[h] = time.Since(t0)
		})
	}
	close(begin)
	wg.Wait()
	all := time.Since(t0)
	lat, failed, _ := rec.stop()
	for h := range n {
		if seqs[h] != nil {
			seqs[h].Close()
		}
		if gens[h] != nil {
			gens[h].Close()
		}
	}
	run := StormRun{Hosts: n, Errors: callerErrs, FirstID: summarize(firstID), FirstNumber: summarize(firstNum),
		AllServedS: all.Seconds(), CallLatency: map[string]Latency{}, Failed: failed}
	for kind, ds := range lat {
		run.CallLatency[kind] = summarize(ds)
	}
	run.LeasesPerSec = float64(len(lat["lease"])) / all.Seconds()
	sort.Strings(run.Errors)
	log.Printf("storm, %d hosts: all served in %.1f s, first id p99 %.0f ms, first number p99 %.0f ms, %d errors to callers",
		n, run.AllServedS, run.FirstID.P99, run.FirstNumber.P99, len(run.Errors))
	return run, nil
}
