package limittest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// Timeline is a conformance table: calls at instants of a fake clock and the
// exact decision each gets.
type Timeline struct {
	Name  string
	Limit sluice.Limit
	Steps []Step
}

// Step is N identical calls (default 1) at At after Epoch, on Key (default
// "k") with Cost (default 1): Allow, or with Charge set sluice.Charger's
// Charge. Every call must be allowed or rejected as Want says; the last one
// must match Want exactly.
type Step struct {
	At     time.Duration
	Key    string
	Cost   float64
	N      int
	Charge bool
	Want   Want
}

// Want is an expected decision. Err, when set, is matched with errors.Is.
type Want struct {
	Allowed    bool
	Remaining  float64
	RetryAfter time.Duration
	ResetAfter time.Duration
	Delay      time.Duration
	Err        error
}

func allow(remaining float64, reset time.Duration) Want {
	return Want{Allowed: true, Remaining: remaining, ResetAfter: reset}
}

func reject(remaining float64, retry, reset time.Duration) Want {
	return Want{Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

func never(remaining float64, reset time.Duration) Want {
	return Want{Remaining: remaining, RetryAfter: sluice.Never, ResetAfter: reset, Err: sluice.ErrCostExceedsLimit}
}

// Check compares a decision with w; the message does not quote the key.
func (w Want) Check(d sluice.Decision, err error) error {
	if w.Err != nil && !errors.Is(err, w.Err) || w.Err == nil && err != nil {
		return fmt.Errorf("err = %v, want %v", err, w.Err)
	}
	got := Want{d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay, w.Err}
	if got != w {
		return fmt.Errorf("decision (allowed %v, remaining %v, retry %v, reset %v, delay %v), want (%v, %v, %v, %v, %v)",
			got.Allowed, got.Remaining, got.RetryAfter, got.ResetAfter, got.Delay,
			w.Allowed, w.Remaining, w.RetryAfter, w.ResetAfter, w.Delay)
	}
	return nil
}

const (
	ms = time.Millisecond
	s1 = time.Second
)

func lim(name string, alg sluice.Algorithm, quota float64, window time.Duration, burst float64) sluice.Limit {
	return sluice.Limit{Name: name, Algorithm: alg, Quota: quota, Window: window, Burst: burst}
}

// Timelines are the conformance tables.
var Timelines = []Timeline{
	{
		// B=5, r=2/s: five at t=0 pass, the sixth fails; after
		// 0.5 s one token has returned: one passes, the next fails.
		Name:  "seed/token_bucket_B5_r2",
		Limit: lim("seed", sluice.TokenBucket, 2, s1, 5),
		Steps: []Step{
			{N: 4, Want: allow(1, 2*s1)},
			{Want: allow(0, 2500*ms)},
			{Want: reject(0, 500*ms, 2500*ms)},
			{At: 500 * ms, Want: allow(0, 2500*ms)},
			{At: 500 * ms, Want: reject(0, 500*ms, 2500*ms)},
		},
	},
	{
		// B=8, r=1/s: eight at t=0 exhaust the bucket; at t=3 s
		// exactly three unit requests pass.
		Name:  "seed/token_bucket_B8_r1",
		Limit: lim("seed", sluice.TokenBucket, 1, s1, 8),
		Steps: []Step{
			{N: 8, Want: allow(0, 8*s1)},
			{Want: reject(0, s1, 8*s1)},
			{At: 3 * s1, N: 3, Want: allow(0, 8*s1)},
			{At: 3 * s1, Want: reject(0, s1, 8*s1)},
		},
	},
	{
		// A long idle never refills past B.
		Name:  "seed/idle_never_refills_past_burst",
		Limit: lim("seed", sluice.TokenBucket, 2, s1, 5),
		Steps: []Step{
			{N: 5, Want: allow(0, 2500*ms)},
			{At: 365 * 24 * time.Hour, Want: allow(4, 500*ms)},
			{At: 365 * 24 * time.Hour, N: 4, Want: allow(0, 2500*ms)},
			{At: 365 * 24 * time.Hour, Want: reject(0, 500*ms, 2500*ms)},
		},
	},
	{
		// A fractional cost of 2.5.
		Name:  "seed/fractional_cost",
		Limit: lim("seed", sluice.TokenBucket, 2, s1, 5),
		Steps: []Step{
			{Cost: 2.5, Want: allow(2.5, 1250*ms)},
			{Cost: 2.5, Want: allow(0, 2500*ms)},
			{Cost: 2.5, Want: reject(0, 1250*ms, 2500*ms)},
			{At: s1, Cost: 2.5, Want: reject(2, 250*ms, 1500*ms)},
			{At: 1250 * ms, Cost: 2.5, Want: allow(0, 2500*ms)},
			{At: 1250 * ms, Cost: 0.1, Want: reject(0, 50*ms, 2500*ms)},
		},
	},
	{
		Name:  "seed/gcra_B5_r2",
		Limit: lim("seed", sluice.GCRA, 2, s1, 5),
		Steps: []Step{
			{N: 4, Want: allow(1, 2*s1)},
			{Want: allow(0, 2500*ms)},
			{Want: reject(0, 500*ms, 2500*ms)},
			{At: 500 * ms, Want: allow(0, 2500*ms)},
			{At: 500 * ms, Want: reject(0, 500*ms, 2500*ms)},
			{At: 500 * ms, Cost: 6, Want: never(0, 2500*ms)},
		},
	},
	{
		// A fixed window of 10 per minute admits 10 at 00:59.9 and
		// 10 more at 01:00.1 — twenty in 200 ms, both windows within quota
		// (the documented weakness).
		Name:  "seed/fixed_window_boundary",
		Limit: lim("seed", sluice.FixedWindow, 10, time.Minute, 0),
		Steps: []Step{
			{At: 59900 * ms, N: 10, Want: allow(0, 100*ms)},
			{At: 59900 * ms, Want: reject(0, 100*ms, 100*ms)},
			{At: 60100 * ms, N: 10, Want: allow(0, 59900*ms)},
			{At: 60100 * ms, Want: reject(0, 59900*ms, 59900*ms)},
		},
	},
	{
		// The sliding log, a true moving count over 60 s, rejects
		// the second ten until the first ten leave the window.
		Name:  "seed/sliding_log_boundary",
		Limit: lim("seed", sluice.SlidingLog, 10, time.Minute, 0),
		Steps: []Step{
			{At: 59900 * ms, N: 10, Want: allow(0, time.Minute)},
			{At: 60100 * ms, N: 10, Want: reject(0, 59800*ms, 59800*ms)},
			{At: 119900*ms - time.Microsecond, Want: reject(0, time.Microsecond, time.Microsecond)},
			{At: 119900 * ms, N: 10, Want: allow(0, time.Minute)},
		},
	},
	{
		// The sliding window counter at the same boundary: at 01:00.1 the
		// previous window's 10 still weigh 59.9/60 (estimate 9.983), so one
		// more fits only from 01:06 (10 × 54/60 + 1 = 10).
		Name:  "sliding_window_boundary",
		Limit: lim("sw", sluice.SlidingWindow, 10, time.Minute, 0),
		Steps: []Step{
			{At: 59900 * ms, N: 10, Want: allow(0, 60100*ms)},
			{At: 60100 * ms, Want: reject(0.016666, 5900*ms, 59900*ms)},
			{At: 66 * s1, Want: allow(0, 114*s1)},
			{At: 66 * s1, Want: reject(0, 6*s1, 114*s1)},
			{At: 3 * time.Minute, N: 10, Want: allow(0, 2*time.Minute)},
		},
	},
	{
		// nginx "rate=2r/s burst=2 delay=1": a leaky bucket of capacity 3,
		// delay threshold 1. The first two run at once, the third waits for
		// the excess beyond the threshold (1 at 2/s), the fourth is refused.
		Name: "leaky_bucket_nginx_burst_delay",
		Limit: sluice.Limit{Name: "nginx", Algorithm: sluice.LeakyBucket, Quota: 2, Window: s1,
			Burst: 3, DelayThreshold: 1},
		Steps: []Step{
			{Want: allow(2, 500*ms)},
			{Want: allow(1, s1)},
			{Want: Want{Allowed: true, Remaining: 0, ResetAfter: 1500 * ms, Delay: 500 * ms}},
			{Want: reject(0, 500*ms, 1500*ms)},
			{At: 500 * ms, Want: Want{Allowed: true, Remaining: 0, ResetAfter: 1500 * ms, Delay: 500 * ms}},
			{At: 2 * s1, Want: allow(2, 500*ms)},
		},
	},
	{
		// Costs above the capacity can never fit, on every algorithm.
		Name:  "never/fixed_window",
		Limit: lim("n", sluice.FixedWindow, 5, s1, 0),
		Steps: []Step{{Cost: 6, Want: never(5, 0)}, {Cost: 5, Want: allow(0, s1)}},
	},
	{
		Name:  "never/sliding_log",
		Limit: lim("n", sluice.SlidingLog, 5, s1, 0),
		Steps: []Step{{Cost: 6, Want: never(5, 0)}, {Cost: 5, Want: allow(0, s1)}},
	},
	{
		Name:  "never/sliding_window",
		Limit: lim("n", sluice.SlidingWindow, 5, s1, 0),
		Steps: []Step{{Cost: 6, Want: never(5, 0)}, {Cost: 5, Want: allow(0, 2*s1)}},
	},
	{
		Name:  "never/leaky_bucket",
		Limit: lim("n", sluice.LeakyBucket, 5, s1, 0),
		Steps: []Step{{Cost: 6, Want: never(5, 0)}, {Cost: 5, Want: allow(0, s1)}},
	},
	{
		Name:  "never/concurrency",
		Limit: lim("n", sluice.Concurrency, 5, s1, 0),
		Steps: []Step{{Cost: 6, Want: never(5, 0)}, {Cost: 5, Want: allow(0, s1)}},
	},
	{
		// Keys are independent.
		Name:  "keys_are_independent",
		Limit: lim("keys", sluice.TokenBucket, 1, s1, 1),
		Steps: []Step{
			{Key: "a", Want: allow(0, s1)},
			{Key: "a", Want: reject(0, s1, s1)},
			{Key: "b", Want: allow(0, s1)},
		},
	},
}

func (s *suite) timelines(t *testing.T) { s.playAll(t, Timelines) }

// playAll plays each timeline on a fresh store, in parallel subtests.
func (s *suite) playAll(t *testing.T, tables []Timeline) {
	t.Parallel()
	for _, tl := range tables {
		t.Run(tl.Name, func(t *testing.T) {
			t.Parallel()
			l, clock := s.store(t)
			PlayTimeline(t, l, clock, tl, func(k string) string { return s.key(t, k) })
		})
	}
}

// PlayTimeline plays tl on l, setting clock before each step, and fails t
// at the first decision that differs. Keys are passed through key (which
// makes them unique to a run).
func PlayTimeline(t *testing.T, l sluice.Limiter, clock *Clock, tl Timeline, key func(string) string) {
	t.Helper()
	ctx := context.Background()
	for i, st := range tl.Steps {
		clock.Set(Epoch.Add(st.At))
		k, cost, n := key(cmp.Or(st.Key, "k")), cmp.Or(st.Cost, 1), max(st.N, 1)
		for j := range n {
			var d sluice.Decision
			var err error
			if st.Charge {
				c, ok := l.(sluice.Charger)
				if !ok {
					t.Fatalf("step %d charges, but the store is not a sluice.Charger", i)
				}
				d, err = c.Charge(ctx, k, tl.Limit, cost)
			} else {
				d, err = l.Allow(ctx, k, tl.Limit, cost)
			}
			if j < n-1 {
				if d.Allowed != st.Want.Allowed || err != nil {
					t.Fatalf("step %d, call %d of %d at +%v: allowed %v (err %v), want %v", i, j+1, n, st.At, d.Allowed, err, st.Want.Allowed)
				}
				continue
			}
			if err := st.Want.Check(d, err); err != nil {
				t.Fatalf("step %d (%d calls) at +%v, cost %v: %v", i, n, st.At, cost, err)
			}
		}
	}
}
