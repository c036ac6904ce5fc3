package snapid

import (
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

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
