package bench

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	_ "gonum.org/v1/plot/vg/vgimg" // the png format
	_ "gonum.org/v1/plot/vg/vgsvg" // the svg format
)

// plotColors tells the targets apart.
var plotColors = []color.RGBA{
	{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

// WritePlotFile draws throughput and p99 latency against workers, one
// line per target, into path; the format follows the extension (.svg or
// .png).
func WritePlotFile(path string, rs []Result) error {
	format, err := plotFormat(path)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(WritePlot(f, format, rs), f.Close())
}

// plotFormat is the format of a plot file, from its extension.
func plotFormat(path string) (string, error) {
	format := strings.ToLower(strings.TrimPrefix(filepath.Ext(path), "."))
	if format != "svg" && format != "png" {
		return "", fmt.Errorf("bench: --plot %q: want a .svg or .png file", path)
	}
	return format, nil
}

// describeRun names what a sweep measured, for a plot's titles: "mode
// lock, closed loop" or "mode sem, open loop at 5000 ops/s".
func describeRun(r Result) string {
	d := "mode " + string(r.Mode)
	if r.Rate > 0 {
		return d + fmt.Sprintf(", open loop at %g ops/s", r.Rate)
	}
	return d + ", closed loop"
}

// WritePlot draws the plot of WritePlotFile to w in format "svg" or "png".
func WritePlot(w io.Writer, format string, rs []Result) error {
	if len(rs) == 0 {
		return fmt.Errorf("bench: nothing to plot")
	}
	desc, logX := describeRun(rs[0]), logWorkers(rs)
	tp := newPlot("Throughput, "+desc, "ops/s", logX)
	lat := newPlot("p99 latency, "+desc, "ms", logX)

	for i, name := range targetNames(rs) {
		var tpXY, latXY plotter.XYs
		for _, r := range rs {
			if r.Target.Name == name {
				tpXY = append(tpXY, plotter.XY{X: float64(r.Workers), Y: r.Throughput})
				latXY = append(latXY, plotter.XY{X: float64(r.Workers), Y: ms(r.P99)})
			}
		}
		c := plotColors[i%len(plotColors)]
		for _, s := range []struct {
			p   *plot.Plot
			xys plotter.XYs
		}{{tp, tpXY}, {lat, latXY}} {
			line, points, err := plotter.NewLinePoints(s.xys)
			if err != nil {
				return fmt.Errorf("bench: plot: %w", err)
			}
			line.Color, points.Color = c, c
			points.Shape = draw.CircleGlyph{}
			s.p.Add(line, points)
			s.p.Legend.Add(name, line, points)
		}
	}

	canvas, err := draw.NewFormattedCanvas(7*vg.Inch, 8*vg.Inch, format)
	if err != nil {
		return fmt.Errorf("bench: plot: %w", err)
	}
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := plot.Align([][]*plot.Plot{{tp}, {lat}}, tiles, draw.New(canvas))
	tp.Draw(canvases[0][0])
	lat.Draw(canvases[1][0])
	_, err = canvas.WriteTo(w)
	return err
}

// newPlot is an empty plot against workers, on a log axis when logX.
func newPlot(title, yLabel string, logX bool) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "workers"
	p.Y.Label.Text = yLabel
	p.Y.Min = 0
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	if logX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	return p
}

// logWorkers reports whether the worker counts span enough to want a log
// axis (all positive and at least a factor 20 apart).
func logWorkers(rs []Result) bool {
	lo, hi := rs[0].Workers, rs[0].Workers
	for _, r := range rs {
		lo, hi = min(lo, r.Workers), max(hi, r.Workers)
	}
	return lo > 0 && hi >= 20*lo
}

// targetNames lists the targets of rs in first-seen order.
func targetNames(rs []Result) []string {
	var names []string
	for _, r := range rs {
		if !slices.Contains(names, r.Target.Name) {
			names = append(names, r.Target.Name)
		}
	}
	return names
}
