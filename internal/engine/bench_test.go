package engine

import (
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The benchmarks report ids/s. bench/run.sh runs them (with the bench
// module's) -count 6 -benchtime 2s and reports medians; by hand:
//
//	go test -run '^$' -bench . -benchtime 2s -count 6
//
// Callers: c1 is one goroutine; cN runs N goroutines (see benchCallers).

// BenchmarkUniqueID measures UniqueID in each mode. Besides ids/s, every
// case reports what its counter file updates did while timed (from
// Generator.Stats): ids/update (numbers reserved per update: in strict
// mode, how many callers shared a group commit) and µs/update (time per
// update, lock waits included); strict cases also report per-call
// latency quantiles (p50-µs, p99-µs, p999-µs).
func BenchmarkUniqueID(b *testing.B) {
	type benchCase struct {
		name    string
		callers int
		latency bool
		opts    []Option
	}
	var cases []benchCase
	for _, sync := range []bool{false, true} {
		for _, c := range []int{1, 4, 16, 64} {
			cases = append(cases, benchCase{fmt.Sprintf("strict/sync=%s/c%d", onOff(sync), c), c, true, []Option{WithSync(sync)}})
		}
	}
	cases = append(cases,
		benchCase{"block=65536/sync=on/c1", 1, false, []Option{WithBlock(1 << 16)}},
		benchCase{"block=65536/sync=on/c2", 2, false, []Option{WithBlock(1 << 16)}},
		benchCase{"block=65536+cpushards/sync=on/c1", 1, false, []Option{WithBlock(1 << 16), WithCPUShards(true)}},
		benchCase{"block=65536+cpushards/sync=on/c2", 2, false, []Option{WithBlock(1 << 16), WithCPUShards(true)}},
	)
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			g, err := Open(filepath.Join(b.TempDir(), "counter.u64"), "server_a", tc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			before := g.Stats()
			benchCallers(b, tc.callers, tc.latency, g.UniqueID) // resets the timer: Open is not measured
			after := g.Stats()
			if flushes := after.CounterUpdates - before.CounterUpdates; flushes > 0 {
				b.ReportMetric(float64(after.NumbersReserved-before.NumbersReserved)/float64(flushes), "ids/update")
				b.ReportMetric((after.UpdateLatencySeconds.Sum-before.UpdateLatencySeconds.Sum)*1e6/float64(flushes), "µs/update")
			}
		})
	}
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// BenchmarkFloor measures what an id costs at the least. The file floors:
// the system calls of one counter update on a descriptor held open, with
// no checks, no formatting and no group commit. The memory floors, at 1
// and 2 callers: an atomic add alone, and the same output as block mode's
// UniqueID: an atomic add, then the name, '-' and the number appended in a
// stack buffer and made a string (one allocation).
func BenchmarkFloor(b *testing.B) {
	open := func(b *testing.B) *os.File {
		f, err := os.OpenFile(filepath.Join(b.TempDir(), "floor.u64"), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.WriteAt(make([]byte, 8), 0); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		return f
	}
	update := func(f *os.File, lock, sync bool) error {
		fd := int(f.Fd())
		if lock {
			if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
				return err
			}
		}
		var buf [8]byte
		if _, err := unix.Pread(fd, buf[:], 0); err != nil {
			return err
		}
		buf[0]++
		if _, err := unix.Pwrite(fd, buf[:], 0); err != nil {
			return err
		}
		if sync {
			if err := unix.Fdatasync(fd); err != nil {
				return err
			}
		}
		if lock {
			return unix.Flock(fd, unix.LOCK_UN)
		}
		return nil
	}
	for _, tc := range []struct {
		name       string
		lock, sync bool
	}{
		{"flock+pread+pwrite", true, false},
		{"flock+pread+pwrite+fdatasync", true, true},
		{"pwrite+fdatasync", false, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			f := open(b)
			benchCallers(b, 1, false, func() (string, error) { return "", update(f, tc.lock, tc.sync) })
		})
	}
	for _, callers := range []int{1, 2} {
		b.Run(fmt.Sprintf("atomic-add/c%d", callers), func(b *testing.B) {
			var n atomic.Uint64
			benchCallers(b, callers, false, func() (string, error) {
				if n.Add(1) == 0 {
					return "", fmt.Errorf("wrapped")
				}
				return "", nil
			})
		})
	}
	for _, callers := range []int{1, 2} {
		b.Run(fmt.Sprintf("atomic-add+string/c%d", callers), func(b *testing.B) {
			var n atomic.Uint64
			name := "server_a"
			benchCallers(b, callers, false, func() (string, error) {
				var buf [MaxNameLen + 1 + 20]byte
				s := append(buf[:0], name...)
				s = append(s, '-')
				s = strconv.AppendUint(s, n.Add(1), 10)
				return string(s), nil
			})
		})
	}
}

// BenchmarkForms measures the id forms at 1 caller, strict (sync on) and
// block mode: UniqueID (a string per id) and the calls that allocate
// nothing, AppendUniqueID into a reused buffer and, striped,
// UniqueUint64.
func BenchmarkForms(b *testing.B) {
	forms := []struct {
		name string
		opts []Option
	}{
		{"name", nil},
		{"decimal", []Option{WithFormat(FormatDecimal), WithNodeNumber(123)}},
		{"striped", []Option{WithFormat(FormatStriped), WithNodeNumber(123), WithStride(1024)}},
	}
	modes := []struct {
		name string
		opts []Option
	}{{"strict/sync=on", nil}, {"block=65536/sync=on", []Option{WithBlock(1 << 16)}}}
	for _, m := range modes {
		for _, f := range forms {
			for _, call := range []string{"UniqueID", "AppendUniqueID", "UniqueUint64"} {
				if call == "UniqueUint64" && f.name != "striped" {
					continue
				}
				b.Run(m.name+"/"+f.name+"/"+call, func(b *testing.B) {
					g, err := Open(filepath.Join(b.TempDir(), "counter.u64"), "server_a",
						append(append([]Option{WithBindingDir(b.TempDir())}, m.opts...), f.opts...)...)
					if err != nil {
						b.Fatal(err)
					}
					defer g.Close()
					buf := make([]byte, 0, 64)
					b.ReportAllocs()
					b.ResetTimer()
					for range b.N {
						switch call {
						case "UniqueID":
							_, err = g.UniqueID()
						case "AppendUniqueID":
							buf, err = g.AppendUniqueID(buf[:0])
						default:
							_, err = g.UniqueUint64()
						}
						if err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// benchCallers calls fn b.N times in all from callers goroutines and
// reports ids/s. Whatever the benchmark set up before calling it is left
// out: it resets the timer before the first call and stops it after the
// last. c1 is a plain loop; cN uses RunParallel with SetParallelism(N /
// GOMAXPROCS) when GOMAXPROCS divides N, or else exactly N goroutines
// sharing b.N.
//
// With lat, every call's duration is recorded in a histogram per
// goroutine (one clock read per call: the time since the previous call
// returned, loop overhead included) and the merged histogram is reported
// as p50-µs, p99-µs and p999-µs.
func benchCallers(b *testing.B, callers int, lat bool, fn func() (string, error)) {
	b.ReportAllocs()
	var hists []latencyHist
	if lat {
		hists = make([]latencyHist, callers)
	}
	var next atomic.Int64 // index of the next goroutine's histogram
	hist := func() *latencyHist {
		if !lat {
			return nil
		}
		return &hists[int(next.Add(1)-1)%callers]
	}
	// loop calls fn while more reports whether to go on.
	var failed atomic.Pointer[error]
	loop := func(h *latencyHist, more func() bool) {
		prev := time.Now()
		for more() {
			if _, err := fn(); err != nil {
				e := err // only a failing call allocates
				failed.CompareAndSwap(nil, &e)
				return
			}
			if h != nil {
				now := time.Now()
				h.add(now.Sub(prev))
				prev = now
			}
		}
	}
	procs := runtime.GOMAXPROCS(0)
	b.ResetTimer()
	switch {
	case callers == 1:
		i := 0
		loop(hist(), func() bool { i++; return i <= b.N })
	case callers%procs == 0:
		b.SetParallelism(callers / procs)
		b.RunParallel(func(pb *testing.PB) { loop(hist(), pb.Next) })
	default:
		var left atomic.Int64
		left.Store(int64(b.N))
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() { loop(hist(), func() bool { return left.Add(-1) >= 0 }) })
		}
		wg.Wait()
	}
	b.StopTimer()
	if errp := failed.Load(); errp != nil {
		b.Fatal(*errp)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ids/s")
	if lat {
		var all latencyHist
		for i := range hists {
			all.merge(&hists[i])
		}
		for _, q := range []struct {
			unit string
			q    float64
		}{{"p50-µs", 0.50}, {"p99-µs", 0.99}, {"p999-µs", 0.999}} {
			b.ReportMetric(float64(all.quantile(q.q))/1e3, q.unit)
		}
	}
}

// latencyHist counts durations in log-linear buckets: exact below 128 ns,
// then 64 buckets per power of two, so that a quantile read back (the
// middle of its bucket) is within 1/128 of the true value. It needs no
// allocation per sample.
type latencyHist struct {
	n      uint64
	counts [64 * 59]uint64
}

func histBucket(d time.Duration) int {
	v := uint64(max(d, 0))
	if v < 128 {
		return int(v)
	}
	shift := bits.Len64(v) - 7 // v>>shift is in [64, 128)
	return 64*(shift+1) + int(v>>shift-64)
}

// histValue is the middle of bucket i.
func histValue(i int) time.Duration {
	if i < 128 {
		return time.Duration(i)
	}
	shift := i/64 - 1
	low := uint64(i%64+64) << shift
	return time.Duration(low + (uint64(1)<<shift)/2)
}

func (h *latencyHist) add(d time.Duration) {
	h.counts[histBucket(d)]++
	h.n++
}

func (h *latencyHist) merge(o *latencyHist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the smallest recorded duration (to the bucket) that at
// least q of the samples do not exceed; 0 for an empty histogram.
func (h *latencyHist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q * float64(h.n))
	if float64(rank) < q*float64(h.n) || rank == 0 {
		rank++ // ceil, and at least the first sample
	}
	var seen uint64
	for i, c := range h.counts {
		if seen += c; seen >= rank {
			return histValue(i)
		}
	}
	return histValue(len(h.counts) - 1)
}

func TestLatencyHist(t *testing.T) {
	t.Parallel()
	// Every bucket's middle falls in that bucket, and bucket bounds grow.
	for _, d := range []time.Duration{0, 1, 127, 128, 129, 255, 256, 1000, 999_999, time.Second, 1<<62 + 12345} {
		i := histBucket(d)
		mid := histValue(i)
		if histBucket(mid) != i {
			t.Errorf("%d: bucket %d, its middle %d is in bucket %d", d, i, mid, histBucket(mid))
		}
		if diff := float64(mid - d); diff > float64(d)/128 || -diff > float64(d)/128 {
			t.Errorf("%d: read back as %d, more than 1/128 off", d, mid)
		}
	}
	for d := time.Duration(1); d < 1<<40; d = d*5/4 + 1 {
		if histBucket(d) < histBucket(d-1) {
			t.Fatalf("bucket of %d below bucket of %d", d, d-1)
		}
	}

	var h, other latencyHist
	require.Zero(t, h.quantile(0.5))
	// 1..1000 µs, one sample each, split between two histograms.
	for i := 1; i <= 1000; i++ {
		d := time.Duration(i) * time.Microsecond
		if i%2 == 0 {
			h.add(d)
		} else {
			other.add(d)
		}
	}
	h.merge(&other)
	require.EqualValues(t, 1000, h.n)
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {0.999, 999 * time.Microsecond}, {1, 1000 * time.Microsecond}, {0, time.Microsecond}} {
		got := h.quantile(tc.q)
		if diff := float64(got - tc.want); diff > float64(tc.want)/128 || -diff > float64(tc.want)/128 {
			t.Errorf("quantile %v = %v, want %v (within 1/128)", tc.q, got, tc.want)
		}
	}
}
