package pace_test

import (
	"fmt"
	"math"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/pace"
)

// told is what a simulated client knows of its target's limit.
type told int

const (
	toldLimit      told = iota // the limit itself, in Options.Limits; the target sends RateLimit fields
	toldFields                 // nothing; the target sends RateLimit fields
	toldRetryAfter             // nothing; the target sends 429 + Retry-After only
)

// figure is a row of the simulation table of docs/BENCHMARKS.md ("Against a
// target it must obey"): a hidden limit, what the client is told, whom a
// Retry-After holds, and the 2xx and 429 that reached the target while the
// client offered 5 × L for simFor.
type figure struct {
	limit         sluice.Limit
	told          told
	holds         pace.HoldScope
	ok, throttled int
	by            string // the test that runs the row, when it is not TestSimulationMatrix
}

// The tolerance of a figure: the 2xx within 1 % of the recorded count, the
// 429 within 3 or 15 % of it, whichever is more. The simulation runs on
// testing/synctest's clock, so the figures do not depend on the machine;
// only the jitter of the retries and the order of the goroutines woken at
// one instant are random, and they have not moved a figure over runs.
const (
	okTolerance        = 0.01
	throttledTolerance = 0.15
	throttledSlack     = 3
)

var (
	burst10 = sluice.Limit{Name: "a", Quota: 50, Window: time.Second, Burst: 10}
	fast    = sluice.Limit{Name: "a", Quota: 500, Window: time.Second}
	slow    = sluice.Limit{Name: "a", Quota: 5, Window: time.Second}
	gcra    = sluice.Limit{Name: "a", Quota: 50, Window: time.Second, Algorithm: sluice.GCRA, Burst: 10}
	fixed   = sluice.Limit{Name: "a", Quota: 50, Window: time.Second, Algorithm: sluice.FixedWindow}
	sliding = sluice.Limit{Name: "a", Quota: 50, Window: time.Second, Algorithm: sluice.SlidingWindow}
)

// figures is the table of docs/BENCHMARKS.md, row by row. Change a figure
// here and there together, from the output of make sim.
var figures = []figure{
	{limit: hidden, told: toldLimit, ok: 3000, throttled: 0, by: "TestConfiguredLimit"},
	{limit: hidden, told: toldFields, ok: 3001, throttled: 0, by: "TestLearnsFromRateLimitFields"},
	{limit: hidden, told: toldRetryAfter, ok: 2980, throttled: 18, by: "TestLearnsFromRetryAfterOnly"},
	{limit: hidden, told: toldRetryAfter, holds: pace.HoldRequest, ok: 3027, throttled: 23},
	{limit: burst10, told: toldFields, ok: 3001, throttled: 0},
	{limit: burst10, told: toldRetryAfter, ok: 2158, throttled: 18},
	{limit: burst10, told: toldRetryAfter, holds: pace.HoldRequest, ok: 2994, throttled: 20},
	{limit: fast, told: toldFields, ok: 30001, throttled: 0},
	{limit: fast, told: toldRetryAfter, ok: 29665, throttled: 14},
	{limit: fast, told: toldRetryAfter, holds: pace.HoldRequest, ok: 30126, throttled: 17},
	{limit: slow, told: toldFields, ok: 301, throttled: 0},
	{limit: slow, told: toldRetryAfter, ok: 285, throttled: 26},
	{limit: slow, told: toldRetryAfter, holds: pace.HoldRequest, ok: 303, throttled: 40},
	{limit: gcra, told: toldFields, ok: 3001, throttled: 0},
	{limit: gcra, told: toldRetryAfter, ok: 2158, throttled: 18},
	{limit: gcra, told: toldRetryAfter, holds: pace.HoldRequest, ok: 2994, throttled: 20},
	{limit: fixed, told: toldFields, ok: 2944, throttled: 1},
	{limit: fixed, told: toldRetryAfter, ok: 2280, throttled: 20},
	{limit: fixed, told: toldRetryAfter, holds: pace.HoldRequest, ok: 1690, throttled: 52},
	{limit: sliding, told: toldFields, ok: 2109, throttled: 15},
	{limit: sliding, told: toldRetryAfter, ok: 2048, throttled: 21},
	{limit: sliding, told: toldRetryAfter, holds: pace.HoldRequest, ok: 2554, throttled: 31},
}

func (f figure) String() string {
	s := f.limit.String() + ", "
	switch f.told {
	case toldLimit:
		s += "the limit configured"
	case toldFields:
		s += "RateLimit fields"
	case toldRetryAfter:
		s += "429 + Retry-After only"
	}
	if f.holds == pace.HoldRequest {
		s += ", HoldRequest"
	}
	return s
}

// simulate runs f's simulation.
func (f figure) simulate(t *testing.T) (simResult, *target) {
	t.Helper()
	var opts pace.Options
	fl := rateLimitFields
	switch f.told {
	case toldLimit:
		opts.Limits = []sluice.Limit{f.limit}
	case toldRetryAfter:
		fl = retryAfterOnly
	}
	return simulateWith(t, f.limit, fl, opts, pace.RetryOptions{Holds: f.holds}, simFor)
}

// errorer is the part of testing.TB that check uses.
type errorer interface {
	Helper()
	Errorf(format string, args ...any)
}

// check fails t unless res is within the tolerance of f's figures.
func (f figure) check(t errorer, res simResult) {
	t.Helper()
	if d := math.Abs(float64(res.ok - f.ok)); d > okTolerance*float64(f.ok) {
		t.Errorf("%v: %d × 2xx, docs/BENCHMARKS.md records %d (±%.0f %%)", f, res.ok, f.ok, 100*okTolerance)
	}
	if d := math.Abs(float64(res.throttled - f.throttled)); d > max(throttledSlack, throttledTolerance*float64(f.throttled)) {
		t.Errorf("%v: %d × 429, docs/BENCHMARKS.md records %d (±%d or ±%.0f %%)", f, res.throttled, f.throttled, throttledSlack, 100*throttledTolerance)
	}
}

// checkFigures checks res against the row the test named by runs.
func checkFigures(t *testing.T, by string, res simResult) {
	t.Helper()
	for _, f := range figures {
		if f.by == by {
			f.check(t, res)
			return
		}
	}
	t.Fatalf("no row of figures is run by %s", by)
}

// heavy is the offered rate (per second) above which a row is left out under
// the race detector or -short, unless SLUICE_SIM is set: with 12,500
// requests waiting at once, the detector makes a 500/s row 10 to 15 times
// slower (45 s instead of 3–5 s on 2 cores).
const heavy = 1000

// TestSimulationMatrix runs every row of docs/BENCHMARKS.md's simulation
// table that another test does not (figure.by) and checks its 2xx and 429
// against the recorded figures. Under the race detector or -short the 500/s
// rows are skipped (see heavy); make sim runs them.
func TestSimulationMatrix(t *testing.T) {
	for _, f := range figures {
		t.Run(f.String(), func(t *testing.T) {
			if f.by != "" {
				t.Skipf("run by %s", f.by)
			}
			if offered := 5 * f.limit.Quota / f.limit.Window.Seconds(); offered > heavy && (raceEnabled || testing.Short()) && os.Getenv("SLUICE_SIM") == "" {
				t.Skipf("%.0f requests/s offered: too slow under -race or -short; make sim runs it (or SLUICE_SIM=1)", offered)
			}
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				res, _ := f.simulate(t)
				t.Logf("%v, 5×L offered for %v: %v", f, simFor, res)
				f.check(t, res)
			})
		})
	}
}

// TestFigureCheckFails is the negative control of the figures' check: a row
// off by more than the tolerance fails it, a row within it passes.
func TestFigureCheckFails(t *testing.T) {
	t.Parallel()
	row := figure{limit: burst10, told: toldRetryAfter, ok: 2152, throttled: 22}
	for _, c := range []struct {
		ok, throttled int
		fails         bool
	}{
		{2152, 22, false},
		{2152 + 21, 22 - 3, false},
		{2152 + 22, 22, true}, // 2xx off by 1.02 %
		{2152 - 22, 22, true},
		{2152, 22 + 4, true}, // 429 off by 4 (18 %)
		{2152, 22 - 4, true},
	} {
		var rec failures
		row.check(&rec, simResult{ok: c.ok, throttled: c.throttled})
		if got := len(rec) > 0; got != c.fails {
			t.Errorf("%d × 2xx, %d × 429 against %d, %d: failed %v %q, want failed %v", c.ok, c.throttled, row.ok, row.throttled, got, rec, c.fails)
		}
	}
}

// failures records what check reports.
type failures []string

func (*failures) Helper() {}

func (f *failures) Errorf(format string, args ...any) {
	*f = append(*f, fmt.Sprintf(format, args...))
}
