package main

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Display names of the workloads, in plot order (top to bottom); others
// follow in the order of the results.
var categoryNames = []struct{ key, label string }{
	{"snapid/strict-sync=off", "snapid strict, sync off"},
	{"snapid/strict-sync=on", "snapid strict, sync on"},
	{"snapid/block=65536", "snapid block=65536"},
	{"snapid/block=65536+cpushards", "snapid block, CPU shards"},
	{"snowflake/node=1+stepbits=21", "bwmarrin/snowflake, 21 step bits"},
	{"snowflake/node=1", "bwmarrin/snowflake (rate limit)"},
	{"sonyflake/machine=1", "sony/sonyflake (rate limit)"},
	{"xid/new", "rs/xid"},
	{"uuid/v7", "google/uuid v7"},
}

var seriesColors = []color.Color{
	color.RGBA{0x4c, 0x72, 0xb0, 0xff},
	color.RGBA{0x55, 0xa8, 0x68, 0xff},
	color.RGBA{0xc4, 0x4e, 0x52, 0xff},
	color.RGBA{0x81, 0x72, 0xb2, 0xff},
	color.RGBA{0xcc, 0xb9, 0x74, 0xff},
	color.RGBA{0x64, 0xb5, 0xcd, 0xff},
	color.RGBA{0x93, 0x78, 0x60, 0xff},
	color.RGBA{0xda, 0x8b, 0xc3, 0xff},
	color.RGBA{0x8c, 0x8c, 0x8c, 0xff},
}

// plotIDs draws ids/s by workload (rows) and callers or processes (bars of
// one colour per count), on a log scale, as a PNG.
func plotIDs(rep *Report) ([]byte, error) {
	cats, series, value := idsByCategory(entries(rep))
	if len(cats) == 0 {
		return nil, errors.New("no ids/s results to plot")
	}
	slices.SortStableFunc(cats, func(a, b string) int { return categoryOrder(a) - categoryOrder(b) })
	slices.SortFunc(series, func(a, b seriesKey) int {
		if a.unit != b.unit {
			return int(a.unit) - int(b.unit) // c before p
		}
		return a.n - b.n
	})

	p := newIDsPlot(rep)
	lo, hi := addIDBars(p, cats, series, value)
	p.NominalY(categoryLabels(cats)...)
	p.Y.Tick.Label.Font.Size = vg.Points(11)
	p.Y.Min, p.Y.Max = -0.5, float64(len(cats))-0.5
	p.X.Min = math.Pow(10, math.Floor(math.Log10(lo)))
	// Room at the right for the value labels and the legend.
	p.X.Max = math.Pow(10, math.Ceil(math.Log10(hi*3)))

	img := vgimg.PngCanvas{Canvas: vgimg.New(11*vg.Inch, vg.Length(1.6+0.85*float64(len(cats)))*vg.Inch)}
	// A margin at the right, where the last tick label would be cut.
	p.Draw(draw.Crop(draw.New(img), 0, -vg.Points(16), 0, 0))
	var buf bytes.Buffer
	if _, err := img.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// seriesKey names a series of bars: callers ('c') or processes ('p'), and
// how many.
type seriesKey struct {
	unit byte
	n    int
}

// idsByCategory gathers the results with ids/s: the workloads
// (implementation/mode) and the series, each in the order first met, and
// the ids/s of each workload by series.
func idsByCategory(es []entry) (cats []string, series []seriesKey, value map[string]map[seriesKey]float64) {
	value = map[string]map[seriesKey]float64{}
	for _, e := range es {
		if e.IDsPerSec <= 0 {
			continue
		}
		k := e.impl + "/" + e.mode
		if value[k] == nil {
			value[k] = map[seriesKey]float64{}
			cats = append(cats, k)
		}
		s := seriesKey{e.unit, e.n}
		value[k][s] = e.IDsPerSec
		if !slices.Contains(series, s) {
			series = append(series, s)
		}
	}
	return cats, series, value
}

// categoryOrder is the place of workload k in categoryNames, after them
// all if it is not there.
func categoryOrder(k string) int {
	for i, c := range categoryNames {
		if c.key == k {
			return i
		}
	}
	return len(categoryNames)
}

// newIDsPlot returns the plot of ids/s, without its bars: its title (with
// the machine), log scale, legend and grid.
func newIDsPlot(rep *Report) *plot.Plot {
	p := plot.New()
	// The machine goes in the title: an X axis label is mispositioned on
	// a log scale by plot's layout, which then squeezes the plot.
	p.Title.Text = fmt.Sprintf("ids per second, ids as strings, median of %d runs (log scale; more is better)\n", rep.Count) +
		fmt.Sprintf("%s, %d cores, %s, counter file in %s (%s), -benchtime %s",
			rep.Machine.CPU, rep.Machine.Cores, rep.Machine.Go, rep.Machine.TempDir, fsType(rep.Machine.TempFS), rep.Benchtime)
	p.Title.TextStyle.Font.Size = vg.Points(12)
	p.Title.Padding = vg.Points(8)
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = powersOfTen{}
	p.Legend.Top = true
	p.Legend.Left = false
	p.Legend.YOffs = -vg.Points(4)
	p.Legend.XOffs = -vg.Points(4)
	p.Legend.TextStyle.Font.Size = vg.Points(11)

	grid := plotter.NewGrid()
	grid.Horizontal.Width = 0
	grid.Vertical.Color = color.Gray{0xdd}
	p.Add(grid)
	return p
}

// addIDBars adds to p one series of bars per series key, with its legend,
// and returns the lowest and highest values drawn.
func addIDBars(p *plot.Plot, cats []string, series []seriesKey, value map[string]map[seriesKey]float64) (lo, hi float64) {
	// Each row holds the bars of one workload, one per series it has,
	// next to each other and centred on the row.
	maxK := 0
	for _, k := range cats {
		maxK = max(maxK, len(value[k]))
	}
	h := 0.84 / float64(maxK) // of a row's height
	lo, hi = math.Inf(1), math.Inf(-1)
	all := make([]*logBars, len(series))
	for si := range series {
		all[si] = &logBars{color: seriesColors[si%len(seriesColors)], thickness: h * 0.86, handler: p.TextHandler}
	}
	for ci, k := range cats {
		row := float64(len(cats) - 1 - ci) // row 0 at the top
		j, n := 0, len(value[k])
		for si, s := range series {
			v, ok := value[k][s]
			if !ok {
				continue
			}
			lo, hi = math.Min(lo, v), math.Max(hi, v)
			all[si].bars = append(all[si].bars, bar{v: v, y: row + (float64(n-1)/2-float64(j))*h})
			j++
		}
	}
	for si, s := range series {
		p.Add(all[si])
		p.Legend.Add(seriesLabel(s.unit, s.n), all[si])
	}
	return lo, hi
}

// categoryLabels returns the display names of the workloads cats, bottom
// row first (the first of cats is the top row).
func categoryLabels(cats []string) []string {
	labels := make([]string, len(cats))
	for ci, k := range cats {
		label := k
		for _, c := range categoryNames {
			if c.key == k {
				label = c.label
			}
		}
		labels[len(cats)-1-ci] = label
	}
	return labels
}

// seriesLabel names a series in the legend: "1 caller", "8 callers
// (goroutines)", "4 processes, one counter file".
func seriesLabel(unit byte, n int) string {
	switch {
	case unit == 'c' && n == 1:
		return "1 caller"
	case unit == 'c':
		return fmt.Sprintf("%d callers (goroutines)", n)
	case unit == 'p':
		return fmt.Sprintf("%d processes, one counter file", n)
	}
	return fmt.Sprintf("%c%d", unit, n)
}

type bar struct{ v, y float64 }

// logBars is a series of horizontal bars that start at the left edge of
// the plot area, so that they work on a log scale (plotter.BarChart starts
// its bars at 0), each labelled with its value.
type logBars struct {
	bars      []bar
	color     color.Color
	thickness float64 // in Y units
	handler   text.Handler
}

func (b *logBars) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	sty := text.Style{
		Color:   color.Gray{0x20},
		Font:    font.From(plot.DefaultFont, vg.Points(9)),
		XAlign:  draw.XLeft,
		YAlign:  draw.YCenter,
		Handler: b.handler,
	}
	for _, br := range b.bars {
		x0, x1 := c.Min.X, trX(br.v)
		y0, y1 := trY(br.y-b.thickness/2), trY(br.y+b.thickness/2)
		c.FillPolygon(b.color, c.ClipPolygonXY([]vg.Point{{X: x0, Y: y0}, {X: x0, Y: y1}, {X: x1, Y: y1}, {X: x1, Y: y0}}))
		c.FillText(sty, vg.Point{X: x1 + vg.Points(3), Y: trY(br.y)}, short(br.v))
	}
}

func (b *logBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = math.Inf(1), math.Inf(-1)
	ymin, ymax = math.Inf(1), math.Inf(-1)
	for _, br := range b.bars {
		xmin, xmax = math.Min(xmin, br.v), math.Max(xmax, br.v)
		ymin, ymax = math.Min(ymin, br.y), math.Max(ymax, br.y)
	}
	return
}

func (b *logBars) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(b.color, []vg.Point{
		{X: c.Min.X, Y: c.Min.Y}, {X: c.Min.X, Y: c.Max.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Max.X, Y: c.Min.Y},
	})
}

// short formats v with 3 significant digits and a k, M or G suffix.
func short(v float64) string {
	for _, u := range []struct {
		s string
		f float64
	}{{"G", 1e9}, {"M", 1e6}, {"k", 1e3}} {
		if v >= u.f {
			return strconv.FormatFloat(v/u.f, 'f', digits(v/u.f), 64) + u.s
		}
	}
	return strconv.FormatFloat(v, 'f', digits(v), 64)
}

func digits(v float64) int {
	switch {
	case v >= 100:
		return 0
	case v >= 10:
		return 1
	}
	return 2
}

// powersOfTen labels each power of ten (1k, 10k, …) and puts minor ticks
// at 2..9 times it.
type powersOfTen struct{}

func (powersOfTen) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi*1.0001; e++ {
		p := math.Pow(10, e)
		ts = append(ts, plot.Tick{Value: p, Label: tickLabel(p)})
		for m := 2.0; m <= 9; m++ {
			if v := m * p; v >= lo && v <= hi {
				ts = append(ts, plot.Tick{Value: v})
			}
		}
	}
	return ts
}

func tickLabel(p float64) string {
	for _, u := range []struct {
		s string
		f float64
	}{{"G", 1e9}, {"M", 1e6}, {"k", 1e3}} {
		if p >= u.f {
			return strconv.FormatFloat(p/u.f, 'f', -1, 64) + u.s
		}
	}
	return strconv.FormatFloat(p, 'f', -1, 64)
}

// fsType is the first word of Machine.TempFS ("ext4 (/dev/vda, …)").
func fsType(s string) string {
	if i := strings.IndexByte(s, ' '); i > 0 {
		return s[:i]
	}
	return s
}
