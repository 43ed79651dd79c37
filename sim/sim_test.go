package sim

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

var buckets = []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA}

func csvTrace(t *testing.T, text string) Trace {
	t.Helper()
	tr, err := ParseCSV(strings.NewReader(text), "test.csv", 1)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func replay(t *testing.T, tr Trace, c Config) *Result {
	t.Helper()
	r, err := Replay(tr, c)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func decisions(run Run) string {
	var b strings.Builder
	for _, ok := range run.Allowed {
		b.WriteByte("-A"[btoi(ok)])
	}
	return b.String()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// The seed's first exercise: B=8, r=1/s — eight calls at zero drain the
// bucket (a ninth is refused); three seconds later exactly three pass.
func TestExerciseEightThenThree(t *testing.T) {
	t.Parallel()
	tr := csvTrace(t, strings.Repeat("0\n", 9)+strings.Repeat("3\n", 5))
	r := replay(t, tr, Config{Algorithms: buckets, Quota: 1, Window: time.Second, Burst: 8})
	for _, run := range r.Runs {
		if got, want := decisions(run), "AAAAAAAA-AAA--"; got != want {
			t.Errorf("%s: %s, want %s", run.Name(), got, want)
		}
	}
}

// The seed's boundary: ten at 00:59.9 and ten at 01:00.1 of 10/min — the
// fixed window admits all twenty, the sliding log rejects ten, and so do
// the others.
func TestExerciseBoundary(t *testing.T) {
	t.Parallel()
	tr, err := Builtin("boundary", 10, time.Minute, 0, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := replay(t, tr, Config{Quota: 10, Window: time.Minute}).WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	want := `trace boundary: 20 requests in 1m0.1s; limit 10 per 1m0s, burst 10 (token_bucket, gcra, leaky_bucket)

       algorithm  offered  admitted  rejected  most in a window  max delay  unlike sliding log
    token_bucket       20        10        10                10         0s                   0
            gcra       20        10        10                10         0s                   0
    fixed_window       20        20         0                20         0s                  10
     sliding_log       20        10        10                10         0s                   0
  sliding_window       20        10        10                10         0s                   0
    leaky_bucket       20        10        10                10        54s                   0
`
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
	if tr.Requests[0].At != 59900*time.Millisecond || tr.Requests[19].At != 60100*time.Millisecond {
		t.Errorf("requests at %v and %v, want 59.9s and 1m0.1s", tr.Requests[0].At, tr.Requests[19].At)
	}
}

// The seed's ten local 100/s limiters let a client through at about
// 1000/s, where one shared limiter holds it to 100/s (plus the burst).
func TestExerciseTenInstances(t *testing.T) {
	t.Parallel()
	tr, err := Builtin("instances", 100, time.Second, 0, 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	r := replay(t, tr, Config{Algorithms: []sluice.Algorithm{sluice.TokenBucket, sluice.SlidingLog}, Quota: 100, Window: time.Second, Instances: 10})
	secs := tr.Requests[len(tr.Requests)-1].At.Seconds() // ≈ 10 s
	want := []struct {
		name               string
		admitted           int
		mostInWindow, rate float64
	}{
		// 10 s at r, plus the burst: B + r·T.
		{"token_bucket", 1099, 199, 110},
		{"token_bucket ×10 local", 10990, 1990, 1099},
		{"sliding_log", 1000, 100, 100},
		{"sliding_log ×10 local", 10000, 1000, 1000},
	}
	if len(r.Runs) != len(want) {
		t.Fatalf("%d runs, want %d", len(r.Runs), len(want))
	}
	for i, w := range want {
		run := r.Runs[i]
		rate := math.Round(float64(run.Admitted) / secs)
		if run.Name() != w.name || run.Admitted != w.admitted || run.MaxInWindow != w.mostInWindow || rate != w.rate {
			t.Errorf("%s: admitted %d (%v/s), most in a window %v; want %s %d (%v/s), %v", run.Name(), run.Admitted, rate, run.MaxInWindow, w.name, w.admitted, w.rate, w.mostInWindow)
		}
	}
}

// The seed's fractional cost 2.5: a bucket of 10 takes four at once; the
// refill of 1/s makes room for the next one after 2.5 s, not before. The
// sliding log counts whole units: there is no exact reference, and asking
// for it is an error naming the request.
func TestExerciseFractionalCost(t *testing.T) {
	t.Parallel()
	tr := csvTrace(t, "0,2.5\n0,2.5\n0,2.5\n0,2.5\n0,2.5\n1,2.5\n2.4,2.5\n2.5,2.5\n")
	r := replay(t, tr, Config{Algorithms: buckets, Quota: 1, Window: time.Second, Burst: 10})
	for _, run := range r.Runs {
		if got, want := decisions(run), "AAAA---A"; got != want || run.Differ != -1 || run.MaxInWindow != 10 {
			t.Errorf("%s: %s, differ %d, most in a window %v; want %s, -1, 10", run.Name(), got, run.Differ, run.MaxInWindow, want)
		}
	}
	_, err := Replay(tr, Config{Algorithms: []sluice.Algorithm{sluice.SlidingLog}, Quota: 1, Window: time.Second})
	if !errors.Is(err, sluice.ErrInvalidCost) || !strings.Contains(err.Error(), "sliding_log: request 1 (at 0s, cost 2.5)") {
		t.Errorf("sliding_log with cost 2.5: %v, want ErrInvalidCost naming request 1", err)
	}
}

// A long idle never refills past B: after ten windows of nothing, the
// second burst gets exactly B, and Peek never reads more than B.
func TestExerciseLongIdle(t *testing.T) {
	t.Parallel()
	const burst = 8
	tr, err := Builtin("burst-then-idle", 1, time.Second, burst, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	r := replay(t, tr, Config{Algorithms: []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.LeakyBucket}, Quota: 1, Window: time.Second, Burst: burst})
	want := strings.Repeat("A", burst) + strings.Repeat("-", burst)
	for _, run := range r.Runs {
		if got := decisions(run); got != want+want {
			t.Errorf("%s: %s, want %s", run.Name(), got, want+want)
		}
		// Samples every 100 ms: full from 8 s (80) until the second burst
		// at 10 s (100, read before it), never above.
		full := slices.Repeat([]float64{burst}, 21)
		if len(run.Remaining) != len(r.Samples) || slices.Max(run.Remaining) != burst || !slices.Equal(run.Remaining[80:101], full) {
			t.Errorf("%s: remaining %v: want %d samples, %d from 8 s to 10 s and never more", run.Name(), run.Remaining, len(r.Samples), burst)
		}
	}
}

// The adversary: each algorithm's most in one window, where only the
// sliding log holds to the quota.
func TestAdversarial(t *testing.T) {
	t.Parallel()
	tr, err := Builtin("adversarial", 10, time.Minute, 0, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	r := replay(t, tr, Config{Quota: 10, Window: time.Minute})
	want := map[string]float64{"token_bucket": 19, "gcra": 19, "fixed_window": 20, "sliding_log": 10, "sliding_window": 19, "leaky_bucket": 10}
	for _, run := range r.Runs {
		if run.MaxInWindow != want[run.Name()] {
			t.Errorf("%s: most in a window %v, want %v", run.Name(), run.MaxInWindow, want[run.Name()])
		}
	}
}

// The same trace and config give the same result: the poisson trace is
// seeded.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	var tables [2]string
	for i := range tables {
		tr, err := Builtin("poisson", 10, time.Minute, 0, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(tr.Requests) != 128 {
			t.Errorf("poisson: %d requests, want 128", len(tr.Requests))
		}
		var b strings.Builder
		if err := replay(t, tr, Config{Quota: 10, Window: time.Minute}).WriteTable(&b); err != nil {
			t.Fatal(err)
		}
		tables[i] = b.String()
	}
	if tables[0] != tables[1] {
		t.Errorf("two runs differ:\n%s\n%s", tables[0], tables[1])
	}
}

func TestMaxInWindow(t *testing.T) {
	t.Parallel()
	s := time.Second
	for _, c := range []struct {
		at   []time.Duration
		want float64
	}{
		{nil, 0},
		{[]time.Duration{0, 0, 0}, 3},
		{[]time.Duration{0, s, 2 * s}, 1}, // half open: the one at 1 s is out of [0, 1 s)
		{[]time.Duration{0, s - 1, 2 * s}, 2},
		{[]time.Duration{2 * s, 0, s / 2}, 2}, // unsorted
	} {
		var reqs []Request
		for _, at := range c.at {
			reqs = append(reqs, Request{At: at, Cost: 1})
		}
		if got := maxInWindow(reqs, s); got != c.want {
			t.Errorf("%v: %v, want %v", c.at, got, c.want)
		}
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		csv, says string
	}{
		{"0\nx\n", "test.csv:2: time \"x\""},
		{"seconds,cost\n1\n0.5\n", "test.csv:3: time 0.5 s is before the line before's (1 s)"},
		{"0,1,2\n", "test.csv:1: 3 fields"},
		{"0,-1\n", "test.csv:1: cost \"-1\""},
		{"0,NaN\n", "test.csv:1: cost \"NaN\""},
		{"-1\n", "test.csv:1: time \"-1\""},
		{"# nothing\n\n", "test.csv: no requests"},
		{strings.Repeat("9", 5000), "test.csv:1: longer than 4096 bytes"},
	} {
		_, err := ParseCSV(strings.NewReader(c.csv), "test.csv", 1)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%.20q: %v, want an error saying %q", c.csv, err, c.says)
		}
	}
	if _, err := Builtin("bursty", 10, time.Minute, 0, 1, 1); !errors.Is(err, ErrUnknownTrace) {
		t.Errorf("unknown trace: %v", err)
	}
	// Traces too long for the limit are refused before they are built (a
	// limit of 1e12/s would otherwise allocate until the process dies).
	for _, name := range Traces {
		for _, c := range []struct {
			quota, cost float64
			instances   int
		}{{1e12, 1, 1}, {10, 1e-12, 1}, {1e5, 1, 100000}} {
			if c.instances > 1 && name != "instances" {
				continue // the others do not depend on it
			}
			if _, err := Builtin(name, c.quota, time.Second, 0, c.cost, c.instances); err == nil || !strings.Contains(err.Error(), "more than 1000000 requests") {
				t.Errorf("%s at %v/s, cost %v, %d instances: %v; want refused as too long", name, c.quota, c.cost, c.instances, err)
			}
		}
	}
	tr := csvTrace(t, "0\n")
	for _, c := range []struct {
		c    Config
		says string
	}{
		{Config{Quota: 10, Window: time.Minute, Instances: -1}, "-1 instances"},
		{Config{Algorithms: []sluice.Algorithm{sluice.Concurrency}, Quota: 10, Window: time.Minute}, "concurrency holds slots"},
		{Config{Algorithms: []sluice.Algorithm{sluice.FixedWindow}, Quota: 0, Window: time.Minute}, "fixed_window: sluice: invalid limit \"sim\": quota 0"},
		{Config{Algorithms: []sluice.Algorithm{sluice.TokenBucket}, Quota: 10, Window: time.Minute, Burst: -1}, "burst -1"},
	} {
		if _, err := Replay(tr, c.c); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: %v, want an error saying %q", c.c, err, c.says)
		}
	}
}

func TestParseRate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in     string
		quota  float64
		window time.Duration
		err    string
	}{
		{"10/min", 10, time.Minute, ""},
		{"100/s", 100, time.Second, ""},
		{"2.5/second", 2.5, time.Second, ""},
		{"5/30s", 5, 30 * time.Second, ""},
		{"1000/day", 1000, 24 * time.Hour, ""},
		{"10", 0, 0, "want QUOTA/UNIT"},
		{"ten/min", 0, 0, `quota "ten"`},
		{"0/min", 0, 0, `quota "0"`},
		{"10/fortnight", 0, 0, `unit "fortnight"`},
		{"10/-1s", 0, 0, `unit "-1s"`},
	} {
		q, w, err := ParseRate(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want an error saying %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || q != c.quota || w != c.window {
			t.Errorf("%q: %v per %v, %v; want %v per %v", c.in, q, w, err, c.quota, c.window)
		}
	}
}

// FuzzParseCSV: any input parses or is refused with a *LineError or a
// plain error, never a panic; what parses has times that never decrease
// and positive finite costs.
func FuzzParseCSV(f *testing.F) {
	for _, s := range []string{"0\n1,2\n", "seconds,cost\n0.5,2.5\n", "# c\n\n3\n", "1\n0\n", "x,y,z", "1e9,1e308\n", "0,Inf\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tr, err := ParseCSV(strings.NewReader(s), "fuzz.csv", 1)
		if err != nil {
			return
		}
		for i, q := range tr.Requests {
			if !(q.Cost > 0) || math.IsInf(q.Cost, 0) || q.At < 0 || i > 0 && q.At < tr.Requests[i-1].At {
				t.Fatalf("request %d: %+v", i, q)
			}
		}
	})
}
