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
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of Generators claiming names in a real Cassandra: hosts are
// counter files with their own owner tokens and host info; some run in
// child processes.

func init() {
	childRoles["cluster-host"] = clusterHostChild
}

// clusterHostChild is one host in a child process. It connects, prints
// "ready", waits for the go file, opens a snapid.Generator with the registry,
// prints "won" and draws SNAPID_T_N numbers (one per line), or prints
// "taken" if the name is held by another owner. With SNAPID_T_HANG=1 it
// then prints "drawn" and waits, holding everything open, to be killed. Its
// host's records place is SNAPID_T_RECORDS (see hostRecords).
func clusterHostChild() int {
	fail := func(err error) int {
		fmt.Printf("error %v\n", err)
		return 1
	}
	records := os.Getenv("SNAPID_T_RECORDS")
	if records == "" {
		return fail(errors.New("no SNAPID_T_RECORDS: a host needs its own records place"))
	}
	n, _ := strconv.Atoi(os.Getenv("SNAPID_T_N"))
	step, _ := strconv.ParseUint(os.Getenv("SNAPID_T_STEP"), 10, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg, err := NewRegistry(ctx, Config{
		Hosts: strings.Split(os.Getenv("SNAPID_T_HOSTS"), ","), Keyspace: os.Getenv("SNAPID_T_KS")})
	if err != nil {
		return fail(err)
	}
	defer reg.Close()
	fmt.Println("ready")
	for {
		if _, err := os.Stat(os.Getenv("SNAPID_T_GO")); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	g, err := snapid.OpenContext(ctx, os.Getenv("SNAPID_T_COUNTER"), os.Getenv("SNAPID_T_NAME"), snapid.Config{
		Registry: &snapid.RegistryConfig{Registry: reg, ReserveStep: max(step, 2), OutageHorizon: -1,
			Host: snapid.HostInfo{Hostname: "host-" + os.Getenv("SNAPID_T_MACHINE"), MachineID: os.Getenv("SNAPID_T_MACHINE")}},
		NoSync:     true,
		BindingDir: records,
	})
	if errors.Is(err, snapid.ErrNameTaken) {
		fmt.Println("taken")
		return 0
	}
	if err != nil {
		return fail(err)
	}
	fmt.Println("won")
	for i := 0; i < n; i++ {
		v, err := g.Next()
		if err != nil {
			return fail(err)
		}
		fmt.Println(v)
	}
	if os.Getenv("SNAPID_T_HANG") == "1" {
		fmt.Println("drawn")
		select {}
	}
	if err := g.Close(); err != nil {
		return fail(err)
	}
	return 0
}

// hostProc is a running clusterHostChild.
type hostProc struct {
	lines []string
	wait  func() error
}

// startHost starts a clusterHostChild on ks with the extra environment
// env, waiting for goFile, and returns once it is connected, with its
// output after "ready". The child is on the host of its SNAPID_T_MACHINE:
// it uses that host's records place (hostRecords).
func startHost(t *testing.T, ks *testKeyspace, goFile string, env ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	machine := ""
	for _, e := range env {
		if m, ok := strings.CutPrefix(e, "SNAPID_T_MACHINE="); ok {
			machine = m
		}
	}
	require.NotEmpty(t, machine, "a child host needs SNAPID_T_MACHINE")
	cmd := childCommand(t, "cluster-host", append([]string{
		"SNAPID_T_HOSTS=" + strings.Join(ks.Hosts, ","), "SNAPID_T_KS=" + ks.Name, "SNAPID_T_GO=" + goFile,
		"SNAPID_T_RECORDS=" + hostRecords(t, machine),
	}, env...)...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	sc := bufio.NewScanner(out)
	require.True(t, sc.Scan(), "the child ended before it was ready")
	require.Equal(t, "ready", sc.Text())
	return cmd, sc
}

// startHosts starts children with the given per-child environments, waits
// until all are connected, then lets them claim at once. It returns each
// child's output lines after "ready".
func startHosts(t *testing.T, ks *testKeyspace, envs [][]string) []hostProc {
	t.Helper()
	goFile := filepath.Join(t.TempDir(), "go")
	procs := make([]hostProc, len(envs))
	readers := make([]*bufio.Scanner, len(envs))
	for i, env := range envs {
		cmd, sc := startHost(t, ks, goFile, env...)
		procs[i].wait = cmd.Wait
		readers[i] = sc
	}
	require.NoError(t, os.WriteFile(goFile, nil, 0o600))
	var wg sync.WaitGroup
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for readers[i].Scan() {
				procs[i].lines = append(procs[i].lines, readers[i].Text())
			}
		}()
	}
	wg.Wait()
	for i := range procs {
		require.NoError(t, procs[i].wait(), "child %d: %v", i, procs[i].lines)
	}
	return procs
}

func TestClusterTwoHostsOneName(t *testing.T) {
	ks := newTestKeyspace(t)
	reg := ks.registry(t)
	dir := t.TempDir()
	a, err := snapid.Open(filepath.Join(dir, "a.u64"), "web_1", snapid.Config{
		Registry:   &snapid.RegistryConfig{Registry: reg, Host: snapid.HostInfo{Hostname: "host-a", Address: "192.0.2.1", MachineID: "ma"}},
		BindingDir: hostRecords(t, "ma"),
	})
	require.NoError(t, err)
	defer a.Close()
	id, err := a.UniqueID()
	require.NoError(t, err)
	assert.Equal(t, "web_1-1", id)

	bPath := filepath.Join(dir, "b.u64")
	_, err = snapid.Open(bPath, "web_1", snapid.Config{
		Registry:   &snapid.RegistryConfig{Registry: ks.registry(t), Host: snapid.HostInfo{Hostname: "host-b", MachineID: "mb"}},
		BindingDir: hostRecords(t, "mb"),
	})
	require.ErrorIs(t, err, snapid.ErrNameTaken)
	for _, want := range []string{"host-a", "192.0.2.1", "since"} {
		assert.Contains(t, err.Error(), want)
	}
	// The loser's first Open leaves the disk as it found it: the counter it
	// created is removed, and no session was written.
	assert.NoFileExists(t, bPath, "the loser's new counter is removed")
	assert.NoFileExists(t, bPath+".session", "a refused claim writes no session")
}

// TestClusterSixteenClaims runs 16 concurrent claims of one name, 8 from
// goroutines and 8 from child processes, each a different owner: exactly
// one wins, every round.
func TestClusterSixteenClaims(t *testing.T) {
	ks := newTestKeyspace(t)
	ks.registry(t) // creates the schema before the children race
	rounds := 5
	if testing.Short() {
		rounds = 2
	}
	for round := 0; round < rounds; round++ {
		name := fmt.Sprintf("race_%d", round)
		dir := t.TempDir()
		envs := make([][]string, 8)
		for i := range envs {
			envs[i] = []string{"SNAPID_T_NAME=" + name, "SNAPID_T_N=3", "SNAPID_T_MACHINE=p" + strconv.Itoa(i),
				"SNAPID_T_COUNTER=" + filepath.Join(dir, fmt.Sprintf("p%d.u64", i))}
		}
		var winners, taken int
		var mu sync.Mutex
		var wg sync.WaitGroup
		regs := make([]*Registry, 8)
		hosts := make([]string, 8) // each goroutine a machine of its own (its records place)
		for i := range regs {
			regs[i] = ks.registry(t)
			hosts[i] = hostRecords(t, fmt.Sprintf("g%d", i))
		}
		start := make(chan struct{})
		goErrs := make(chan error, 8)
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				g, err := snapid.Open(filepath.Join(dir, fmt.Sprintf("g%d.u64", i)), name, snapid.Config{
					Registry:   &snapid.RegistryConfig{Registry: regs[i], Host: snapid.HostInfo{Hostname: fmt.Sprintf("g%d", i), MachineID: fmt.Sprintf("g%d", i)}},
					BindingDir: hosts[i],
				})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case errors.Is(err, snapid.ErrNameTaken):
					taken++
				case err != nil:
					goErrs <- err
				default:
					winners++
					goErrs <- g.Close()
				}
			}()
		}
		var procs []hostProc
		var pwg sync.WaitGroup
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			close(start) // goroutines claim while the children are released
			procs = startHosts(t, ks, envs)
		}()
		wg.Wait()
		pwg.Wait()
		close(goErrs)
		for err := range goErrs {
			require.NoError(t, err)
		}
		for i, p := range procs {
			require.NotEmpty(t, p.lines, "child %d", i)
			switch p.lines[0] {
			case "won":
				winners++
				assert.Equal(t, []string{"won", "1", "2", "3"}, p.lines)
			case "taken":
				taken++
				assert.Len(t, p.lines, 1, "a loser issues nothing")
			default:
				t.Fatalf("child %d: %v", i, p.lines)
			}
		}
		assert.Equal(t, 1, winners, "round %d: exactly one winner", round)
		assert.Equal(t, 15, taken, "round %d", round)
	}
}

// crashedHost runs a host in a child process that opens the counter at
// path as name with a registry on ks (reserve step step, host "host-" +
// machine), draws n numbers and is then killed with SIGKILL: gone without
// Close, so nothing is returned to the registry. It returns the numbers
// drawn.
func crashedHost(t *testing.T, ks *testKeyspace, path, name string, step, n int, machine string) []uint64 {
	t.Helper()
	goFile := filepath.Join(t.TempDir(), "go")
	require.NoError(t, os.WriteFile(goFile, nil, 0o600))
	cmd, sc := startHost(t, ks, goFile, "SNAPID_T_NAME="+name, "SNAPID_T_N="+strconv.Itoa(n),
		"SNAPID_T_STEP="+strconv.Itoa(step), "SNAPID_T_MACHINE="+machine, "SNAPID_T_COUNTER="+path, "SNAPID_T_HANG=1")
	var got []uint64
	require.True(t, sc.Scan(), "the child ended before it claimed")
	require.Equal(t, "won", sc.Text())
	for sc.Scan() && sc.Text() != "drawn" {
		v, err := strconv.ParseUint(sc.Text(), 10, 64)
		require.NoError(t, err, "child: %s", sc.Text())
		got = append(got, v)
	}
	require.Len(t, got, n, "the child drew every number before it was killed")
	require.NoError(t, cmd.Process.Kill()) // SIGKILL
	require.Error(t, cmd.Wait(), "the child was killed")
	return got
}

// TestClusterProcessesShareMark runs 4 processes on one counter file with a
// small step, so that they extend the mark many times between them.
func TestClusterProcessesShareMark(t *testing.T) {
	ks := newTestKeyspace(t)
	ks.registry(t)
	path := filepath.Join(t.TempDir(), "counter.u64")
	const per = 300
	envs := make([][]string, 4)
	for i := range envs {
		envs[i] = []string{"SNAPID_T_NAME=shared", "SNAPID_T_N=" + strconv.Itoa(per), "SNAPID_T_STEP=40",
			"SNAPID_T_MACHINE=m1", "SNAPID_T_COUNTER=" + path}
	}
	procs := startHosts(t, ks, envs)
	seen := map[uint64]bool{}
	for i, p := range procs {
		require.Equal(t, "won", p.lines[0], "child %d: same owner, same machine: every process passes", i)
		for _, l := range p.lines[1:] {
			v, err := strconv.ParseUint(l, 10, 64)
			require.NoError(t, err)
			require.False(t, seen[v], "number %d issued twice", v)
			seen[v] = true
		}
	}
	assert.Len(t, seen, 4*per)
	last, err := admin.ReadCounter(path)
	require.NoError(t, err)
	h, err := ks.registry(t).Get(t.Context(), "shared")
	require.NoError(t, err)
	assert.Equal(t, last, h.Reserved, "the last process out set the mark back to the counter")
	for v := range seen {
		assert.LessOrEqual(t, v, last)
	}
}

func TestClusterRestartReleaseTakeoverBackup(t *testing.T) {
	ks := newTestKeyspace(t)
	reg := ks.registry(t)
	dir := t.TempDir()
	aPath := filepath.Join(dir, "a.u64")
	// Host A is crashedHost's machine "a": its host info and records place.
	hostA := snapid.HostInfo{Hostname: "host-a", MachineID: "a"}
	onA := hostRecords(t, "a")
	open := func(path string, host snapid.HostInfo, records string) *snapid.Generator {
		g, err := snapid.Open(path, "web_1", snapid.Config{
			Registry:   &snapid.RegistryConfig{Registry: reg, Host: host, ReserveStep: 100, OutageHorizon: -1},
			BindingDir: records,
		})
		require.NoError(t, err)
		return g
	}

	// Restart of the same host passes, without a gap after a clean close.
	g := open(aPath, hostA, onA)
	first := draw(t, g, 10)
	backup, err := os.ReadFile(aPath)
	require.NoError(t, err)
	require.NoError(t, g.Close())
	// The restarted host draws in a process that is then killed.
	issued := append(first, crashedHost(t, ks, aPath, "web_1", 100, 151, "a")...)
	assert.Equal(t, uint64(11), issued[10])

	// After the crash, the counter restored from the old backup: raised to
	// the registry's mark, no repeat.
	require.NoError(t, os.WriteFile(aPath, backup, 0o600))
	g = open(aPath, hostA, onA)
	v := draw(t, g, 1)[0]
	assert.Greater(t, v, issued[len(issued)-1])
	assert.LessOrEqual(t, v, issued[len(issued)-1]+100+1, "a crash costs at most one step")
	require.NoError(t, g.Close())

	// Release, then another host takes the name over and continues above.
	final, err := admin.Release(t.Context(), reg, aPath, "web_1", admin.WithBindingDir(onA))
	require.NoError(t, err)
	assert.Equal(t, v, final)
	b := open(filepath.Join(dir, "b.u64"), snapid.HostInfo{Hostname: "host-b", MachineID: "mb"}, hostRecords(t, "mb"))
	defer b.Close()
	assert.Equal(t, []uint64{v + 1}, draw(t, b, 1))

	// The old host refuses the name it released, and cannot claim it back
	// on purpose either while the new one holds it.
	_, err = snapid.Open(aPath, "web_1", snapid.Config{Registry: &snapid.RegistryConfig{Registry: reg, Host: hostA}, BindingDir: onA})
	require.ErrorIs(t, err, snapid.ErrReleased)
	_, err = snapid.Open(aPath, "web_1", snapid.Config{Registry: &snapid.RegistryConfig{Registry: reg, Host: hostA, Reclaim: true}, BindingDir: onA})
	require.ErrorIs(t, err, snapid.ErrNameTaken)
}

func TestClusterCloneRefused(t *testing.T) {
	ks := newTestKeyspace(t)
	reg := ks.registry(t)
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "orig"), 0o700))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "clone"), 0o700))
	g, err := snapid.Open(filepath.Join(dir, "orig", "c.u64"), "web_1", snapid.Config{
		Registry:   &snapid.RegistryConfig{Registry: reg, Host: snapid.HostInfo{Hostname: "orig", MachineID: "m-orig"}},
		BindingDir: hostRecords(t, "m-orig"),
	})
	require.NoError(t, err)
	defer g.Close()
	draw(t, g, 5)
	testfs.CopyFiles(t, filepath.Join(dir, "orig"), filepath.Join(dir, "clone"), "c.u64", "c.u64.owner", "c.u64.mark")
	clonePath := filepath.Join(dir, "clone", "c.u64")
	_, err = snapid.Open(clonePath, "web_1", snapid.Config{
		Registry:   &snapid.RegistryConfig{Registry: reg, Host: snapid.HostInfo{Hostname: "clone", MachineID: "m-clone"}},
		BindingDir: hostRecords(t, "m-clone"),
	})
	require.ErrorIs(t, err, snapid.ErrProbableClone)
	v, err := admin.ReadCounter(clonePath)
	require.NoError(t, err)
	assert.Equal(t, uint64(5), v, "the refused clone's counter is unchanged")
}

// TestClusterCloneAfterWindowNeverSharesRange: a copy of a counter
// directory that claims the name after the original went quiet (here: the
// clone's registry clock is ten minutes ahead, twice the clone window) takes
// the name over; the original, still running, can no longer extend and stops
// at its mark, and the two never issue the same number.
func TestClusterCloneAfterWindowNeverSharesRange(t *testing.T) {
	ks := newTestKeyspace(t)
	reg := ks.registry(t)
	dir := t.TempDir()
	for _, d := range []string{"orig", "clone"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o700))
	}
	orig, err := snapid.Open(filepath.Join(dir, "orig", "c.u64"), "web_1", snapid.Config{
		Registry: &snapid.RegistryConfig{Registry: reg, ReserveStep: 50, OutageHorizon: -1,
			Host: snapid.HostInfo{Hostname: "orig", MachineID: "m-orig"}},
		BindingDir: hostRecords(t, "m-orig"),
	})
	require.NoError(t, err)
	defer orig.Close()
	fromOrig := draw(t, orig, 10)
	testfs.CopyFiles(t, filepath.Join(dir, "orig"), filepath.Join(dir, "clone"), "c.u64", "c.u64.owner", "c.u64.mark")
	later := ks.registry(t)
	later.now = func() time.Time { return time.Now().Add(10 * time.Minute) }
	clone, err := snapid.Open(filepath.Join(dir, "clone", "c.u64"), "web_1", snapid.Config{
		Registry: &snapid.RegistryConfig{Registry: later, ReserveStep: 50, OutageHorizon: -1,
			Host: snapid.HostInfo{Hostname: "clone", MachineID: "m-clone"}},
		BindingDir: hostRecords(t, "m-clone"),
	})
	require.NoError(t, err)
	defer clone.Close()
	fromClone := draw(t, clone, 200)

	for {
		v, err := orig.Next()
		if err != nil {
			require.ErrorIs(t, err, snapid.ErrNameTaken, "the original stops when it cannot extend")
			break
		}
		fromOrig = append(fromOrig, v)
		require.Less(t, len(fromOrig), 1000, "the original kept issuing past its reservation")
	}
	seen := map[uint64]bool{}
	for _, v := range fromOrig {
		seen[v] = true
	}
	for _, v := range fromClone {
		require.False(t, seen[v], "number %d issued by both the original and its clone", v)
	}
}

// TestClusterCrashKill9 kills processes of one host at random moments while
// they draw with the registry (small steps, so that extensions, joins and
// closes race the kills), round after round: no number is ever issued
// twice, and the registry's mark stays at or above every number issued.
func TestClusterCrashKill9(t *testing.T) {
	ks := newTestKeyspace(t)
	reg := ks.registry(t)
	path := filepath.Join(t.TempDir(), "counter.u64")
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	seen := map[uint64]int{}
	var highest uint64
	rounds := 8
	if testing.Short() {
		rounds = 3
	}
	for round := 0; round < rounds; round++ {
		goFile := filepath.Join(t.TempDir(), "go")
		var cmds []*exec.Cmd
		var scanners []*bufio.Scanner
		for i := 0; i < 3; i++ {
			cmd, sc := startHost(t, ks, goFile, "SNAPID_T_NAME=crashy", "SNAPID_T_N=100000000", "SNAPID_T_STEP=30",
				"SNAPID_T_MACHINE=m1", "SNAPID_T_COUNTER="+path)
			cmds = append(cmds, cmd)
			scanners = append(scanners, sc)
		}
		require.NoError(t, os.WriteFile(goFile, nil, 0o600))
		lines := make([][]string, len(cmds))
		var wg sync.WaitGroup
		var once sync.Once
		drawing, ended := make(chan struct{}), make(chan struct{})
		for i := range cmds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for scanners[i].Scan() {
					lines[i] = append(lines[i], scanners[i].Text())
					if _, err := strconv.ParseUint(scanners[i].Text(), 10, 64); err == nil {
						once.Do(func() { close(drawing) })
					}
				}
			}()
		}
		go func() { wg.Wait(); close(ended) }()
		// The kill comes at a random moment after a child has drawn its
		// first number (however slow the machine is to get there).
		select {
		case <-drawing:
		case <-ended:
		}
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
		for _, cmd := range cmds {
			_ = cmd.Process.Kill() // SIGKILL
		}
		wg.Wait()
		for _, cmd := range cmds {
			_ = cmd.Wait()
		}
		for i, ls := range lines {
			for _, l := range ls {
				if l == "won" || strings.HasPrefix(l, "taken") {
					continue
				}
				if strings.HasPrefix(l, "error") {
					t.Fatalf("round %d child %d: %s", round, i, l)
				}
				v, err := strconv.ParseUint(l, 10, 64)
				if err != nil {
					continue // a line cut by the kill
				}
				if r, dup := seen[v]; dup {
					t.Fatalf("number %d issued in round %d and again in round %d", v, r, round)
				}
				seen[v] = round
				highest = max(highest, v)
			}
		}
	}
	require.NotEmpty(t, seen)
	h, err := reg.Get(t.Context(), "crashy")
	require.NoError(t, err)
	assert.GreaterOrEqual(t, h.Reserved, highest, "the registry's mark covers every number issued")
	last, err := admin.ReadCounter(path)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, last, highest)
	t.Logf("%d rounds, %d numbers, highest %d, counter %d, mark %d", rounds, len(seen), highest, last, h.Reserved)
}
