package powerfs_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/powerfs"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// mount mounts a powerfs for t; without FUSE the test fails in CI
// (CI=true) and is skipped elsewhere.
func mount(t *testing.T) *powerfs.FS {
	t.Helper()
	if err := powerfs.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (the power-loss tests need /dev/fuse and root)", err)
		}
		t.Skipf("%v (the power-loss tests need /dev/fuse and root)", err)
	}
	mnt := filepath.Join(t.TempDir(), "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	f, err := powerfs.Mount(mnt, t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return f
}

// registryFor serves a fresh in-memory registry for the children of t.
func registryFor(t *testing.T) (*registrytest.Registry, string) {
	t.Helper()
	reg := registrytest.NewRegistry()
	// Unix socket paths are short: not under t.TempDir().
	dir, err := os.MkdirTemp("", "powerfs-reg")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "reg.sock")
	serveRegistry(t, reg, sock)
	return reg, sock
}

// newRNG returns a random source and logs its seed.
func newRNG(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, 9))
}

// history is every id reported by every child of a test, across cuts.
type history struct {
	t       *testing.T
	seen    map[uint64]int // number -> round
	max     uint64
	repeats int
	allow   bool // count repeats instead of failing (sync off, no registry)
}

func newHistory(t *testing.T) *history { return &history{t: t, seen: map[uint64]int{}} }

func (h *history) add(round int, nums []uint64) {
	h.t.Helper()
	for _, n := range nums {
		if r, dup := h.seen[n]; dup {
			if !h.allow {
				h.t.Fatalf("%d returned twice: before the cut of round %d and again in round %d", n, r, round)
			}
			h.repeats++
			continue
		}
		h.seen[n] = round
		h.max = max(h.max, n)
	}
}

// powerMode is one configuration of the main power-cut test.
type powerMode struct {
	name     string
	block    int
	sync     bool
	registry bool
	cutMode  powerfs.CutMode
	form     string // "decimal" or "striped", node number 7; "": the name form
}

// cutRound starts children on path, lets them draw for a random moment
// and cuts the power; it returns every id they reported.
func cutRound(t *testing.T, f *powerfs.FS, rng *rand.Rand, cfgs []childConfig, cutMode powerfs.CutMode, wait time.Duration) ([]uint64, []*proc) {
	t.Helper()
	procs := make([]*proc, len(cfgs))
	records := bootPlace(t) // the children of a round are one host
	for i, c := range cfgs {
		c.records = records
		procs[i] = startChild(t, c)
	}
	// Until one of them has drawn (or a second has passed), then a random
	// moment more.
	for start := time.Now(); time.Since(start) < time.Second; time.Sleep(time.Millisecond) {
		if _, _, n := procs[0].state(); n > 0 {
			break
		}
	}
	time.Sleep(time.Duration(rng.Int64N(int64(wait) + 1)))
	require.NoError(t, f.PowerCut(cutMode, rng, func() {
		for _, p := range procs {
			p.kill()
		}
	}))
	var all []uint64
	for _, p := range procs {
		all = append(all, p.nums...)
	}
	return all, procs
}

// childErrors returns what children reported besides ids that is not an
// effect of the cut (every error after the cut is EIO from the frozen
// file system, or a failure to reach it).
func childErrors(procs []*proc) []string {
	var bad []string
	for _, p := range procs {
		for _, e := range p.errs {
			if !strings.Contains(e, "input/output error") && !strings.Contains(e, "transport endpoint") &&
				!strings.Contains(e, "no such device") {
				bad = append(bad, e+" | stderr: "+p.stderr.String())
			}
		}
	}
	return bad
}

// TestPowerCut: children (3, with 1 to 3 goroutines each) draw ids from
// one counter file on a powerfs; the power is cut at a random moment, the
// file system keeps only what was synced, and new children start. Across
// every cut no id is returned twice, and the counter file after a cut is
// valid and, with sync on, never below an id returned before the cut. With
// the registry (marks, sessions and owner token beside the counter, all on
// the powerfs; the registry itself, in memory in this process, keeps
// everything), also with sync off, since the reserved mark covers a
// counter that lost its updates.
func TestPowerCut(t *testing.T) {
	f := mount(t)
	rounds := 220
	if testing.Short() {
		rounds = 20
	}
	modes := []powerMode{
		{name: "strict/sync", sync: true},
		{name: "block/sync", block: 50, sync: true},
		{name: "registry/strict/sync", registry: true, sync: true, cutMode: powerfs.KeepSome},
		{name: "registry/block/nosync", registry: true, block: 50, cutMode: powerfs.ForgetAll},
		{name: "registry/strict/nosync", registry: true, cutMode: powerfs.KeepSome},
		// Decimal ids "7.<number>": unique numbers, none ending in 0,
		// are ids no two of which are equal as decimals.
		{name: "registry/block/sync/decimal", registry: true, block: 50, sync: true, cutMode: powerfs.KeepSome, form: "decimal"},
		// Striped ids number × 1024 + 7: the children report the ids,
		// each must carry node 7, and the numbers in them are unique.
		{name: "registry/block/nosync/striped", registry: true, block: 50, cutMode: powerfs.ForgetAll, form: "striped"},
	}
	total, totalIDs := 0, 0
	for mi, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			rng := newRNG(t)
			dir := filepath.Join(f.Dir(), fmt.Sprintf("m%d", mi))
			require.NoError(t, os.Mkdir(dir, 0o755))
			syncDir(t, f.Dir())
			path := filepath.Join(dir, "counter.u64")
			name := fmt.Sprintf("power%d", mi)
			var reg *registrytest.Registry
			cfg := childConfig{path: path, name: name, block: m.block, sync: m.sync, form: m.form}
			if m.registry {
				reg, cfg.sock = registryFor(t)
				cfg.step = 200
			}
			h := newHistory(t)
			for round := range rounds {
				cfgs := make([]childConfig, 3)
				for i := range cfgs {
					cfgs[i] = cfg
					cfgs[i].goroutines = 1 + i
				}
				nums, procs := cutRound(t, f, rng, cfgs, m.cutMode, 30*time.Millisecond)
				require.Empty(t, childErrors(procs), "round %d", round)
				if m.form == "striped" {
					nums = unstripe(t, round, nums)
				}
				h.add(round, nums)
				for _, n := range nums {
					if m.form == "decimal" && n%10 == 0 {
						t.Fatalf("round %d: the decimal form handed out %d, which ends in 0 (7.%d equals 7.%d as a number)", round, n, n, n/10)
					}
				}
				checkFiles(t, path, h.max, m.sync, m.registry)
				if round%50 == 0 {
					t.Logf("round %d: %d ids so far, max %d", round, len(h.seen), h.max)
				}
			}
			// After the last cut, the next id is above every id returned.
			g := openParent(t, path, name, reg, snapid.Config{})
			n, err := g.Next()
			require.NoError(t, err)
			require.Greater(t, n, h.max)
			require.NoError(t, g.Close())
			t.Logf("%s: %d power cuts, %d ids returned and checked unique across them, last %d",
				m.name, rounds, len(h.seen), h.max)
			total += rounds
			totalIDs += len(h.seen)
			require.Greater(t, len(h.seen), rounds, "the children drew ids before the cuts")
		})
	}
	t.Logf("TOTAL: %d power cuts, %d ids checked", total, totalIDs)
}

// unstripe returns the numbers in striped ids of node 7, failing on an id
// of another node or of number 0.
func unstripe(t *testing.T, round int, ids []uint64) []uint64 {
	t.Helper()
	nums := make([]uint64, len(ids))
	for i, id := range ids {
		if id%stripedStride != 7 || id/stripedStride == 0 {
			t.Fatalf("round %d: striped id %d is node %d, number %d: want node 7, a number above 0", round, id, id%stripedStride, id/stripedStride)
		}
		nums[i] = id / stripedStride
	}
	return nums
}

// checkFiles checks the files after a cut: the counter valid (never
// corrupt: it is only ever written whole, in one sector) and, with sync
// on, not below max; with the registry, the owner token and the mark file
// valid.
func checkFiles(t *testing.T, path string, maxIssued uint64, syncOn, registry bool) {
	t.Helper()
	v, err := admin.ReadCounter(path)
	switch {
	case errors.Is(err, os.ErrNotExist) && maxIssued == 0:
	case err != nil:
		t.Fatalf("after the cut: %v", err)
	case syncOn && v < maxIssued:
		t.Fatalf("after the cut the counter reads %d, below %d, an id returned before it", v, maxIssued)
	}
	if registry {
		_, err := admin.OwnerToken(path)
		if !errors.Is(err, os.ErrNotExist) {
			require.NoError(t, err, "after the cut")
		}
		_, _, err = admin.ReadMark(path)
		require.NoError(t, err, "after the cut")
	}
}

// openParent opens a Generator in this process (on reg if not nil), a
// boot of the host after a cut (see bootPlace).
func openParent(t *testing.T, path, name string, reg *registrytest.Registry, cfg snapid.Config) *snapid.Generator {
	t.Helper()
	if reg != nil {
		cfg.Registry = registryConfig(reg, 200)
	}
	cfg.BindingDir = bootPlace(t)
	g, err := snapid.Open(path, name, cfg)
	require.NoError(t, err)
	return g
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	require.NoError(t, err)
	require.NoError(t, d.Sync())
	require.NoError(t, d.Close())
}

// TestPowerCutSyncOff: with sync off and no registry, ids ARE returned
// again after a cut (the file system really loses what was not synced, so
// the tests above could fail); with the registry the reserved mark
// prevents it, as the README says.
func TestPowerCutSyncOff(t *testing.T) {
	f := mount(t)
	const rounds = 10
	for _, withReg := range []bool{false, true} {
		t.Run(fmt.Sprintf("registry=%v", withReg), func(t *testing.T) {
			rng := newRNG(t)
			dir := filepath.Join(f.Dir(), fmt.Sprintf("r%v", withReg))
			require.NoError(t, os.Mkdir(dir, 0o755))
			syncDir(t, f.Dir())
			cfg := childConfig{path: filepath.Join(dir, "counter.u64"), name: "nosync", goroutines: 2}
			if withReg {
				_, cfg.sock = registryFor(t)
				cfg.step = 200
			}
			h := newHistory(t)
			h.allow = !withReg
			for round := range rounds {
				nums, procs := cutRound(t, f, rng, []childConfig{cfg, cfg}, powerfs.ForgetAll, 20*time.Millisecond)
				require.Empty(t, childErrors(procs), "round %d", round)
				h.add(round, nums)
			}
			t.Logf("registry=%v: %d cuts, %d ids, %d returned again", withReg, rounds, len(h.seen), h.repeats)
			if withReg {
				require.Zero(t, h.repeats)
			} else {
				require.NotZero(t, h.repeats, "with sync off a cut must lose updates and ids come again")
			}
		})
	}
}

// TestPowerCutCreation: cuts while a counter and the files beside it are
// being created: Init, the first Open of a new counter, and the first
// Open with the registry (owner token, mark, presence and session files).
// After each cut: a counter that is there is valid (never corrupt) and
// not below any id returned, nor below Init's value once Init returned;
// the files beside it are valid; the next Open issues above all of it.
func TestPowerCutCreation(t *testing.T) {
	f := mount(t)
	rng := newRNG(t)
	reg, sock := registryFor(t)
	rounds := 160
	if testing.Short() {
		rounds = 20
	}
	variants := []struct {
		name     string
		init     int
		registry bool
	}{
		{"open", 0, false},
		{"init+open", 1000, false},
		{"open+registry", 0, true},
		{"init+open+registry", 1000, true},
	}
	var beforeInit, beforeReady, drawing int
	ids := 0
	for round := range rounds {
		v := variants[round%len(variants)]
		dir := filepath.Join(f.Dir(), fmt.Sprintf("c%d", round))
		require.NoError(t, os.Mkdir(dir, 0o755))
		syncDir(t, f.Dir())
		path := filepath.Join(dir, "counter.u64")
		name := fmt.Sprintf("create%d", round)
		cfg := childConfig{path: path, name: name, sync: true, init: v.init, goroutines: 1, records: bootPlace(t)}
		var r *registrytest.Registry
		if v.registry {
			cfg.sock, r = sock, reg
		}
		p := startChild(t, cfg)
		// Creation takes a few milliseconds once the child runs: cut
		// anywhere in the first 2 to 10 (Init, the first step, takes
		// about one).
		p.waitStarted()
		window := time.Duration(2+rng.IntN(9)) * time.Millisecond
		time.Sleep(time.Duration(rng.Int64N(int64(window))))
		require.NoError(t, f.PowerCut(powerfs.KeepSome, rng, p.kill))
		require.Empty(t, childErrors([]*proc{p}), "round %d (%s)", round, v.name)
		switch {
		case v.init > 0 && !p.inited:
			beforeInit++
		case !p.ready:
			beforeReady++
		default:
			drawing++
		}
		var maxIssued uint64
		for _, n := range p.nums {
			maxIssued = max(maxIssued, n)
		}
		ids += len(p.nums)
		floor := maxIssued
		if p.inited {
			floor = max(floor, uint64(v.init-1))
		}
		cv, err := admin.ReadCounter(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			require.Zero(t, floor, "round %d (%s): the counter is gone after Init returned or ids were issued", round, v.name)
		case err != nil:
			t.Fatalf("round %d (%s): %v", round, v.name, err)
		case cv < floor:
			t.Fatalf("round %d (%s): the counter reads %d after the cut, below %d", round, v.name, cv, floor)
		}
		checkFiles(t, path, 0, false, true)
		// The next start issues above everything.
		g := openParent(t, path, name, r, snapid.Config{})
		n, err := g.Next()
		require.NoError(t, err, "round %d (%s)", round, v.name)
		require.Greater(t, n, floor, "round %d (%s)", round, v.name)
		require.NoError(t, g.Close())
	}
	t.Logf("%d power cuts during creation: %d before Init returned, %d before Open returned, %d while drawing; %d ids checked",
		rounds, beforeInit, beforeReady, drawing, ids)
	require.NotZero(t, beforeInit+beforeReady, "some cuts came during creation")
}

// TestRPCRegistry: the registry the children reach over RPC passes the
// conformance suite, so the power-cut tests exercise the library on a
// faithful registry.
func TestRPCRegistry(t *testing.T) {
	registrytest.TestRegistry(t, func(t *testing.T) registry.Registry {
		_, sock := registryFor(t)
		r, err := dialRegistry(sock)
		require.NoError(t, err)
		t.Cleanup(func() { r.Close() })
		return r
	})
}
