package cassandra

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/require"
)

// Sequences on the real Cassandra: hosts are state directories with their
// own node names; processes are children re-running this test binary.

func init() {
	childRoles["seq-host"] = seqHostChild
}

// seqHostChild is one process of a host in a child process: it connects,
// prints "ready", waits for the go file, opens a Generator and the
// sequence SNAPID_T_SEQ, and draws with SNAPID_T_G goroutines
// SNAPID_T_N numbers each (one line each: the number), or until the
// sequence is exhausted ("exhausted"), then closes and prints "done". Its
// host's records place is SNAPID_T_RECORDS (see hostRecords).
func seqHostChild() int {
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	say := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		out.WriteString(s + "\n")
		out.Flush() // one write per line: a killed child leaves whole lines
	}
	fail := func(err error) int {
		say("error " + strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	env := func(k string) uint64 { v, _ := strconv.ParseUint(os.Getenv(k), 10, 64); return v }
	records := os.Getenv("SNAPID_T_RECORDS")
	if records == "" {
		return fail(errors.New("no SNAPID_T_RECORDS: a host needs its own records place"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	reg, err := NewRegistry(ctx, Config{Hosts: strings.Split(os.Getenv("SNAPID_T_HOSTS"), ","), Keyspace: os.Getenv("SNAPID_T_KS")})
	if err != nil {
		return fail(err)
	}
	defer reg.Close()
	if err := reg.SetSequenceSizing(DefaultSequenceHorizon, max(env("SNAPID_T_FLOOR"), 1)); err != nil {
		return fail(err)
	}
	say("ready")
	for {
		if _, err := os.Stat(os.Getenv("SNAPID_T_GO")); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	g, err := snapid.OpenContext(ctx, os.Getenv("SNAPID_T_COUNTER"), os.Getenv("SNAPID_T_NAME"), snapid.Config{
		Registry: &snapid.RegistryConfig{Registry: reg, CloneWindow: -1, // no clone check
			Host: snapid.HostInfo{Hostname: "host-" + os.Getenv("SNAPID_T_NAME"), MachineID: "m-" + os.Getenv("SNAPID_T_NAME")}},
		NoSync:     os.Getenv("SNAPID_T_SYNC") != "1",
		BindingDir: records,
	})
	if err != nil {
		return fail(err)
	}
	s, err := g.Sequence(os.Getenv("SNAPID_T_SEQ"), snapid.SequenceBlock(max(env("SNAPID_T_BLOCK"), 1)),
		snapid.SequenceLeaseSize(max(env("SNAPID_T_LEASE"), 1)))
	if err != nil {
		return fail(err)
	}
	n := env("SNAPID_T_N")
	var wg sync.WaitGroup
	var failed error
	for range max(env("SNAPID_T_G"), 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(0); i < n; i++ {
				v, err := s.Next()
				if errors.Is(err, snapid.ErrExhausted) {
					say("exhausted")
					return
				}
				if err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
					return
				}
				say(strconv.FormatUint(v, 10))
			}
		}()
	}
	wg.Wait()
	if failed != nil {
		return fail(failed)
	}
	if err := s.Close(); err != nil {
		return fail(err)
	}
	if err := g.Close(); err != nil {
		return fail(err)
	}
	say("done")
	return 0
}

// seqProc is a running seqHostChild.
type seqProc struct {
	cmd   *exec.Cmd
	sc    *bufio.Scanner
	lines []string
}

// startSeqProcs starts one child per environment, waits until all are
// connected, and lets them go at once. A child is on the host of its node
// name (machine "m-" + SNAPID_T_NAME, as seqHostChild says to the
// registry): it uses that host's records place (hostRecords).
func startSeqProcs(t *testing.T, ks *testKeyspace, envs [][]string) []*seqProc {
	t.Helper()
	goFile := filepath.Join(t.TempDir(), "go")
	procs := make([]*seqProc, len(envs))
	for i, env := range envs {
		name := ""
		for _, e := range env {
			if n, ok := strings.CutPrefix(e, "SNAPID_T_NAME="); ok {
				name = n
			}
		}
		require.NotEmpty(t, name, "child %d: no SNAPID_T_NAME", i)
		cmd := childCommand(t, "seq-host", append([]string{
			"SNAPID_T_HOSTS=" + strings.Join(ks.Hosts, ","), "SNAPID_T_KS=" + ks.Name, "SNAPID_T_GO=" + goFile,
			"SNAPID_T_RECORDS=" + hostRecords(t, "m-"+name),
		}, env...)...)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		sc := bufio.NewScanner(out)
		require.True(t, sc.Scan(), "child %d ended before it was ready", i)
		require.Equal(t, "ready", sc.Text())
		procs[i] = &seqProc{cmd: cmd, sc: sc}
	}
	require.NoError(t, os.WriteFile(goFile, nil, 0o600))
	return procs
}

// collect reads every child's output to its end (in parallel).
func collect(procs []*seqProc) { collectNotify(procs, nil) }

// collectNotify is collect, closing first (if not nil) when any child has
// written its first whole line after "ready".
func collectNotify(procs []*seqProc, first chan<- struct{}) {
	var wg sync.WaitGroup
	var once sync.Once
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p.sc.Scan() {
				p.lines = append(p.lines, p.sc.Text())
				if first != nil {
					once.Do(func() { close(first) })
				}
			}
		}()
	}
	wg.Wait()
}

// numbers parses a child's numbers; complete says whether it must have
// ended normally ("done", no error line).
func (p *seqProc) numbers(t *testing.T, complete bool) (nums []uint64, exhausted bool) {
	t.Helper()
	done := false
	for _, l := range p.lines {
		switch {
		case l == "done":
			done = true
		case l == "exhausted":
			exhausted = true
		case strings.HasPrefix(l, "error"):
			t.Fatalf("child: %s", l)
		default:
			v, err := strconv.ParseUint(l, 10, 64)
			if err != nil {
				require.False(t, complete, "child line %q", l)
				continue // a line cut by SIGKILL
			}
			nums = append(nums, v)
		}
	}
	if complete {
		require.True(t, done, "child did not finish: %v", p.lines)
	}
	return nums, exhausted
}

func seqEnv(name, counter, seq string, n, goroutines, block, lease int) []string {
	return []string{"SNAPID_T_NAME=" + name, "SNAPID_T_COUNTER=" + counter, "SNAPID_T_SEQ=" + seq,
		"SNAPID_T_N=" + strconv.Itoa(n), "SNAPID_T_G=" + strconv.Itoa(goroutines),
		"SNAPID_T_BLOCK=" + strconv.Itoa(block), "SNAPID_T_LEASE=" + strconv.Itoa(lease), "SNAPID_T_FLOOR=500"}
}

// tableRows reads the sequence's rows with the test's own session (not
// the code under test), at SERIAL.
type tableRows struct {
	start, max, next uint64
	grants, ranges   [][3]uint64 // first, last, next (0 for grants)
	hosts            map[string][2]uint64
}

func readTable(t *testing.T, ks *testKeyspace, seq, dc string) tableRows {
	t.Helper()
	var tr tableRows
	tr.hosts = map[string][2]uint64{}
	for _, part := range []string{"global", "dc:" + dc} {
		iter := ks.Admin.Query(`SELECT kind, key, first, last, next, start, max, lease_first, lease_last FROM "`+ks.Name+`".sequences WHERE seq = ? AND part = ?`,
			seq, part).Consistency(gocql.Serial).Iter()
		var kind, key string
		var first int64
		var last, next, start, mx, lf, ll *int64
		for iter.Scan(&kind, &key, &first, &last, &next, &start, &mx, &lf, &ll) {
			switch kind {
			case "global":
				tr.start, tr.max = u64(start), u64(mx)
				tr.next = testNext(t, next, tr.max)
			case "grant":
				require.Equal(t, dc, key)
				tr.grants = append(tr.grants, [3]uint64{uint64(first), u64(last), 0})
			case "range":
				tr.ranges = append(tr.ranges, [3]uint64{uint64(first), u64(last), testNext(t, next, u64(last))})
			case "host":
				tr.hosts[key] = [2]uint64{u64(lf), u64(ll)}
			}
		}
		require.NoError(t, iter.Close())
	}
	return tr
}

// testNext decodes a stored next number (null: used up, last+1); a
// negative one fails the test.
func testNext(t *testing.T, p *int64, last uint64) uint64 {
	t.Helper()
	if p == nil {
		return last + 1
	}
	require.GreaterOrEqual(t, *p, int64(1), "a stored next number is never below 1")
	return uint64(*p)
}

// requireTableAgrees checks the table against the numbers issued: GLOBAL
// never handed out anything outside [start, max]; grants and the data
// centre's ranges are the same, disjoint, and below GLOBAL's next; host
// leases lie in ranges, below their next, and are disjoint; every number
// issued was leased (inside a range, below its next).
func requireTableAgrees(t *testing.T, tr tableRows, issued map[uint64]bool) {
	t.Helper()
	sort.Slice(tr.grants, func(i, j int) bool { return tr.grants[i][0] < tr.grants[j][0] })
	sort.Slice(tr.ranges, func(i, j int) bool { return tr.ranges[i][0] < tr.ranges[j][0] })
	// Every range of the data centre is a grant of GLOBAL. A grant may lack
	// its range: the grant landed and recording it in the data centre did
	// not (a timeout under load, a close during a background grant); its
	// numbers are a gap, and the next grant records it.
	granted := map[[2]uint64]bool{}
	for i, g := range tr.grants {
		require.True(t, g[0] >= tr.start && g[1] <= tr.max && g[1] < tr.next, "grant %v outside [start %d, max %d] or not below next %d", g, tr.start, tr.max, tr.next)
		if i > 0 {
			require.Greater(t, g[0], tr.grants[i-1][1], "grants overlap")
		}
		granted[[2]uint64{g[0], g[1]}] = true
	}
	require.LessOrEqual(t, len(tr.grants)-len(tr.ranges), 1, "at most the last grant is not recorded yet: grants %v, ranges %v", tr.grants, tr.ranges)
	for _, r := range tr.ranges {
		require.True(t, granted[[2]uint64{r[0], r[1]}], "range %v of the data centre is a grant of GLOBAL (grants %v)", r, tr.grants)
		require.True(t, r[2] >= r[0] && r[2] <= r[1]+1, "range %v: next outside it", r)
	}
	in := func(n uint64) bool {
		for _, r := range tr.ranges {
			if n >= r[0] && n < r[2] {
				return true
			}
		}
		return false
	}
	var leases [][2]uint64
	for _, l := range tr.hosts {
		require.True(t, in(l[0]) && in(l[1]), "host lease %v is not in a leased part of a range", l)
		for _, o := range leases {
			require.False(t, l[0] <= o[1] && o[0] <= l[1], "host leases %v and %v overlap", l, o)
		}
		leases = append(leases, l)
	}
	for n := range issued {
		require.True(t, in(n), "number %d issued but not leased from the data centre", n)
	}
}

// Several hosts, each with two processes, each with two goroutines, draw
// from one sequence at once: every number is unique and in [start, max],
// and the table's rows agree with what was issued.
func TestSequenceManyHostsAndProcesses(t *testing.T) {
	ks := newTestKeyspace(t)
	reg := ks.registry(t)
	const start = 7_000_000
	_, err := admin.CreateSequence(t.Context(), reg, "articles", start, registry.MaxSequence)
	require.NoError(t, err)
	var envs [][]string
	for h := range 3 {
		counter := filepath.Join(t.TempDir(), "counter.u64")
		for range 2 {
			envs = append(envs, seqEnv(fmt.Sprintf("web_%d", h), counter, "articles", 400, 2, 10, 150))
		}
	}
	procs := startSeqProcs(t, ks, envs)
	collect(procs)
	issued := map[uint64]bool{}
	for i, p := range procs {
		require.NoError(t, p.cmd.Wait(), "child %d: %v", i, p.lines)
		nums, _ := p.numbers(t, true)
		require.Len(t, nums, 800)
		for _, n := range nums {
			require.False(t, issued[n], "number %d issued twice", n)
			require.True(t, n >= start && n <= registry.MaxSequence)
			issued[n] = true
		}
	}
	dc, err := reg.DataCentre(t.Context())
	require.NoError(t, err)
	requireTableAgrees(t, readTable(t, ks, "articles", dc), issued)
}

// Processes of two hosts are killed with SIGKILL at random moments while
// drawing, round after round: no number is issued twice, and every number
// issued was leased (gaps come only from leases).
func TestSequenceKill9Rounds(t *testing.T) {
	ks := newTestKeyspace(t)
	reg := ks.registry(t)
	_, err := admin.CreateSequence(t.Context(), reg, "orders", 1, registry.MaxSequence)
	require.NoError(t, err)
	counters := []string{filepath.Join(t.TempDir(), "counter.u64"), filepath.Join(t.TempDir(), "counter.u64")}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	seen := map[uint64]int{}
	rounds := 6
	if testing.Short() {
		rounds = 3
	}
	for round := range rounds {
		var envs [][]string
		for h, c := range counters {
			for range 2 {
				envs = append(envs, append(seqEnv(fmt.Sprintf("shop_%d", h), c, "orders", 1_000_000_000, 2, 5, 60), "SNAPID_T_SYNC=1"))
			}
		}
		procs := startSeqProcs(t, ks, envs)
		done, first := make(chan struct{}), make(chan struct{})
		go func() { collectNotify(procs, first); close(done) }()
		// The kill comes at a random moment after the children have
		// started drawing (however slow the machine is to get there).
		select {
		case <-first:
		case <-done:
		}
		time.Sleep(time.Duration(rng.IntN(600)) * time.Millisecond)
		for _, p := range procs {
			_ = p.cmd.Process.Kill()
		}
		<-done
		for i, p := range procs {
			_ = p.cmd.Wait()
			nums, _ := p.numbers(t, false)
			for _, n := range nums {
				if r, dup := seen[n]; dup {
					t.Fatalf("number %d issued in round %d and again in round %d (child %d)", n, r, round, i)
				}
				seen[n] = round
			}
		}
	}
	require.NotEmpty(t, seen)
	issued := map[uint64]bool{}
	var highest uint64
	for n := range seen {
		issued[n] = true
		highest = max(highest, n)
	}
	dc, err := reg.DataCentre(t.Context())
	require.NoError(t, err)
	tr := readTable(t, ks, "orders", dc)
	requireTableAgrees(t, tr, issued)
	var leased uint64
	for _, r := range tr.ranges {
		leased += r[2] - r[0]
	}
	t.Logf("%d rounds: %d numbers issued, %d leased (gaps %d), highest %d", rounds, len(seen), leased, leased-uint64(len(seen)), highest)
}

// A 32-bit sequence run to its max by several hosts and processes: every
// number from start to max is issued exactly once (nobody is killed), then
// ErrExhausted everywhere; the table agrees.
func TestSequence32BitRunToMax(t *testing.T) {
	ks := newTestKeyspace(t)
	reg := ks.registry(t)
	const max32 = 1<<31 - 1
	const start = max32 - 1999
	_, err := admin.CreateSequence(t.Context(), reg, "ticket", start, max32)
	require.NoError(t, err)
	var envs [][]string
	counters := make([]string, 3)
	for h := range counters {
		counters[h] = filepath.Join(t.TempDir(), "counter.u64")
		for range 2 {
			envs = append(envs, seqEnv(fmt.Sprintf("app_%d", h), counters[h], "ticket", 1_000_000, 2, 8, 90))
		}
	}
	procs := startSeqProcs(t, ks, envs)
	collect(procs)
	issued := map[uint64]bool{}
	for i, p := range procs {
		require.NoError(t, p.cmd.Wait(), "child %d: %v", i, p.lines)
		nums, exhausted := p.numbers(t, true)
		require.True(t, exhausted, "child %d ended without ErrExhausted", i)
		for _, n := range nums {
			require.False(t, issued[n], "number %d issued twice", n)
			require.True(t, n >= start && n <= max32, "number %d outside [%d, %d]", n, start, max32)
			issued[n] = true
		}
	}
	require.Len(t, issued, 2000, "every number from start to max")
	// A host's next process: still exhausted.
	g, err := snapid.Open(counters[0], "app_0", snapid.Config{
		Registry: &snapid.RegistryConfig{Registry: reg, CloneWindow: -1, // no clone check
			Host: snapid.HostInfo{Hostname: "host-app_0", MachineID: "m-app_0"}},
		NoSync:     true,
		BindingDir: hostRecords(t, "m-app_0"),
	})
	require.NoError(t, err)
	defer g.Close()
	s, err := g.Sequence("ticket")
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Next()
	require.ErrorIs(t, err, snapid.ErrExhausted)
	dc, err := reg.DataCentre(t.Context())
	require.NoError(t, err)
	tr := readTable(t, ks, "ticket", dc)
	require.Equal(t, uint64(max32+1), tr.next, "GLOBAL handed out up to max, nothing above")
	requireTableAgrees(t, tr, issued)
}
