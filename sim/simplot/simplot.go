// Package simplot draws a sim.Result as SVG plots with gonum/plot: what
// each algorithm admitted and rejected over time, what it had left, and,
// for several instances, the sum of the local limiters against the shared
// one. It is the one package of sluice that imports gonum.org/v1/plot.
//
// The SVG is deterministic: the same Result gives the same bytes (no font
// is embedded, nothing is random or timed).
package simplot

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/sluicehq/sluice/sim"
)

// Size of every plot.
const (
	width  = 16 * vg.Centimeter
	height = 9 * vg.Centimeter
)

// Files are the plots Write draws, by file name: admitted.svg,
// rejected.svg and remaining.svg always, instances.svg when the Result has
// more than one instance.
func Files(r *sim.Result) []string {
	files := []string{"admitted.svg", "rejected.svg", "remaining.svg"}
	if r.Config.Instances > 1 {
		files = append(files, "instances.svg")
	}
	return files
}

// Write draws r's plots (Files) into dir, which must exist. An error names
// the plot; files written before it stay.
func Write(dir string, r *sim.Result) error {
	for _, name := range Files(r) {
		b, err := Draw(r, name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return fmt.Errorf("simplot: %w", err)
		}
	}
	return nil
}

// series is one line of a plot.
type series struct {
	name string
	xy   plotter.XYs
}

// Draw returns the SVG of r's plot name (one of Files).
func Draw(r *sim.Result, name string) ([]byte, error) {
	if !slices.Contains(Files(r), name) {
		return nil, fmt.Errorf("simplot: no plot %q (want one of %v)", name, Files(r))
	}
	bin := fmt.Sprintf("per %v", r.Bin)
	var title, ylabel string
	var lines []series
	shared := func(f func(run *sim.Run) []float64) {
		for i := range r.Runs {
			if run := &r.Runs[i]; run.Local == 0 {
				lines = append(lines, series{run.Name(), xys(r, f(run))})
			}
		}
	}
	switch name {
	case "admitted.svg":
		title, ylabel = "admitted", "requests admitted "+bin
		shared(func(run *sim.Run) []float64 { a, _ := r.Bins(run); return a })
	case "rejected.svg":
		title, ylabel = "rejected", "requests rejected "+bin
		shared(func(run *sim.Run) []float64 { _, b := r.Bins(run); return b })
	case "remaining.svg":
		title, ylabel = "remaining (tokens or quota left, Peek)", "remaining cost"
		shared(func(run *sim.Run) []float64 { return run.Remaining })
	case "instances.svg":
		title, ylabel = fmt.Sprintf("%d local limiters against one shared", r.Config.Instances), "requests admitted "+bin
		for i := range r.Runs {
			a, _ := r.Bins(&r.Runs[i])
			lines = append(lines, series{r.Runs[i].Name(), xys(r, a)})
		}
	}

	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: %s", r.Trace.Name, title)
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	for i, s := range lines {
		l, err := plotter.NewLine(s.xy)
		if err != nil {
			return nil, fmt.Errorf("simplot: %s: %s: %w", name, s.name, err)
		}
		if name != "remaining.svg" {
			l.StepStyle = plotter.PostStep
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		l.Width = vg.Points(1.2)
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	wt, err := p.WriterTo(width, height, "svg")
	if err != nil {
		return nil, fmt.Errorf("simplot: %s: %w", name, err)
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("simplot: %s: %w", name, err)
	}
	return buf.Bytes(), nil
}

// xys pairs ys with the Result's sample instants, in seconds.
func xys(r *sim.Result, ys []float64) plotter.XYs {
	xy := make(plotter.XYs, len(ys))
	for i, y := range ys {
		xy[i].X, xy[i].Y = r.Samples[i].Seconds(), y
	}
	return xy
}
