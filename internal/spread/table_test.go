//go:build spreadtable

package spread

import (
	"flag"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

var flagImg = flag.String("spread.img", "../../docs/img", "directory the charts are written to")

// TestDistributionTable prints the comparison of docs/distribution.md,
// hashlb's HRW against Envoy's ring hash (minimum_ring_size 1024 and 65536)
// and Maglev (65537), on the same 10^6 keys, and writes
// docs/img/distribution-*.png. It is a generator, built only with the tag
// spreadtable:
//
//	go test -tags spreadtable ./internal/spread -run TestDistributionTable -v
func TestDistributionTable(t *testing.T) {
	keys, hashes := testKeys()
	var out strings.Builder
	fmt.Fprintf(&out, "Keys: %d (\"/object/0\" … \"/object/%d\", xxHash64); Go %s, %s/%s, %d CPUs.\n\n",
		len(keys), len(keys)-1, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU())

	// Balance, equal weights.
	out.WriteString("### Balance, equal weights\n\n")
	out.WriteString("| services | algorithm | max/mean | min/mean | RSD |\n|---:|---|---:|---:|---:|\n")
	perService := map[int][][]float64{} // n → per algorithm, load/mean per service
	for _, n := range []int{10, 100, 1000} {
		addrs, weights := hostSet(n)
		for _, alg := range algorithms {
			l := loads(assign(alg.build(t, addrs, weights), keys, hashes), n)
			b := balanceOf(l)
			fmt.Fprintf(&out, "| %d | %s | %.4f | %.4f | %.4f |\n", n, alg.name, b.maxMean, b.minMean, b.rsd)
			mean := float64(len(keys)) / float64(n)
			rel := make([]float64, n)
			for i, v := range l {
				rel[i] = float64(v) / mean
			}
			perService[n] = append(perService[n], rel)
		}
	}

	// Disruption at 10 services.
	out.WriteString("\n### Keys moved, 10 services\n\n")
	out.WriteString("Remove: each of the 10 services removed in turn (mean of moved; worst extra). " +
		"Add: an 11th service (ideal 1/11 = 9.09% of keys). " +
		"Extra = keys moved beyond those that had to (the removed service's keys; the keys the new service owns).\n\n")
	out.WriteString("| algorithm | remove: moved | remove: worst extra | add: moved | add: extra |\n|---|---:|---:|---:|---:|\n")
	for _, alg := range algorithms {
		moved, worstExtra := 0, 0
		for r := range 10 {
			c := removeChurn(t, alg, 10, r, keys, hashes)
			moved += c.moved
			worstExtra = max(worstExtra, c.extra())
		}
		a := addChurn(t, alg, 10, keys, hashes)
		fmt.Fprintf(&out, "| %s | %s | %s | %s | %s |\n", alg.name,
			pct(moved/10, len(keys)), pct(worstExtra, len(keys)), pct(a.moved, len(keys)), pct(a.extra(), len(keys)))
	}

	// Weighted accuracy.
	out.WriteString("\n### Weighted accuracy, 10 services with weights 1..10\n\n")
	out.WriteString("Each service's share of keys against weight/Σweight (Σ = 55).\n\n")
	out.WriteString("| algorithm | worst relative error | at weight |\n|---|---:|---:|\n")
	var weighted [][]float64
	for _, alg := range algorithms {
		worst, at, ratios := weightError(t, alg, 10, keys, hashes)
		weighted = append(weighted, ratios)
		fmt.Fprintf(&out, "| %s | %.2f%% | %d |\n", alg.name, 100*worst, at)
	}
	fmt.Print("\n" + out.String() + "\n")

	if err := os.MkdirAll(*flagImg, 0o755); err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(algorithms))
	for i, a := range algorithms {
		names[i] = a.name
	}
	for _, chart := range []struct {
		file string
		save func(string) error
	}{
		{"distribution-10.png", func(f string) error {
			return barChart(f, "Load per service, 10 services, 10^6 keys", "service", "keys ÷ mean", names, perService[10])
		}},
		{"distribution-100.png", func(f string) error {
			return sortedLines(f, "Load per service, 100 services, 10^6 keys (sorted, heaviest first)", names, perService[100])
		}},
		{"distribution-weighted.png", func(f string) error {
			return barChart(f, "Share ÷ weight/Σweight, weights 1..10, 10^6 keys", "weight", "share ÷ expected", names, weighted)
		}},
	} {
		f := filepath.Join(*flagImg, chart.file)
		if err := chart.save(f); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		t.Logf("wrote %s", f)
	}
}

func pct(n, of int) string { return fmt.Sprintf("%.2f%%", 100*float64(n)/float64(of)) }

// barChart draws one group of bars per x (service or weight 1..len), one bar
// per series. The y axis starts just below the smallest value (bars grow from
// there), so differences of a few percent show.
func barChart(file, title, xlabel, ylabel string, names []string, series [][]float64) error {
	lo := 1.0
	for _, s := range series {
		lo = min(lo, slices.Min(s))
	}
	ymin := math.Floor((lo-0.02)*20) / 20
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	w := vg.Points(9)
	ymax := 1.0
	for i, s := range series {
		v := make(plotter.Values, len(s))
		for j, x := range s {
			v[j] = x - ymin // bars start at ymin; the tick labels add it back
			ymax = max(ymax, x)
		}
		b, err := plotter.NewBarChart(v, w)
		if err != nil {
			return err
		}
		b.LineStyle.Width = 0
		b.Color = plotutil.Color(i)
		b.Offset = w * vg.Length(2*i-len(series)+1) / 2
		p.Add(b)
		p.Legend.Add(names[i], b)
	}
	ideal := plotter.NewFunction(func(float64) float64 { return 1 - ymin })
	ideal.Color = color.Gray{Y: 80}
	ideal.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(ideal)
	p.Legend.Top = true
	p.Y.Min, p.Y.Max = 0, (ymax-ymin)*1.35 // room for the legend above the bars
	p.Y.Tick.Marker = offsetTicks{ymin}
	labels := make([]string, len(series[0]))
	for i := range labels {
		labels[i] = fmt.Sprint(i + 1)
	}
	p.NominalX(labels...)
	return p.Save(vg.Length(len(labels))*vg.Points(float64(len(series))*9+12)+2*vg.Inch, 4*vg.Inch, file)
}

// offsetTicks labels an axis whose values were shifted down by off.
type offsetTicks struct{ off float64 }

func (o offsetTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo+o.off, hi+o.off)
	for i := range ts {
		ts[i].Value -= o.off
	}
	return ts
}

// sortedLines draws each series sorted heaviest first, one line per series.
func sortedLines(file, title string, names []string, series [][]float64) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "services, by load"
	p.Y.Label.Text = "keys ÷ mean"
	for i, s := range series {
		s = slices.Clone(s)
		slices.Sort(s)
		slices.Reverse(s)
		xy := make(plotter.XYs, len(s))
		for j, v := range s {
			xy[j].X, xy[j].Y = float64(j+1), v
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		if i == 0 { // hashlb under the others, wide enough to show where Maglev lies on it
			l.Width = vg.Points(4)
		}
		p.Add(l)
		p.Legend.Add(names[i], l)
	}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p.Save(8*vg.Inch, 4.5*vg.Inch, file)
}
