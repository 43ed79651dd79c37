package algo

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// newState returns a zero state of the algorithm.
func newState(a sluice.Algorithm) State {
	switch a {
	case sluice.TokenBucket:
		return new(TokenBucket)
	case sluice.GCRA:
		return new(GCRA)
	case sluice.FixedWindow:
		return new(FixedWindow)
	case sluice.SlidingLog:
		return new(SlidingLog)
	case sluice.SlidingWindow:
		return new(SlidingWindow)
	case sluice.LeakyBucket:
		return new(LeakyBucket)
	case sluice.Concurrency:
		return new(Concurrency)
	}
	panic(fmt.Sprintf("no state for %v", a))
}

// step is one row of a timeline: at instant at (from the epoch), n calls
// (default 1) of cost (default 1); the last one must answer exactly ok/rem/retry/reset/delay/err, the
// others only ok.
type step struct {
	at    time.Duration
	cost  float64
	n     int
	ok    bool
	rem   float64
	retry time.Duration
	reset time.Duration
	delay time.Duration
	err   error
}

// epoch is 2026-01-01T00:00:00Z, aligned to every window used here.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

func runTimeline(t *testing.T, l sluice.Limit, steps []step) {
	t.Helper()
	p, err := Compile(l)
	if err != nil {
		t.Fatal(err)
	}
	s := newState(l.Algorithm)
	s.Init(p, epoch)
	ticket := uint64(0)
	for i, st := range steps {
		n := max(st.n, 1)
		if st.cost == 0 {
			st.cost = 1
		}
		cost, err := p.Cost(st.cost)
		if err != nil {
			t.Fatalf("step %d: cost %v: %v", i, st.cost, err)
		}
		for j := range n {
			ticket++
			d, err := s.Step(p, Call{Now: epoch + int64(st.at), Cost: cost, Ticket: ticket}, true)
			if !errors.Is(err, st.err) || (err != nil && st.err == nil) {
				t.Fatalf("step %d call %d at %v: err %v, want %v", i, j, st.at, err, st.err)
			}
			if d.Allowed != st.ok {
				t.Fatalf("step %d call %d at %v cost %v: allowed %v, want %v", i, j, st.at, st.cost, d.Allowed, st.ok)
			}
			if j < n-1 {
				continue
			}
			got := [4]any{d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay}
			want := [4]any{st.rem, st.retry, st.reset, st.delay}
			if got != want {
				t.Errorf("step %d at %v cost %v: (remaining, retry, reset, delay) = %v, want %v", i, st.at, st.cost, got, want)
			}
		}
	}
}

const (
	ms = time.Millisecond
	s1 = time.Second
)

// The seed's worked examples, on the pure token bucket.
func TestTokenBucketSeed(t *testing.T) {
	t.Parallel()
	// B=5, r=2/s: five at t=0 pass, the sixth fails; at t=0.5 s one token
	// has returned: one passes, the next fails.
	runTimeline(t, sluice.Limit{Name: "seed", Quota: 2, Window: s1, Burst: 5}, []step{
		{at: 0, n: 4, ok: true, rem: 1, reset: 2 * s1},
		{at: 0, ok: true, rem: 0, reset: 2500 * ms},
		{at: 0, ok: false, rem: 0, retry: 500 * ms, reset: 2500 * ms},
		{at: 500 * ms, ok: true, rem: 0, reset: 2500 * ms},
		{at: 500 * ms, ok: false, rem: 0, retry: 500 * ms, reset: 2500 * ms},
	})
	// B=8, r=1/s: eight at t=0 exhaust the bucket; at t=3 s exactly three
	// unit requests pass.
	runTimeline(t, sluice.Limit{Name: "seed", Quota: 1, Window: s1, Burst: 8}, []step{
		{at: 0, n: 8, ok: true, rem: 0, reset: 8 * s1},
		{at: 0, ok: false, rem: 0, retry: s1, reset: 8 * s1},
		{at: 3 * s1, n: 3, ok: true, rem: 0, reset: 8 * s1},
		{at: 3 * s1, ok: false, rem: 0, retry: s1, reset: 8 * s1},
	})
}

func TestTokenBucketIdleNeverRefillsPastBurst(t *testing.T) {
	t.Parallel()
	year := 365 * 24 * time.Hour
	runTimeline(t, sluice.Limit{Name: "idle", Quota: 2, Window: s1, Burst: 5}, []step{
		{at: 0, n: 5, ok: true, rem: 0, reset: 2500 * ms},
		{at: year, ok: true, rem: 4, reset: 500 * ms},
		{at: year, n: 4, ok: true, rem: 0, reset: 2500 * ms},
		{at: year, ok: false, rem: 0, retry: 500 * ms, reset: 2500 * ms},
	})
}

func TestTokenBucketFractionalCost(t *testing.T) {
	t.Parallel()
	runTimeline(t, sluice.Limit{Name: "frac", Quota: 2, Window: s1, Burst: 5}, []step{
		{at: 0, cost: 2.5, ok: true, rem: 2.5, reset: 1250 * ms},
		{at: 0, cost: 2.5, ok: true, rem: 0, reset: 2500 * ms},
		{at: 0, cost: 2.5, ok: false, rem: 0, retry: 1250 * ms, reset: 2500 * ms},
		{at: 1 * s1, cost: 2.5, ok: false, rem: 2, retry: 250 * ms, reset: 1500 * ms},
		{at: 1250 * ms, cost: 2.5, ok: true, rem: 0, reset: 2500 * ms},
		{at: 1250 * ms, cost: 0.1, ok: false, rem: 0, retry: 50 * ms, reset: 2500 * ms},
	})
}

func TestCostAboveCapacityIsNever(t *testing.T) {
	t.Parallel()
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			l := limitFor(alg, 5, s1)
			runTimeline(t, l, []step{
				{at: 0, cost: 6, ok: false, rem: 5, retry: sluice.Never, err: sluice.ErrCostExceedsLimit},
				{at: 0, cost: 5, ok: true, rem: 0, reset: resetFull(alg)},
			})
		})
	}
}

// resetFull is how long a full spend of 5 per second takes to clear.
func resetFull(alg sluice.Algorithm) time.Duration {
	switch alg {
	case sluice.FixedWindow, sluice.SlidingLog, sluice.Concurrency:
		return s1
	case sluice.SlidingWindow:
		return 2 * s1
	}
	return s1
}

var algorithms = []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow, sluice.LeakyBucket, sluice.Concurrency}

func limitFor(alg sluice.Algorithm, quota float64, w time.Duration) sluice.Limit {
	return sluice.Limit{Name: "t", Algorithm: alg, Quota: quota, Window: w}
}

// Time moving backwards is an error for the seed's token bucket and for the
// algorithms that remember when they were last called; GCRA and Concurrency
// answer it conservatively instead.
func TestClockBackwards(t *testing.T) {
	t.Parallel()
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			l := limitFor(alg, 5, s1)
			p, _ := Compile(l)
			s := newState(alg)
			s.Init(p, epoch)
			if _, err := s.Step(p, Call{Now: epoch + int64(2*s1), Cost: 1e6, Ticket: 1}, true); err != nil {
				t.Fatal(err)
			}
			d, err := s.Step(p, Call{Now: epoch + int64(s1), Cost: 1e6, Ticket: 2}, true)
			tolerant := alg == sluice.GCRA || alg == sluice.Concurrency
			if tolerant {
				if err != nil {
					t.Fatalf("err = %v, want a decision", err)
				}
				if s.Floor() != minInstant {
					t.Errorf("Floor = %d, want minInstant", s.Floor())
				}
				return
			}
			if !errors.Is(err, ErrClockBackwards) || d.Allowed {
				t.Fatalf("(allowed, err) = (%v, %v), want (false, ErrClockBackwards)", d.Allowed, err)
			}
			if s.Floor() != epoch+int64(2*s1) && s.Floor() != windowStart(epoch+int64(2*s1), int64(s1)) {
				t.Errorf("Floor = %d, want the last instant or its window", s.Floor())
			}
		})
	}
}

// The seed: a fixed window of 10 per minute admits 10 at 00:59.9 and 10 more
// at 01:00.1, twenty in 200 ms; the sliding log, a true moving count,
// rejects the second ten; the sliding window counter rejects most of them.
func TestWindowBoundarySeed(t *testing.T) {
	t.Parallel()
	at1 := 59900 * ms
	at2 := 60100 * ms
	runTimeline(t, limitFor(sluice.FixedWindow, 10, time.Minute), []step{
		{at: at1, n: 10, ok: true, rem: 0, reset: 100 * ms},
		{at: at1, ok: false, rem: 0, retry: 100 * ms, reset: 100 * ms},
		{at: at2, n: 10, ok: true, rem: 0, reset: 59900 * ms},
		{at: at2, ok: false, rem: 0, retry: 59900 * ms, reset: 59900 * ms},
	})
	runTimeline(t, limitFor(sluice.SlidingLog, 10, time.Minute), []step{
		{at: at1, n: 10, ok: true, rem: 0, reset: time.Minute},
		{at: at2, ok: false, rem: 0, retry: 59800 * ms, reset: 59800 * ms},
		{at: at1 + time.Minute, n: 10, ok: true, rem: 0, reset: time.Minute},
	})
	// At 01:00.1 the previous window (10) still weighs 59.9/60: estimate
	// 9.983 (remaining 0.016666), so no whole request fits until the weight lets one in at
	// 01:06.0 (10 × (60 − e)/60 + 0 + 1 ≤ 10 ⇔ e ≥ 6 s).
	runTimeline(t, limitFor(sluice.SlidingWindow, 10, time.Minute), []step{
		{at: at1, n: 10, ok: true, rem: 0, reset: 60100 * ms},
		{at: at2, ok: false, rem: 0.016666, retry: 5900 * ms, reset: 59900 * ms},
		{at: 66 * s1, ok: true, rem: 0, reset: 114 * s1},
		{at: 66 * s1, ok: false, rem: 0, retry: 6 * s1, reset: 114 * s1},
	})
}

func TestGCRASeed(t *testing.T) {
	t.Parallel()
	runTimeline(t, sluice.Limit{Name: "seed", Algorithm: sluice.GCRA, Quota: 2, Window: s1, Burst: 5}, []step{
		{at: 0, n: 4, ok: true, rem: 1, reset: 2 * s1},
		{at: 0, ok: true, rem: 0, reset: 2500 * ms},
		{at: 0, ok: false, rem: 0, retry: 500 * ms, reset: 2500 * ms},
		{at: 500 * ms, ok: true, rem: 0, reset: 2500 * ms},
		{at: 500 * ms, ok: false, rem: 0, retry: 500 * ms, reset: 2500 * ms},
	})
}

// nginx: rate=2r/s burst=2 delay=1 is a leaky bucket of capacity 3 with a
// delay threshold of 1: the first request runs at once, the second (one
// ahead, within the threshold) too, the third waits for the excess beyond
// the threshold to drain (1 request at 2/s: 500 ms), the fourth is rejected.
func TestLeakyBucketNginxBurstDelay(t *testing.T) {
	t.Parallel()
	runTimeline(t, sluice.Limit{Name: "nginx", Algorithm: sluice.LeakyBucket, Quota: 2, Window: s1, Burst: 3, DelayThreshold: 1}, []step{
		{at: 0, ok: true, rem: 2, reset: 500 * ms},
		{at: 0, ok: true, rem: 1, reset: s1},
		{at: 0, ok: true, rem: 0, reset: 1500 * ms, delay: 500 * ms},
		{at: 0, ok: false, rem: 0, retry: 500 * ms, reset: 1500 * ms},
		{at: 500 * ms, ok: true, rem: 0, reset: 1500 * ms, delay: 500 * ms},
		{at: 2 * s1, ok: true, rem: 2, reset: 500 * ms},
	})
}

func TestConcurrencyExpiryAndRelease(t *testing.T) {
	t.Parallel()
	l := limitFor(sluice.Concurrency, 2, 10*s1)
	p, _ := Compile(l)
	s := new(Concurrency)
	s.Init(p, epoch)
	step := func(at time.Duration, ticket uint64) sluice.Decision {
		d, err := s.Step(p, Call{Now: epoch + int64(at), Cost: 1e6, Ticket: ticket}, true)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := step(0, 1); !d.Allowed || d.Ticket != 1 || d.Remaining != 1 || d.ResetAfter != 10*s1 {
		t.Fatalf("first: %+v", d)
	}
	if d := step(2*s1, 2); !d.Allowed || d.Ticket != 2 || d.Remaining != 0 || d.ResetAfter != 10*s1 {
		t.Fatalf("second: %+v", d)
	}
	if d := step(3*s1, 3); d.Allowed || d.Ticket != 0 || d.RetryAfter != 7*s1 || d.ResetAfter != 9*s1 {
		t.Fatalf("third, full: %+v", d)
	}
	if !s.Release(2) || s.Release(2) {
		t.Fatal("Release(2) twice: want true then false")
	}
	if d := step(3*s1, 4); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after release: %+v", d)
	}
	// Ticket 1 expires at 10 s: a crashed holder's slot comes back.
	if d := step(10*s1, 5); !d.Allowed || d.Remaining != 0 || d.ResetAfter != 10*s1 {
		t.Fatalf("after expiry: %+v", d)
	}
	if s.Release(1) {
		t.Fatal("Release of an expired ticket reported a hold")
	}
}
