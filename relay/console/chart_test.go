package console

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/relay/httpapi"
)

func TestNiceCeil(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want float64 }{
		{0, 1}, {-3, 1}, {0.3, 0.5}, {1, 1}, {1.2, 2}, {2, 2}, {2.1, 2.5}, {3, 5}, {7, 10}, {10, 10}, {11, 20}, {48, 50}, {50, 50}, {51, 100}, {240, 250},
	} {
		if got := niceCeil(c.in); got != c.want {
			t.Errorf("niceCeil(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestChart(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	limit := func(v float64) *float64 { return &v }
	at := func(ago time.Duration, rate float64, lim *float64) httpapi.Sample {
		return httpapi.Sample{At: now.Add(-ago), EffectiveRate: rate, Limit: lim}
	}
	cases := []struct {
		name            string
		samples         []httpapi.Sample
		rateRuns        int
		limitRuns       int
		top             string
		shown           int
		labelHas        string
		firstRatePoints string
	}{
		{name: "no samples", top: "0/s", labelHas: "No rate samples yet"},
		{name: "older than ten minutes are left out", samples: []httpapi.Sample{at(11*time.Minute, 5, limit(10))}, top: "0/s", labelHas: "No rate samples yet"},
		{
			name:    "one run against a limit",
			samples: []httpapi.Sample{at(10*time.Second, 0, limit(50)), at(5*time.Second, 25, limit(50)), at(0, 50, limit(50))},
			// x: 320 × (1 − ago/10 min); y: 70 at 0, 43 at 25, 16 at 50.
			rateRuns: 1, limitRuns: 1, top: "50/s", shown: 3, labelHas: "now 50/s of 50/s limit, peak 50/s",
			firstRatePoints: "314.7,70.0 317.3,43.0 320.0,16.0",
		},
		{
			name:     "an unknown limit breaks its line, not the rate's",
			samples:  []httpapi.Sample{at(20*time.Second, 1, limit(4)), at(15*time.Second, 1, nil), at(10*time.Second, 3, limit(4)), at(5*time.Second, 3, limit(4))},
			rateRuns: 1, limitRuns: 2, top: "5/s", shown: 4, labelHas: "now 3/s of 4/s limit",
		},
		{
			name:     "a gap in the samples breaks both",
			samples:  []httpapi.Sample{at(5*time.Minute, 1, limit(2)), at(5*time.Minute-5*time.Second, 1, limit(2)), at(time.Minute, 2, limit(2))},
			rateRuns: 2, limitRuns: 2, top: "2/s", shown: 3,
			// the lone last sample is drawn as a dot
		},
		{
			name:     "a rate over the limit scales the chart",
			samples:  []httpapi.Sample{at(5*time.Second, 120, limit(100))},
			rateRuns: 1, limitRuns: 1, top: "200/s", shown: 1, labelHas: "peak 120/s",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := newChart(c.samples, now)
			if len(got.Rate) != c.rateRuns || len(got.Limit) != c.limitRuns || got.Top != c.top || got.Samples != c.shown {
				t.Errorf("runs %d/%d top %s samples %d, want %d/%d %s %d", len(got.Rate), len(got.Limit), got.Top, got.Samples, c.rateRuns, c.limitRuns, c.top, c.shown)
			}
			if !strings.Contains(got.Label, c.labelHas) {
				t.Errorf("label %q lacks %q", got.Label, c.labelHas)
			}
			if c.firstRatePoints != "" && got.Rate[0] != c.firstRatePoints {
				t.Errorf("rate points %q, want %q", got.Rate[0], c.firstRatePoints)
			}
			// Every point is inside the plot.
			for _, run := range append(got.Rate, got.Limit...) {
				pts := strings.Fields(run)
				if len(pts) < 2 {
					t.Errorf("run %q: fewer than two points", run)
				}
				for _, p := range pts {
					xs, ys, _ := strings.Cut(p, ",")
					x, _ := strconv.ParseFloat(xs, 64)
					y, _ := strconv.ParseFloat(ys, 64)
					if x < 0 || x > chartW || y < plotTop || y > plotBottom {
						t.Errorf("point %s outside the plot", p)
					}
				}
			}
		})
	}
}

func TestHuman(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   time.Duration
		want string
	}{
		{0, "0 s"}, {-time.Second, "0 s"}, {850 * time.Millisecond, "850 ms"}, {12500 * time.Millisecond, "12.5 s"},
		{4*time.Minute + 5*time.Second, "4m05s"}, {2*time.Hour + 10*time.Minute, "2h10m"}, {76 * time.Hour, "3d04h"},
	} {
		if got := human(c.in); got != c.want {
			t.Errorf("human(%v) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := eta(nil); got != "—" {
		t.Errorf("an unknown ETA is %q", got)
	}
	if got := shorten("ééé", 2); got != "éé…" {
		t.Errorf("shorten = %q", got)
	}
}
