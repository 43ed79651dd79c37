package pace_test

import (
	"context"
	"math"
	"slices"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/ratelimitheader"
)

const ms = time.Millisecond

// TestSpacing: a limit without a Burst is released spaced evenly, one unit
// every Window/Quota — configured, learned, the Ceiling and the adaptive
// rate alike; an explicit Burst goes out at once, at most the slice's share
// of it. Each row is the grant instants of costs reserved at once, on the
// fake clock.
func TestSpacing(t *testing.T) {
	limit := func(l sluice.Limit) pace.Options { return pace.Options{Limits: []sluice.Limit{l}} }
	fifty := sluice.Limit{Name: "api", Quota: 50, Window: time.Second}
	withBurst := func(l sluice.Limit, b float64) sluice.Limit { l.Burst = b; return l }
	for _, c := range []struct {
		name  string
		opts  pace.Options
		learn []ratelimitheader.Policy // taught before the costs are reserved
		costs []float64
		want  []time.Duration
	}{
		{
			name:  "50/s, no burst: one every 20 ms",
			opts:  limit(fifty),
			costs: ones(8),
			want:  []time.Duration{0, 20 * ms, 40 * ms, 60 * ms, 80 * ms, 100 * ms, 120 * ms, 140 * ms},
		},
		{
			name:  "50/s, Burst 5: 5 at once, then one every 20 ms",
			opts:  limit(withBurst(fifty, 5)),
			costs: ones(8),
			want:  []time.Duration{0, 0, 0, 0, 0, 20 * ms, 40 * ms, 60 * ms},
		},
		{
			name:  "50/s, Burst 50: at most the slice's share (10) at once",
			opts:  limit(withBurst(fifty, 50)),
			costs: ones(12),
			want:  []time.Duration{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 20 * ms, 40 * ms},
		},
		{
			name:  "50/s, no burst, a Slice of a second: still one every 20 ms",
			opts:  pace.Options{Limits: []sluice.Limit{fifty}, Slice: time.Second},
			costs: ones(4),
			want:  []time.Duration{0, 20 * ms, 40 * ms, 60 * ms},
		},
		{
			name:  "a fixed window of 50/s (no burst): one every 20 ms",
			opts:  limit(sluice.Limit{Name: "api", Algorithm: sluice.FixedWindow, Quota: 50, Window: time.Second}),
			costs: ones(4),
			want:  []time.Duration{0, 20 * ms, 40 * ms, 60 * ms},
		},
		{
			name:  "3/s: one every 333.334 ms (each interval rounded up to a microsecond)",
			opts:  limit(sluice.Limit{Name: "api", Quota: 3, Window: time.Second}),
			costs: ones(4),
			want:  []time.Duration{0, 333334 * time.Microsecond, 666668 * time.Microsecond, 1000002 * time.Microsecond},
		},
		{
			name:  "50/s, no burst, costs of 1, 3, 1: a cost is spaced by its size",
			opts:  limit(fifty),
			costs: []float64{1, 3, 1, 1},
			want:  []time.Duration{0, 20 * ms, 80 * ms, 100 * ms},
		},
		{
			name:  "learned 50 per second (RateLimit-Policy): one every 20 ms",
			opts:  pace.Options{},
			learn: []ratelimitheader.Policy{{Name: "api", Quota: 50, Window: time.Second}},
			costs: ones(4),
			want:  []time.Duration{0, 20 * ms, 40 * ms, 60 * ms},
		},
		{
			name:  "Ceiling 50, no slow start: one every 20 ms",
			opts:  pace.Options{Adaptive: pace.AdaptiveOptions{Ceiling: 50, Initial: math.Inf(1)}},
			costs: ones(4),
			want:  []time.Duration{0, 20 * ms, 40 * ms, 60 * ms},
		},
		{
			name:  "adaptive rate 50 (Initial): one every 20 ms",
			opts:  pace.Options{Adaptive: pace.AdaptiveOptions{Initial: 50}},
			costs: ones(4),
			want:  []time.Duration{0, 20 * ms, 40 * ms, 60 * ms},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newPacer(t, c.opts)
				if c.learn != nil {
					p.Feedback(pace.Feedback{Policies: c.learn})
				}
				if got := grantTimes(t, p, c.costs...); !slices.Equal(got, c.want) {
					t.Errorf("granted at %v, want %v", got, c.want)
				}
			})
		})
	}
}

// TestSpacingAfterIdle: the spacing holds what may go at once — one unit
// without a burst, the Burst (at most a slice's share) with one — and no
// more, however long the Pacer was idle.
func TestSpacingAfterIdle(t *testing.T) {
	for _, c := range []struct {
		name  string
		burst float64
		want  []time.Duration // after a second idle
	}{
		{"no burst", 0, []time.Duration{0, 20 * ms, 40 * ms}},
		{"Burst 2", 2, []time.Duration{0, 0, 20 * ms}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newPacer(t, pace.Options{Limits: []sluice.Limit{{Name: "api", Quota: 50, Window: time.Second, Burst: c.burst}}})
				grantTimes(t, p, ones(5)...)
				time.Sleep(time.Second)
				if got := grantTimes(t, p, ones(3)...); !slices.Equal(got, c.want) {
					t.Errorf("after a second idle, granted at %v, want %v", got, c.want)
				}
			})
		})
	}
}

// TestSpacingBound is the spacing's invariant: whatever the limit, its
// Burst, the Slice and when the work comes, the cost granted in any span of
// the limit's Window (both ends included) is at most its Quota plus what may
// go at once — one unit without a Burst, the Burst but at most the slice's
// share (at least one unit) with one. That is tighter than the limits
// themselves: a FixedWindow alone lets 2 × Quota through across the edge of
// its windows, and a token bucket Quota + Burst.
func TestSpacingBound(t *testing.T) {
	algorithms := []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow}
	rapid.Check(t, func(rt *rapid.T) {
		l := sluice.Limit{
			Name:      "api",
			Algorithm: rapid.SampledFrom(algorithms).Draw(rt, "algorithm"),
			Quota:     float64(rapid.IntRange(1, 60).Draw(rt, "quota")),
			Window:    time.Duration(rapid.IntRange(1, 20).Draw(rt, "window")) * 100 * ms,
		}
		slice := time.Duration(rapid.IntRange(0, 10).Draw(rt, "slice")) * 50 * ms
		atOnce := 1.0
		if l.HasBurst() && rapid.Bool().Draw(rt, "burst") {
			l.Burst = float64(rapid.IntRange(1, 80).Draw(rt, "burstsize"))
			effective := slice
			if effective == 0 {
				effective = pace.DefaultSlice
			}
			atOnce = l.Burst
			if effective < l.Window {
				atOnce = min(l.Burst, max(math.Floor(l.Quota*float64(effective)/float64(l.Window)), 1))
			}
		}
		// Work comes in rounds: a few costs at once, then a pause.
		type round struct {
			costs []int
			pause time.Duration
		}
		rounds := rapid.SliceOfN(rapid.Custom(func(rt *rapid.T) round {
			return round{
				costs: rapid.SliceOfN(rapid.IntRange(1, int(atOnce)), 1, 12).Draw(rt, "costs"),
				pause: time.Duration(rapid.IntRange(0, 30).Draw(rt, "pause")) * 50 * ms,
			}
		}), 1, 6).Draw(rt, "rounds")
		synctest.Test(t, func(t *testing.T) {
			p, err := pace.New(pace.Options{Limits: []sluice.Limit{l}, Slice: slice})
			if err != nil {
				rt.Fatal(err)
			}
			defer p.Close()
			type grant struct {
				at   time.Time
				cost int
			}
			var (
				mu     sync.Mutex
				grants []grant
				wg     sync.WaitGroup
			)
			for _, r := range rounds {
				for _, c := range r.costs {
					wg.Go(func() {
						res, err := p.Wait(context.Background(), float64(c))
						if err != nil {
							rt.Error(err)
							return
						}
						mu.Lock()
						grants = append(grants, grant{time.Now(), c})
						mu.Unlock()
						res.Done()
					})
					synctest.Wait() // queued in order
				}
				time.Sleep(r.pause)
			}
			wg.Wait()
			sort.SliceStable(grants, func(i, j int) bool { return grants[i].at.Before(grants[j].at) })
			bound := l.Quota + atOnce
			for i, g := range grants {
				sum := 0
				for _, h := range grants[i:] {
					if h.at.Sub(g.at) > l.Window {
						break
					}
					sum += h.cost
				}
				if float64(sum) > bound {
					rt.Fatalf("%v, Slice %v: %d granted in the window of %v from grant %d, want at most %v (Quota %v + %v at once)",
						l, slice, sum, l.Window, i, bound, l.Quota, atOnce)
				}
			}
		})
	})
}
