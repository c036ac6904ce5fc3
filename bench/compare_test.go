package bench

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bwmarrin/snowflake"
	"github.com/google/uuid"
	"github.com/rs/xid"
	"github.com/snapid/snapid"
	"github.com/sony/sonyflake"
)

// The workloads: each draws ids as strings, which is what snapid's UniqueID
// returns, so every peer pays for its own string encoding too.
//
//	BenchmarkCompare/<impl>/<mode>/c<N>   ids/s with N callers
//	TestWorkloads/<impl>/<mode>           distinct, well-formed ids across goroutines
//
// Callers: c1 is a plain loop in one goroutine; cN uses RunParallel with
// SetParallelism(N/GOMAXPROCS), or, if N is not a multiple of GOMAXPROCS,
// exactly N goroutines sharing b.N.

const nodeName = "server_a"

// A workload is one generator in one configuration.
type workload struct {
	impl, mode string
	callers    []int
	// open returns a fresh generator; its resources are released by
	// tb.Cleanup.
	open func(tb testing.TB) func() (string, error)
	// check reports what is wrong with one id, or nil.
	check func(id string) error
	// dense: the numbers of a fresh generator are exactly 1..n.
	dense bool
}

func (w workload) name() string { return w.impl + "/" + w.mode }

func openSnapid(cfg snapid.Config) func(testing.TB) func() (string, error) {
	return func(tb testing.TB) func() (string, error) {
		dir := tb.TempDir() // each workload is a host of its own, with its own records of names
		c := cfg
		c.BindingDir = filepath.Join(dir, "records")
		g, err := snapid.Open(filepath.Join(dir, "counter.u64"), nodeName, c)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() {
			if err := g.Close(); err != nil {
				tb.Error(err)
			}
		})
		return g.UniqueID
	}
}

func checkSnapid(id string) error {
	p, err := snapid.ParseID(id)
	if err != nil {
		return err
	}
	if p.Name != nodeName {
		return fmt.Errorf("name %q, want %q", p.Name, nodeName)
	}
	return nil
}

// blockSize is the block of the block-mode workloads.
const blockSize = 65536

var workloads = []workload{
	// The strict modes are here for TestWorkloads only: the library's own
	// BenchmarkUniqueID measures them.
	{impl: "snapid", mode: "strict-sync=off",
		open: openSnapid(snapid.Config{NoSync: true}), check: checkSnapid, dense: true},
	{impl: "snapid", mode: "strict-sync=on",
		open: openSnapid(snapid.Config{}), check: checkSnapid, dense: true},
	{impl: "snapid", mode: "block=65536", callers: []int{1, 2},
		open: openSnapid(snapid.Config{Block: &snapid.Block{Size: blockSize}}), check: checkSnapid},
	{impl: "snapid", mode: "block=65536+cpushards", callers: []int{2},
		open: openSnapid(snapid.Config{Block: &snapid.Block{Size: blockSize, CPUShards: true}}), check: checkSnapid},
	// As shipped, a snowflake node issues at most 2^12 = 4,096 ids per
	// millisecond and spins until the next one: this line measures that
	// cap. With 21 step bits (and 1 node bit) the cap is 2^21 per
	// millisecond, out of reach: that line measures its speed.
	{impl: "snowflake", mode: "node=1", callers: []int{1, 2},
		open: openSnowflake(10, 12), check: checkSnowflake(10, 12)},
	{impl: "snowflake", mode: "node=1+stepbits=21", callers: []int{1, 2},
		open: openSnowflake(1, 21), check: checkSnowflake(1, 21)},
	{impl: "sonyflake", mode: "machine=1", callers: []int{1, 2},
		open: func(tb testing.TB) func() (string, error) {
			// The default machine id is taken from a private IPv4 address,
			// which a test machine may lack.
			sf, err := sonyflake.New(sonyflake.Settings{MachineID: func() (uint16, error) { return 1, nil }})
			if err != nil {
				tb.Fatal(err)
			}
			return func() (string, error) {
				n, err := sf.NextID()
				if err != nil {
					return "", err
				}
				return strconv.FormatUint(n, 10), nil
			}
		},
		check: func(id string) error {
			n, err := strconv.ParseUint(id, 10, 64)
			if err != nil {
				return err
			}
			if sonyflake.MachineID(n) != 1 || strconv.FormatUint(n, 10) != id {
				return fmt.Errorf("machine %d or not canonical", sonyflake.MachineID(n))
			}
			return nil
		}},
	{impl: "xid", mode: "new", callers: []int{1, 2},
		open: func(testing.TB) func() (string, error) {
			return func() (string, error) { return xid.New().String(), nil }
		},
		check: func(id string) error {
			x, err := xid.FromString(id)
			if err != nil {
				return err
			}
			if len(id) != 20 || x.String() != id || x.IsZero() {
				return errors.New("not a canonical 20-character xid")
			}
			if d := time.Since(x.Time()); d < -time.Minute || d > time.Hour {
				return fmt.Errorf("time %v is off", x.Time())
			}
			return nil
		}},
	{impl: "uuid", mode: "v7", callers: []int{1, 2},
		open: func(testing.TB) func() (string, error) {
			return func() (string, error) {
				u, err := uuid.NewV7()
				if err != nil {
					return "", err
				}
				return u.String(), nil
			}
		},
		check: func(id string) error {
			u, err := uuid.Parse(id)
			if err != nil {
				return err
			}
			if len(id) != 36 || u.String() != id {
				return errors.New("not the canonical 36-character form")
			}
			if u.Version() != 7 || u.Variant() != uuid.RFC4122 {
				return fmt.Errorf("version %d, variant %v", u.Version(), u.Variant())
			}
			return nil
		}},
}

// snowflakeMu serializes setting the snowflake package's bit widths, which
// are package globals that NewNode reads, with NewNode.
var snowflakeMu sync.Mutex

// openSnowflake makes node 1 with the given bit widths, then puts the
// package's defaults (10 node bits, 12 step bits) back.
func openSnowflake(nodeBits, stepBits uint8) func(testing.TB) func() (string, error) {
	return func(tb testing.TB) func() (string, error) {
		node := newSnowflakeNode(tb, nodeBits, stepBits)
		return func() (string, error) { return node.Generate().String(), nil }
	}
}

// checkSnowflake checks an id of node 1 made with these bit widths. It
// reads the node field itself: ID.Node uses package globals that the last
// NewNode set.
func checkSnowflake(nodeBits, stepBits uint8) func(string) error {
	return func(id string) error {
		sid, err := snowflake.ParseString(id)
		if err != nil {
			return err
		}
		if node := sid.Int64() >> stepBits & (1<<nodeBits - 1); sid <= 0 || node != 1 || sid.String() != id {
			return fmt.Errorf("node %d, not canonical or not positive", node)
		}
		return nil
	}
}

// BenchmarkCompare measures each workload with each of its caller counts.
func BenchmarkCompare(b *testing.B) {
	for _, w := range workloads {
		for _, c := range w.callers {
			b.Run(fmt.Sprintf("%s/c%d", w.name(), c), func(b *testing.B) {
				next := w.open(b)
				runCallers(b, c, next)
			})
		}
	}
}

// runCallers calls next b.N times in all from callers goroutines and
// reports ids/s.
func runCallers(b *testing.B, callers int, next func() (string, error)) {
	b.ReportAllocs()
	var failed atomic.Pointer[error]
	fail := func(err error) { failed.CompareAndSwap(nil, &err) }
	procs := runtime.GOMAXPROCS(0)
	b.ResetTimer()
	switch {
	case callers == 1:
		for i := 0; i < b.N; i++ {
			if _, err := next(); err != nil {
				b.Fatal(err)
			}
		}
	case callers%procs == 0:
		b.SetParallelism(callers / procs)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := next(); err != nil {
					fail(err)
					return
				}
			}
		})
	default:
		var left atomic.Int64
		left.Store(int64(b.N))
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					if _, err := next(); err != nil {
						fail(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	b.StopTimer()
	if errp := failed.Load(); errp != nil {
		b.Fatal(*errp)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ids/s")
}

// TestWorkloads draws ids from every workload in many goroutines at once
// and checks that they are well-formed and all distinct, and, for strict
// snapid, that the numbers are exactly 1..n.
func TestWorkloads(t *testing.T) {
	const goroutines, perGoroutine = 16, 625 // 10,000 ids
	for _, w := range workloads {
		t.Run(w.name(), func(t *testing.T) {
			t.Parallel()
			next := w.open(t)
			got := make([][]string, goroutines)
			errs := make([]error, goroutines)
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					ids := make([]string, 0, perGoroutine)
					for range perGoroutine {
						id, err := next()
						if err != nil {
							errs[g] = err
							return
						}
						ids = append(ids, id)
					}
					got[g] = ids
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			seen := make(map[string]int, goroutines*perGoroutine)
			bad := 0
			for g, ids := range got {
				if len(ids) != perGoroutine {
					t.Fatalf("goroutine %d drew %d ids, want %d", g, len(ids), perGoroutine)
				}
				for _, id := range ids {
					if err := w.check(id); err != nil {
						if bad++; bad <= 5 {
							t.Errorf("malformed id %q: %v", id, err)
						}
					}
					if prev, dup := seen[id]; dup {
						t.Fatalf("duplicate id %q (goroutines %d and %d)", id, prev, g)
					}
					seen[id] = g
				}
			}
			if bad > 0 {
				t.Fatalf("%d malformed ids", bad)
			}
			if w.dense {
				for n := uint64(1); n <= goroutines*perGoroutine; n++ {
					if _, ok := seen[nodeName+"-"+strconv.FormatUint(n, 10)]; !ok {
						t.Fatalf("number %d was not issued: strict numbers are not 1..%d", n, goroutines*perGoroutine)
					}
				}
			}
		})
	}
}

// TestSnowflakeBitsRestored: the uncapped workload leaves the snowflake
// package as shipped for whatever makes a node next.
func TestSnowflakeBitsRestored(t *testing.T) {
	openSnowflake(1, 21)(t)
	snowflakeMu.Lock()
	defer snowflakeMu.Unlock()
	if snowflake.NodeBits != 10 || snowflake.StepBits != 12 {
		t.Fatalf("node bits %d, step bits %d after an uncapped node: want 10, 12", snowflake.NodeBits, snowflake.StepBits)
	}
}
