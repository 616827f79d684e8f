package pages

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// Charts are drawn on the server as SVG, by the page's template from the geometry worked out
// here: the page loads no script and no library, and its CSP stays as strict as every other
// page's.

// Series is one line of a chart: a value per point in time, NaN where there is none (a gap).
type Series struct {
	Name    string    // a word, for tests and the legend's data-series
	Label   string    // the legend's text, "中文 English"
	Summary string    // shown after the label, e.g. the total over the window
	Values  []float64 // one per point of the chart's times
}

// Chart is a line chart ready for the template.
type Chart struct {
	ID, ZH, EN    string
	Width, Height int
	Left          string // x of the plot's left edge
	YTicks        []ChartTick
	XTicks        []ChartTick
	Lines         []ChartLine
}

// ChartTick is a grid line with its label.
type ChartTick struct {
	At, To, LabelX, LabelY, Label string
	Anchor                        string // the label's text-anchor
}

// Axis is how a chart's y axis reads: its labels, and the least top it has.
type Axis struct {
	Format  func(float64) string
	AtLeast float64
}

// The axes of the operations page: counts never show fractions of a push; latencies start
// at 10 ms.
var (
	CountAxis   = Axis{Format: FormatCount, AtLeast: 1}
	SecondsAxis = Axis{Format: FormatSeconds, AtLeast: 0.01}
)

// ChartLine is a series as drawn: one polyline's points per run of values without a gap.
type ChartLine struct {
	Name, Label, Summary, Class string
	Segments                    []string
}

// Geometry of every chart, in the SVG's own units; the SVG scales to its box.
const (
	chartW, chartH = 640, 220
	padLeft        = 56
	padRight       = 12
	padTop         = 10
	padBottom      = 26
)

// NewChart lays out series over the points in time at (oldest first): the x axis is labelled
// with the times in the zone they carry, the y axis from 0 to a round maximum with y's labels.
func NewChart(id, zh, en string, at []time.Time, y Axis, series ...Series) Chart {
	c := Chart{ID: id, ZH: zh, EN: en, Width: chartW, Height: chartH, Left: num(padLeft)}
	top := 0.0
	for _, s := range series {
		for _, v := range s.Values {
			if !math.IsNaN(v) && v > top {
				top = v
			}
		}
	}
	top = niceCeil(max(top, y.AtLeast))
	plotW, plotH := float64(chartW-padLeft-padRight), float64(chartH-padTop-padBottom)
	x := func(i int) float64 {
		if len(at) < 2 {
			return padLeft
		}
		return padLeft + plotW*float64(i)/float64(len(at)-1)
	}
	yAt := func(v float64) float64 { return padTop + plotH*(1-v/top) }
	for _, v := range []float64{0, top / 2, top} {
		c.YTicks = append(c.YTicks, ChartTick{At: num(yAt(v)), To: num(chartW - padRight), LabelX: num(padLeft - 6),
			LabelY: num(yAt(v) + 4), Label: y.Format(v), Anchor: "end"})
	}
	if n := len(at); n > 0 {
		for k, i := range []int{0, n / 4, n / 2, 3 * n / 4, n - 1} {
			// The first and last labels keep inside the picture.
			anchor := map[int]string{0: "start", 4: "end"}[k]
			if anchor == "" {
				anchor = "middle"
			}
			c.XTicks = append(c.XTicks, ChartTick{At: num(x(i)), LabelY: num(chartH - 8), Label: at[i].Format("15:04"), Anchor: anchor})
		}
	}
	for k, s := range series {
		line := ChartLine{Name: s.Name, Label: s.Label, Summary: s.Summary, Class: "s" + strconv.Itoa(k%4+1)}
		var pts []string
		flush := func() {
			if len(pts) == 1 {
				pts = append(pts, pts[0]) // one point alone: a dot, drawn by the round line cap
			}
			if len(pts) > 0 {
				line.Segments = append(line.Segments, strings.Join(pts, " "))
			}
			pts = nil
		}
		for i, v := range s.Values {
			if i >= len(at) {
				break
			}
			if math.IsNaN(v) {
				flush()
				continue
			}
			pts = append(pts, num(x(i))+","+num(yAt(v)))
		}
		flush()
		c.Lines = append(c.Lines, line)
	}
	return c
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten, so the axis reads well; 1 for an
// empty chart.
func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// FormatCount labels a count axis: whole numbers, thousands as k.
func FormatCount(v float64) string {
	if v >= 10_000 {
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}

// FormatSeconds labels an axis of durations given in seconds: ms below a second, s below two
// minutes, then min.
func FormatSeconds(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 1:
		return strconv.FormatFloat(math.Round(v*1000), 'f', -1, 64) + "ms"
	case v < 120:
		return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) + "s"
	}
	return strconv.FormatFloat(math.Round(v/6)/10, 'f', -1, 64) + "min"
}
