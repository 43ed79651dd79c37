package console

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/relay/httpapi"
)

// chart is a queue's effective rate against its target's limit over the
// last chartSpan, from the samples of its history, drawn by the template
// as an inline SVG: one polyline per unbroken run of samples.
type chart struct {
	W, H int
	// Rate and Limit are polyline points ("x,y x,y …"), one string per
	// run: a sample more than two intervals after the one before it, or a
	// limit not known, breaks the line.
	Rate, Limit []string
	// Top is the value at the plot's top edge ("50/s"); Samples how many
	// samples are drawn.
	Top     string
	Samples int
	// Label says the chart in words, for the tooltip and screen readers.
	Label string
}

const (
	chartSpan  = 10 * time.Minute
	chartGap   = 10 * time.Second // two sample intervals
	chartW     = 320
	chartH     = 84
	plotTop    = 16 // room for Top's label
	plotBottom = chartH - 14
)

// newChart draws samples (oldest first, as the API gives them) against
// the span that ends at now.
func newChart(samples []httpapi.Sample, now time.Time) chart {
	c := chart{W: chartW, H: chartH}
	from := now.Add(-chartSpan)
	var shown []httpapi.Sample
	for _, s := range samples {
		if !s.At.Before(from) && !s.At.After(now) {
			shown = append(shown, s)
		}
	}
	c.Samples = len(shown)
	if len(shown) == 0 {
		c.Top = "0/s"
		c.Label = "No rate samples yet: the relay takes one every 5 s."
		return c
	}
	peak, limit := 0.0, 0.0
	for _, s := range shown {
		peak = max(peak, s.EffectiveRate)
		if s.Limit != nil {
			limit = max(limit, *s.Limit)
		}
	}
	top := niceCeil(max(peak, limit))
	c.Top = num(top) + "/s"
	x := func(at time.Time) float64 { return float64(chartW) * (1 - now.Sub(at).Seconds()/chartSpan.Seconds()) }
	y := func(v float64) float64 {
		return float64(plotBottom) - min(v/top, 1)*float64(plotBottom-plotTop)
	}
	var rate, lim strings.Builder
	var prev time.Time
	for _, s := range shown {
		broken := !prev.IsZero() && s.At.Sub(prev) > chartGap
		prev = s.At
		if broken {
			c.Rate, c.Limit = flush(c.Rate, &rate), flush(c.Limit, &lim)
		}
		point(&rate, x(s.At), y(s.EffectiveRate))
		if s.Limit == nil {
			c.Limit = flush(c.Limit, &lim)
			continue
		}
		point(&lim, x(s.At), y(*s.Limit))
	}
	c.Rate, c.Limit = flush(c.Rate, &rate), flush(c.Limit, &lim)
	last := shown[len(shown)-1]
	c.Label = "Effective rate against the limit over the last 10 minutes: now " + num(last.EffectiveRate) + "/s of " +
		rateText(last.Limit) + " limit, peak " + num(peak) + "/s."
	return c
}

// point appends "x,y" to a run.
func point(b *strings.Builder, x, y float64) {
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	b.WriteString(strconv.FormatFloat(x, 'f', 1, 64))
	b.WriteByte(',')
	b.WriteString(strconv.FormatFloat(y, 'f', 1, 64))
}

// flush ends a run: a run of one point is drawn as a dot of the same
// point twice, so that a lone sample shows.
func flush(runs []string, b *strings.Builder) []string {
	if b.Len() == 0 {
		return runs
	}
	s := b.String()
	if !strings.Contains(s, " ") {
		s += " " + s
	}
	b.Reset()
	return append(runs, s)
}

// niceCeil is the least of 1, 2, 2.5, 5 × 10ⁿ at or above v; 1 for
// nothing.
func niceCeil(v float64) float64 {
	if !(v > 0) || math.IsInf(v, 0) {
		return 1
	}
	exp := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*exp >= v*(1-1e-12) {
			return m * exp
		}
	}
	return 10 * exp
}
