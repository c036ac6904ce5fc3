package main

import (
	"fmt"
	"io"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// capacity returns the most LWTs per second measured on a layout.
func capacity(res *Results, layout string) float64 {
	best := 0.0
	for _, r := range res.Capacity {
		if r.Layout == layout {
			best = max(best, r.LWTPerSec)
		}
	}
	return best
}

// printTables writes the results as markdown tables.
func printTables(w io.Writer, res *Results) {
	fmt.Fprintf(w, "\n## %s\n\n", res.Label)
	if len(res.Capacity) > 0 {
		fmt.Fprintf(w, "Capacity (heartbeat LWTs, Registry.Touch, as fast as W workers go):\n\n")
		fmt.Fprintf(w, "| partitions | workers | LWT/s | p50 ms | p99 ms | p99.9 ms | failed |\n|---|--:|--:|--:|--:|--:|--:|\n")
		for _, r := range res.Capacity {
			fmt.Fprintf(w, "| %s | %d | %.0f | %.1f | %.1f | %.1f | %d |\n", r.Layout, r.Workers, r.LWTPerSec, r.Latency.P50, r.Latency.P99, r.Latency.P999, r.Failed)
		}
	}
	if len(res.Steady) > 0 {
		distinct := capacity(res, "distinct")
		fmt.Fprintf(w, "\nSteady state (intervals ÷ %d, so each simulated host loads the registry like %d):\n\n", res.Steady[0].Compress, res.Steady[0].Compress)
		fmt.Fprintf(w, "| hosts × processes | as hosts | LWT/s | of capacity | heartbeats per host per min | status reads per host per min | other LWT/s | touch p50 / p99 / p99.9 ms | failed |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, r := range res.Steady {
			share := "–"
			if distinct > 0 {
				share = fmt.Sprintf("%.1f %%", 100*r.LWTPerSec/distinct)
			}
			failed := 0
			for _, n := range r.Failed {
				failed += n
			}
			l := r.Latency["touch"]
			fmt.Fprintf(w, "| %d × %d | %d | %.1f | %s | %.2f | %.2f | %.2f | %.1f / %.1f / %.1f | %d |\n",
				r.Hosts, r.Procs, r.EquivalentHosts, r.LWTPerSec, share, r.PerHostMin["touch"], r.PerHostMin["status"],
				r.LWTPerSec-r.PerSec["touch"], l.P50, l.P99, l.P999, failed)
		}
	}
	if s := res.Storm; s != nil {
		fmt.Fprintf(w, "\nStart-up storm: %d hosts start at once; each opens, issues an id and takes a sequence number (deadline each):\n\n", s.Hosts)
		fmt.Fprintf(w, "| | p50 s | p99 s | max s |\n|---|--:|--:|--:|\n")
		fmt.Fprintf(w, "| first id | %.2f | %.2f | %.2f |\n", s.FirstID.P50/1000, s.FirstID.P99/1000, s.FirstID.Max/1000)
		fmt.Fprintf(w, "| first sequence number | %.2f | %.2f | %.2f |\n", s.FirstNumber.P50/1000, s.FirstNumber.P99/1000, s.FirstNumber.Max/1000)
		fmt.Fprintf(w, "\nAll served in %.1f s; errors returned to callers: %d; leases %.0f/s on the data centre's partition.\n\n", s.AllServedS, len(s.Errors), s.LeasesPerSec)
		fmt.Fprintf(w, "| call | count | p50 ms | p99 ms | max ms | failed (retried) |\n|---|--:|--:|--:|--:|--:|\n")
		kinds := make([]string, 0, len(s.CallLatency))
		for k := range s.CallLatency {
			kinds = append(kinds, k)
		}
		slices.Sort(kinds)
		for _, k := range kinds {
			l := s.CallLatency[k]
			fmt.Fprintf(w, "| %s | %d | %.1f | %.1f | %.1f | %d |\n", k, l.Count, l.P50, l.P99, l.Max, s.Failed[k])
		}
		for i, e := range s.Errors {
			if i == 5 {
				fmt.Fprintf(w, "… %d more\n", len(s.Errors)-5)
				break
			}
			fmt.Fprintf(w, "- %s\n", e)
		}
	}
}

// plotLoad draws the registry's LWTs per second against the hosts they
// stand for, with the measured capacity on distinct partitions and 10 %
// of it.
func plotLoad(path string, res *Results) error {
	p := plot.New()
	p.Title.Text = "Registry load in steady state: " + res.Label
	p.X.Label.Text = "hosts (simulated hosts × interval compression)"
	p.Y.Label.Text = "LWT per second"
	pts := make(plotter.XYs, 0, len(res.Steady))
	for _, r := range res.Steady {
		pts = append(pts, plotter.XY{X: float64(r.EquivalentHosts), Y: r.LWTPerSec})
	}
	line, points, err := plotter.NewLinePoints(pts)
	if err != nil {
		return err
	}
	p.Add(line, points)
	p.Legend.Add(fmt.Sprintf("measured, %d processes per host", res.Steady[0].Procs), line, points)
	if c := capacity(res, "distinct"); c > 0 {
		maxX := pts[len(pts)-1].X
		for _, l := range []struct {
			name string
			y    float64
		}{{"capacity (distinct partitions)", c}, {"10 % of capacity", c / 10}} {
			cl, err := plotter.NewLine(plotter.XYs{{X: 0, Y: l.y}, {X: maxX, Y: l.y}})
			if err != nil {
				return err
			}
			cl.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
			p.Add(cl)
			p.Legend.Add(fmt.Sprintf("%s: %.0f/s", l.name, l.y), cl)
		}
	}
	p.Legend.Top = true
	p.Legend.Left = true
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
