package e2e

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// costChart draws the HRW decision's cost against the number of services,
// natively, in V8 and in wazero, from the medians of BenchmarkRatios' rows
// "HRW <engine> ns/decision, <n> services", on log-log axes, into file (PNG).
func costChart(t *ratioTable, file string) error {
	p := plot.New()
	p.Title.Text = "hashlb: one HRW decision (URLHASH) against the number of services"
	p.X.Label.Text = "services"
	p.Y.Label.Text = "ns per decision (median of the rounds)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	colors := []color.Color{color.RGBA{0, 90, 160, 255}, color.RGBA{200, 80, 0, 255}, color.RGBA{40, 140, 40, 255}}
	for i, engine := range []string{"native", "V8", "wazero"} {
		var xy plotter.XYs
		for _, n := range r1Sizes {
			r := t.index[fmt.Sprintf("HRW %s ns/decision, %d services", engine, n)]
			if r == nil || len(r.vals) == 0 {
				continue
			}
			xy = append(xy, plotter.XY{X: float64(n), Y: median(r.vals)})
		}
		if len(xy) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(xy)
		if err != nil {
			return err
		}
		line.Color, points.Color = colors[i], colors[i]
		points.Shape = draw.CircleGlyph{}
		p.Add(line, points)
		p.Legend.Add(engine, line, points)
	}
	return p.Save(7*vg.Inch, 4.5*vg.Inch, file)
}
