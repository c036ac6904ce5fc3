package main

import (
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 1000; i >= 1; i-- { // out of order: summarize sorts
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	l := summarize(ds)
	if l.Count != 1000 || l.P50 != 500 || l.P99 != 990 || l.P999 != 999 || l.Max != 1000 {
		t.Fatalf("summarize: %+v", l)
	}
	if ds[0] != 1000*time.Millisecond {
		t.Fatal("summarize sorted its argument in place")
	}
	if (summarize(nil) != Latency{}) {
		t.Fatal("no durations: want the zero Latency")
	}
}

func TestTables(t *testing.T) {
	res := &Results{Label: "test", Capacity: []CapacityRun{
		{Layout: "distinct", Workers: 8, LWTPerSec: 900},
		{Layout: "distinct", Workers: 32, LWTPerSec: 1000},
		{Layout: "one", Workers: 8, LWTPerSec: 300},
	}, Steady: []SteadyRun{{Hosts: 100, Procs: 8, Compress: 25, EquivalentHosts: 2500, LWTPerSec: 50,
		PerSec: map[string]float64{"touch": 41.7}, PerHostMin: map[string]float64{"touch": 1, "status": 1},
		Latency: map[string]Latency{"touch": {P50: 2, P99: 9, P999: 20}}, Failed: map[string]int{"touch": 1}}},
		Storm: &StormRun{Hosts: 500, FirstID: Latency{P50: 1500, P99: 4000, Max: 5000}, AllServedS: 6,
			CallLatency: map[string]Latency{"claim": {Count: 500, P50: 10}}, Failed: map[string]int{"claim": 3}}}
	if c := capacity(res, "distinct"); c != 1000 {
		t.Fatalf("capacity on distinct partitions %v, want the best run's 1000", c)
	}
	var b strings.Builder
	printTables(&b, res)
	for _, want := range []string{
		"| distinct | 32 | 1000 |",
		"| 100 × 8 | 2500 | 50.0 | 5.0 % | 1.00 | 1.00 | 8.30 | 2.0 / 9.0 / 20.0 | 1 |",
		"| first id | 1.50 | 4.00 | 5.00 |",
		"| claim | 500 | 10.0 |",
		"errors returned to callers: 0",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
	if err := plotLoad(t.TempDir()+"/p.png", res); err != nil {
		t.Fatal(err)
	}
}
