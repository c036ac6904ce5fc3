package cassandra

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkClusterClaim measures the latency of claiming a new name
// (Registry.Claim: one INSERT … IF NOT EXISTS at SERIAL, through any node)
// on the three-node cluster, healthy and with one node down (killed, and
// noticed by the others first: the seconds right after a kill, before the
// failure detector convicts the node, are slower, see
// TestClusterNodeFailures). It reports the median and the 99th percentile
// in milliseconds. scripts/cluster-test.sh runs it.
func BenchmarkClusterClaim(b *testing.B) {
	e := newClusterEnv(b)
	reg := e.registry(b)
	owner := "bench-" + randomHex(b, 6)
	run := 0
	measure := func(b *testing.B) {
		run++
		lat := make([]time.Duration, 0, b.N)
		for i := 0; b.Loop(); i++ {
			name := fmt.Sprintf("lat_%d_%d", run, i)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			start := time.Now()
			_, err := reg.Claim(ctx, testClaim(name, owner))
			lat = append(lat, time.Since(start))
			cancel()
			if err != nil {
				b.Fatal(err)
			}
		}
		slices.Sort(lat)
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
		b.ReportMetric(ms(lat[(len(lat)*99+99)/100-1]), "p99-ms")
	}
	b.Run("healthy", measure)
	down := e.c.N()
	e.c.Kill(b, down)
	var up []int
	for i := 1; i < down; i++ {
		up = append(up, i)
	}
	e.c.WaitSeesDown(b, 1, up...)
	b.Run("one_down", measure)
	e.c.Start(b, down)
}
