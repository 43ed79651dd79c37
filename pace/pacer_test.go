package pace_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/ratelimitheader"
)

func newPacer(t *testing.T, o pace.Options) *pace.Pacer {
	t.Helper()
	p, err := pace.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// grantTimes reserves n costs at once and returns when each was granted,
// since the call. Grants are in order, so waiting on each in turn is exact.
func grantTimes(t *testing.T, p *pace.Pacer, costs ...float64) []time.Duration {
	t.Helper()
	start := time.Now()
	rs := make([]*pace.Reservation, len(costs))
	for i, c := range costs {
		r, err := p.Reserve(c)
		if err != nil {
			t.Fatalf("Reserve(%v): %v", c, err)
		}
		rs[i] = r
	}
	at := make([]time.Duration, len(rs))
	for i, r := range rs {
		<-r.Ready()
		if err := r.Err(); err != nil {
			t.Fatalf("reservation %d: %v", i, err)
		}
		at[i] = time.Since(start)
		r.Done()
	}
	return at
}

func ones(n int) []float64 {
	c := make([]float64, n)
	for i := range c {
		c[i] = 1
	}
	return c
}

// countBy returns how many of at fall at each instant, in order.
func countBy(at []time.Duration) map[time.Duration]int {
	m := make(map[time.Duration]int)
	for _, a := range at {
		m[a]++
	}
	return m
}

// TestSlices: a limit with an explicit Burst releases at most the slice's
// share of it at once. (Before the spacing, every limit was released a
// slice at a time — 20 of 100 per second at 0, 200, 400 ms — whatever its
// burst; a limit without one is now spaced evenly: see TestSpacing.)
func TestSlices(t *testing.T) {
	// 100 per second, a Burst of 100: 20 at once (the slice's share), then
	// one every 10 ms, as the bucket refills.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{Limits: []sluice.Limit{{Name: "api", Quota: 100, Window: time.Second, Burst: 100}}})
		got := countBy(grantTimes(t, p, ones(22)...))
		want := map[time.Duration]int{0: 20, 10 * time.Millisecond: 1, 20 * time.Millisecond: 1}
		if !mapsEqual(got, want) {
			t.Errorf("grants by instant: got %v, want %v", got, want)
		}
	})
	// Slicing off (Slice ≥ Window): the whole explicit burst at once.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{Limits: []sluice.Limit{{Name: "api", Quota: 100, Window: time.Second, Burst: 100}}, Slice: time.Second})
		got := countBy(grantTimes(t, p, ones(101)...))
		want := map[time.Duration]int{0: 100, 10 * time.Millisecond: 1}
		if !mapsEqual(got, want) {
			t.Errorf("unsliced grants by instant: got %v, want %v", got, want)
		}
	})
	// A slice's share under one unit holds one: 2 per second with a Burst
	// of 2 and 200 ms slices goes out one every 500 ms.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{Limits: []sluice.Limit{{Name: "api", Quota: 2, Window: time.Second, Burst: 2}}})
		got := grantTimes(t, p, ones(4)...)
		want := []time.Duration{0, 500 * time.Millisecond, time.Second, 1500 * time.Millisecond}
		if !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
	// A cost larger than what may go at once (20) waits for all of it,
	// goes, and the next release waits until the rest is paid at the
	// limit's rate: 50 at 0 pays its 30 more until 300 ms, and the next 50
	// waits for 20 more, at 500 ms; it pays until 800 ms, when 1 goes at
	// 810 ms, and 20 at 1.01 s.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{Limits: []sluice.Limit{{Name: "api", Quota: 100, Window: time.Second, Burst: 100}}})
		got := grantTimes(t, p, 50, 50, 1, 20)
		want := []time.Duration{0, 500 * time.Millisecond, 810 * time.Millisecond, 1010 * time.Millisecond}
		if !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
}

func mapsEqual(a, b map[time.Duration]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestSeveralWindows(t *testing.T) {
	// 10 per second, 30 per minute (a token bucket refilling 0.5 per
	// second): 30 go out in 3 s, one every 100 ms (the fastest limit's
	// spacing; they went two per 200 ms slice before the spacing); then the
	// per-minute budget decides.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{Limits: []sluice.Limit{
			{Name: "second", Quota: 10, Window: time.Second},
			{Name: "minute", Quota: 30, Window: time.Minute},
		}})
		at := grantTimes(t, p, ones(33)...)
		for i := range 30 {
			if want := time.Duration(i) * 100 * time.Millisecond; at[i] != want {
				t.Errorf("grant %d at %v, want %v", i, at[i], want)
			}
		}
		// The per-minute bucket refilled 1.45 while those went out: the
		// 31st goes 100 ms later (3 s), leaving 0.5; then one every 2 s as
		// it refills at 0.5 per second.
		for i, want := range []time.Duration{3 * time.Second, 4 * time.Second, 6 * time.Second} {
			if at[30+i] != want {
				t.Errorf("grant %d at %v, want %v", 30+i, at[30+i], want)
			}
		}
	})
}

func TestMaxInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{MaxInFlight: 2})
		ctx := context.Background()
		a, _ := p.Wait(ctx, 1)
		b, _ := p.Wait(ctx, 1)
		c, err := p.Reserve(1)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case <-c.Ready():
			t.Fatal("a third permit was granted while two are in flight")
		default:
		}
		if s := p.Stats(); s.InFlight != 2 || s.Queued != 1 {
			t.Errorf("stats: in flight %d, queued %d; want 2, 1", s.InFlight, s.Queued)
		}
		time.Sleep(time.Second)
		a.Done()
		a.Done() // idempotent: frees one slot, not two
		<-c.Ready()
		d, _ := p.Reserve(1)
		synctest.Wait()
		select {
		case <-d.Ready():
			t.Fatal("Done twice freed two slots")
		default:
		}
		b.Done()
		<-d.Ready()
		c.Done()
		d.Done()
	})
}

func TestCancelGivesCapacityBack(t *testing.T) {
	// One per second, no slicing needed. A is granted at 0; B would be at
	// 1 s and C at 2 s. B leaves at 0.5 s: C takes its place at 1 s.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{Limits: []sluice.Limit{{Name: "api", Quota: 1, Window: time.Second}}})
		start := time.Now()
		a, err := p.Wait(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		a.Done()
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(500*time.Millisecond, cancel)
		errB := make(chan error, 1)
		go func() {
			_, err := p.Wait(ctx, 1)
			errB <- err
		}()
		synctest.Wait()
		c, _ := p.Reserve(1)
		if err := <-errB; !errors.Is(err, context.Canceled) {
			t.Fatalf("B: got %v, want canceled", err)
		}
		if at := time.Since(start); at != 500*time.Millisecond {
			t.Errorf("B gave up at %v, want 500ms", at)
		}
		<-c.Ready()
		if at := time.Since(start); at != time.Second {
			t.Errorf("C granted at %v, want 1s (B's place)", at)
		}
		if s := p.Stats(); s.Canceled != 1 || s.Granted != 2 {
			t.Errorf("stats: canceled %d, granted %d; want 1, 2", s.Canceled, s.Granted)
		}
	})
}

func TestCancelAfterTheGrant(t *testing.T) {
	// A grant canceled unused at once (a context that ended as it came)
	// goes to the next in line at that instant; canceled later, it is
	// spent.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{Limits: []sluice.Limit{{Name: "api", Quota: 1, Window: time.Second}}})
		start := time.Now()
		b, _ := p.Reserve(1)
		c, _ := p.Reserve(1)
		<-b.Ready()
		b.Cancel()
		<-c.Ready()
		if at := time.Since(start); at != 0 {
			t.Errorf("C granted at %v, want 0 (B's unused grant)", at)
		}
		d, _ := p.Reserve(1)
		time.Sleep(time.Millisecond)
		c.Cancel() // a millisecond late: spent
		<-d.Ready()
		if at := time.Since(start); at != time.Second {
			t.Errorf("D granted at %v, want 1s", at)
		}
		// B's grant was handed on, so it is not counted: C and D are.
		if s := p.Stats(); s.Credited != 1 || s.Granted != 2 {
			t.Errorf("credited %d, granted %d; want 1, 2", s.Credited, s.Granted)
		}
	})
}

func TestWaitOutlastingTheDeadline(t *testing.T) {
	// The head of the queue knows its wait: when it outlasts the
	// context's deadline, Wait says so at once and leaves the queue.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{Limits: []sluice.Limit{{Name: "api", Quota: 1, Window: time.Hour}}})
		start := time.Now()
		a, _ := p.Wait(context.Background(), 1)
		a.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := p.Wait(ctx, 1); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 0 {
			t.Errorf("a wait of an hour under a minute's deadline: %v after %v, want DeadlineExceeded at once", err, time.Since(start))
		}
		p.HoldUntil(start.Add(2 * time.Hour))
		if _, err := p.Wait(ctx, 1); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 0 {
			t.Errorf("a hold of two hours: %v after %v, want DeadlineExceeded at once", err, time.Since(start))
		}
		if s := p.Stats(); s.Queued != 0 || s.Granted != 1 {
			t.Errorf("queued %d, granted %d; want 0, 1", s.Queued, s.Granted)
		}
	})
}

func TestWaitRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{Limits: []sluice.Limit{{Name: "api", Quota: 10, Window: time.Second}}})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := p.Wait(ctx, 1); !errors.Is(err, context.Canceled) {
			t.Errorf("canceled context: got %v", err)
		}
		if s := p.Stats(); s.Queued != 0 || s.Granted != 0 {
			t.Errorf("a canceled Wait queued or spent: %+v", s)
		}
		for _, c := range []float64{0, -1, math.NaN(), math.Inf(1), 1e-9} {
			if _, err := p.Wait(context.Background(), c); !errors.Is(err, sluice.ErrInvalidCost) {
				t.Errorf("cost %v: got %v, want ErrInvalidCost", c, err)
			}
		}
		if _, err := p.Wait(context.Background(), 11); !errors.Is(err, sluice.ErrCostExceedsLimit) {
			t.Errorf("cost above capacity: got %v, want ErrCostExceedsLimit", err)
		}
		r, _ := p.Reserve(10)
		q, _ := p.Reserve(10)
		p.Close()
		<-r.Ready()
		<-q.Ready()
		if r.Err() != nil || !errors.Is(q.Err(), pace.ErrClosed) {
			t.Errorf("after Close: first %v (granted before), second %v (want ErrClosed)", r.Err(), q.Err())
		}
		if _, err := p.Reserve(1); !errors.Is(err, pace.ErrClosed) {
			t.Errorf("Reserve after Close: %v", err)
		}
	})
}

func TestFirstComeFirstServed(t *testing.T) {
	// A large cost at the head is not overtaken by small ones behind it.
	// (The Burst is explicit, so that the bucket goes out whole: without
	// one the limit is spaced, and a cost of 10 takes a second of it.)
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{Limits: []sluice.Limit{{Name: "api", Quota: 10, Window: time.Second, Burst: 10}}, Slice: time.Second})
		got := grantTimes(t, p, 10, 10, 1, 1)
		want := []time.Duration{0, time.Second, 1100 * time.Millisecond, 1200 * time.Millisecond}
		if !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
}

func TestHoldUntil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Unlimited (no slow start), so that only the hold decides.
		p := newPacer(t, pace.Options{Adaptive: pace.AdaptiveOptions{Initial: math.Inf(1)}})
		start := time.Now()
		p.HoldUntil(start.Add(3 * time.Second))
		p.HoldUntil(start.Add(time.Second)) // shorter: ignored
		got := grantTimes(t, p, 1, 1)
		if want := []time.Duration{3 * time.Second, 3 * time.Second}; !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
		if s := p.Stats(); s.Holds != 1 {
			t.Errorf("holds %d, want 1", s.Holds)
		}
	})
}

// TestReleasesConform is the pacer's invariant: whatever the limits and the
// costs, every grant is one the limits themselves (memstore, on the same
// clock) allow at that instant. A pacer that ignored a limit, or released
// a slice too early, would be refused there.
func TestReleasesConform(t *testing.T) {
	algorithms := []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.FixedWindow, sluice.SlidingLog, sluice.SlidingWindow}
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 3).Draw(rt, "limits")
		var limits []sluice.Limit
		for i := range n {
			a := rapid.SampledFrom(algorithms).Draw(rt, "algorithm")
			l := sluice.Limit{
				Name:      string(rune('a' + i)),
				Algorithm: a,
				Quota:     float64(rapid.IntRange(1, 50).Draw(rt, "quota")),
				Window:    time.Duration(rapid.IntRange(1, 20).Draw(rt, "window")) * 100 * time.Millisecond,
			}
			if l.HasBurst() && rapid.Bool().Draw(rt, "burst") {
				l.Burst = float64(rapid.IntRange(1, 60).Draw(rt, "burstsize"))
			}
			limits = append(limits, l)
		}
		capacity := math.Inf(1)
		for _, l := range limits {
			capacity = min(capacity, l.Capacity())
		}
		costs := rapid.SliceOfN(rapid.IntRange(1, int(capacity)), 1, 60).Draw(rt, "costs")
		slice := time.Duration(rapid.IntRange(0, 10).Draw(rt, "slice")) * 50 * time.Millisecond
		synctest.Test(t, func(t *testing.T) {
			p, err := pace.New(pace.Options{Limits: limits, Slice: slice})
			if err != nil {
				rt.Fatal(err)
			}
			defer p.Close()
			store, err := memstore.New(memstore.Options{Now: time.Now})
			if err != nil {
				rt.Fatal(err)
			}
			defer store.Close()
			rs := make([]*pace.Reservation, len(costs))
			for i, c := range costs {
				if rs[i], err = p.Reserve(float64(c)); err != nil {
					rt.Fatal(err)
				}
			}
			reqs := make([]sluice.Request, len(limits))
			for i, r := range rs {
				<-r.Ready()
				for j, l := range limits {
					reqs[j] = sluice.Request{Key: "k", Limit: l, Cost: float64(costs[i])}
				}
				d, err := store.AllowAll(context.Background(), reqs, sluice.AllOrNothing, nil)
				if err != nil || !d.Allowed {
					rt.Fatalf("grant %d (cost %d) at %v: the limit %v refuses it (%v)", i, costs[i], time.Now(), d.Limit, err)
				}
			}
		})
	})
}

func TestLearnedLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{Adaptive: pace.AdaptiveOptions{Ceiling: 40}})
		if r := p.Stats().Rate; r != 40 {
			t.Fatalf("rate before learning %v, want the ceiling 40", r)
		}
		p.Feedback(pace.Feedback{Policies: []ratelimitheader.Policy{{Name: "default", Quota: 10, Window: time.Second}, {Name: "bytes", Quota: 1, Unit: "content-bytes", Window: time.Second}}})
		if s := p.Stats(); s.Rate != 10 || s.Learned != 1 {
			t.Fatalf("after a policy of 10 per second: rate %v, learned %d; want 10, 1 (content-bytes ignored)", s.Rate, s.Learned)
		}
		// The target says 0 left (r is rounded down: less than 1): the
		// learned bucket drops from 10 to just under 1, so the next
		// request goes a microsecond later and the one after 100 ms
		// later (10 per second).
		p.Feedback(pace.Feedback{Limits: []ratelimitheader.Limit{{Name: "default", Remaining: 0, Reset: time.Second}}})
		if got, want := grantTimes(t, p, 1, 1), []time.Duration{time.Microsecond, 100*time.Millisecond + time.Microsecond}; !slices.Equal(got, want) {
			t.Errorf("after r=0, granted at %v, want %v", got, want)
		}
		// A policy above the ceiling: the ceiling still holds.
		p.Feedback(pace.Feedback{Policies: []ratelimitheader.Policy{{Name: "default", Quota: 1000, Window: time.Second}}})
		if r := p.Stats().Rate; r != 40 {
			t.Errorf("after a policy of 1000 per second: rate %v, want the ceiling 40", r)
		}
	})
	// No policy, only RateLimit or X-RateLimit-* saying nothing is left:
	// nothing until the reset.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{})
		p.Feedback(pace.Feedback{Limits: []ratelimitheader.Limit{{Name: "x", Remaining: 0, Reset: 2 * time.Second}}})
		if got := grantTimes(t, p, 1); got[0] != 2*time.Second {
			t.Errorf("RateLimit r=0 t=2: granted at %v, want 2s", got[0])
		}
		p.Feedback(pace.Feedback{HasLegacy: true, Legacy: ratelimitheader.Legacy{Limit: 10, Remaining: 0, Reset: 3 * time.Second}})
		if got := grantTimes(t, p, 1); got[0] != 3*time.Second {
			t.Errorf("X-RateLimit-Remaining 0, Reset 3: granted at %v, want 3s", got[0])
		}
	})
}

func TestCubic(t *testing.T) {
	// Throttled at a measured 100 per second: the rate drops to 70, then
	// climbs along 0.4(t−K)³ + 100, K = ∛(100 × 0.3 / 0.4) ≈ 4.217 s,
	// reaching 100 at K, and goes on beyond it. The client keeps sending
	// as fast as the rate allows and reports each answer, as a Transport
	// does. The Pacer starts unlimited (Initial +Inf: no slow start), so
	// that the client measures 100 per second before the throttle.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{Adaptive: pace.AdaptiveOptions{Initial: math.Inf(1)}})
		for range 100 {
			r, _ := p.Wait(context.Background(), 1)
			r.Done()
			time.Sleep(10 * time.Millisecond)
		}
		if m := p.Stats().EffectiveRate; math.Abs(m-100) > 1e-6 {
			t.Fatalf("measured %v per second, want 100", m)
		}
		at := time.Now()
		p.Feedback(pace.Feedback{Throttled: true, Sent: at})
		if r := p.Stats().Rate; math.Abs(r-70) > 1e-6 {
			t.Fatalf("after the throttle: rate %v, want 70", r)
		}
		// An answer to a request sent before the decrease does not
		// decrease again.
		p.Feedback(pace.Feedback{Throttled: true, Sent: at.Add(-time.Millisecond)})
		if s := p.Stats(); math.Abs(s.Rate-70) > 1e-6 || s.Throttled != 2 {
			t.Fatalf("after a stale throttle: rate %v, throttled %d; want 70, 2", s.Rate, s.Throttled)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				r, err := p.Wait(ctx, 1)
				if err != nil {
					return
				}
				r.Done()
				p.Feedback(pace.Feedback{Sent: time.Now()})
			}
		}()
		k := math.Cbrt(100 * 0.3 / 0.4)
		for _, dt := range []float64{1, 2, k, 6, 8} {
			time.Sleep(time.Duration(dt*float64(time.Second)) - time.Since(at))
			want := 0.4*math.Pow(dt-k, 3) + 100
			// The rate is updated when it moves by more than 1 %.
			if r := p.Stats().Rate; math.Abs(r-want) > want/50 {
				t.Errorf("%.3fs after the throttle: rate %.3f, want %.3f (±2 %%)", dt, r, want)
			}
		}
		cancel()
		<-done
	})
}

func TestNewRefuses(t *testing.T) {
	for name, o := range map[string]pace.Options{
		"negative slice":        {Slice: -time.Second},
		"negative in flight":    {MaxInFlight: -1},
		"leaky bucket":          {Limits: []sluice.Limit{{Name: "a", Algorithm: sluice.LeakyBucket, Quota: 1, Window: time.Second}}},
		"concurrency":           {Limits: []sluice.Limit{{Name: "a", Algorithm: sluice.Concurrency, Quota: 1, Window: time.Second}}},
		"duplicate names":       {Limits: []sluice.Limit{{Name: "a", Quota: 1, Window: time.Second}, {Name: "a", Quota: 2, Window: time.Minute}}},
		"negative quota":        {Limits: []sluice.Limit{{Name: "a", Quota: -1, Window: time.Second}}},
		"NaN quota":             {Limits: []sluice.Limit{{Name: "a", Quota: math.NaN(), Window: time.Second}}},
		"absurd quota":          {Limits: []sluice.Limit{{Name: "a", Quota: 1e300, Window: time.Second}}},
		"negative ceiling":      {Adaptive: pace.AdaptiveOptions{Ceiling: -1}},
		"infinite ceiling":      {Adaptive: pace.AdaptiveOptions{Ceiling: math.Inf(1)}},
		"NaN initial":           {Adaptive: pace.AdaptiveOptions{Initial: math.NaN()}},
		"absurd initial":        {Adaptive: pace.AdaptiveOptions{Initial: 1e12}},
		"beta 1":                {Adaptive: pace.AdaptiveOptions{Beta: 1}},
		"negative C":            {Adaptive: pace.AdaptiveOptions{C: -0.4}},
		"min rate over ceiling": {Adaptive: pace.AdaptiveOptions{Ceiling: 1, MinRate: 2}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := pace.New(o)
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, pace.ErrInvalidOptions) {
				t.Errorf("%v does not wrap ErrInvalidOptions", err)
			}
			t.Log(err)
		})
	}
}

// The review's findings on the adaptive rate and learned limits, each a
// test that failed before its fix.
func TestAdaptiveEdges(t *testing.T) {
	// A large adaptive rate is still lowered on a throttle (its retarget
	// once needed a chargeable limit, and failed silently above ~5,600/s).
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{Adaptive: pace.AdaptiveOptions{Initial: 9000.000001}})
		for range 1000 {
			r, _ := p.Wait(context.Background(), 1)
			r.Done()
		}
		p.Feedback(pace.Feedback{Throttled: true})
		if r := p.Stats().Rate; r > 0.7*9000.000001*1.0001 {
			t.Errorf("after a throttle at 9000/s: rate %v, want at most 0.7 × 9000", r)
		}
	})
	// Initial holds until the first throttle.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{Adaptive: pace.AdaptiveOptions{Initial: 5}})
		r, _ := p.Wait(context.Background(), 1)
		r.Done()
		p.Feedback(pace.Feedback{})
		time.Sleep(2 * time.Second)
		p.Feedback(pace.Feedback{})
		if r := p.Stats().Rate; r != 5 {
			t.Errorf("rate %v before any throttle, want Initial 5", r)
		}
	})
	// A ceiling under one unit per second lets one unit through every
	// 1/Ceiling seconds.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{Adaptive: pace.AdaptiveOptions{Ceiling: 0.5}})
		if got, want := grantTimes(t, p, 1, 1), []time.Duration{0, 2 * time.Second}; !slices.Equal(got, want) {
			t.Errorf("ceiling 0.5/s: granted at %v, want %v", got, want)
		}
	})
	// A SlidingLog counts whole units: half a unit is refused.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{Limits: []sluice.Limit{{Name: "log", Algorithm: sluice.SlidingLog, Quota: 5, Window: time.Second}}})
		if _, err := p.Reserve(0.5); !errors.Is(err, sluice.ErrInvalidCost) {
			t.Errorf("Reserve(0.5) on a SlidingLog: %v, want ErrInvalidCost", err)
		}
	})
	// A learned quota of one per ten years stops the client only until
	// Forget: then the limits learned are dropped and the next request goes.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{})
		start := time.Now()
		p.Feedback(pace.Feedback{
			Policies: []ratelimitheader.Policy{{Name: "p", Quota: 1, Window: 10 * 365 * 24 * time.Hour}},
			Limits:   []ratelimitheader.Limit{{Name: "p", Remaining: 0, Reset: ratelimitheader.NoReset}},
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := p.Wait(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("under the learned quota: %v, want DeadlineExceeded at once", err)
		}
		got := grantTimes(t, p, 1)
		if got[0] != pace.DefaultForget || p.Stats().Forgotten != 1 {
			t.Errorf("granted at %v (forgotten %d), want at %v once the learned limit is forgotten", got[0], p.Stats().Forgotten, pace.DefaultForget)
		}
		_ = start
	})
}

// The second review's findings, each a test that failed before its fix.
func TestAdaptiveEdgesAgain(t *testing.T) {
	// The adaptive rate counts a cost whole: 10 per second and a cost of
	// 10 is one request a second (it once took at most a slice's worth,
	// five requests a second). A cost above the bucket (one unit: the
	// adaptive rate is spaced; it held a slice, 2, before) takes a full
	// bucket and blocks the gate until the rest is paid.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{Adaptive: pace.AdaptiveOptions{Initial: 10}})
		got := grantTimes(t, p, 10, 10, 10, 10, 1, 1)
		want := []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 4100 * time.Millisecond}
		if !slices.Equal(got, want) {
			t.Errorf("cost 10 at 10 per second: granted at %v, want %v", got, want)
		}
	})
	// A large cost does not widen the bucket for good: after a throttle,
	// small costs go out one at a time again.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{Adaptive: pace.AdaptiveOptions{Initial: 10}})
		grantTimes(t, p, 10)
		time.Sleep(5 * time.Second)
		p.Feedback(pace.Feedback{Throttled: true})
		got := countBy(grantTimes(t, p, ones(5)...))
		if got[0] != 1 {
			t.Errorf("after the throttle, %d small costs went at once, want 1 (grants by instant: %v)", got[0], got)
		}
	})
	// A cost far above the bucket at a slow rate is admitted (it once
	// failed the exact arithmetic of a bucket sized to hold it).
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{Adaptive: pace.AdaptiveOptions{Initial: 0.7001}})
		if got := grantTimes(t, p, 500_000); got[0] != 0 {
			t.Errorf("a cost of 500,000 at 0.7/s granted at %v, want at once", got[0])
		}
	})
	// What is forgotten is not let loose: the backlog goes out at the
	// forgotten limit's pace (at least MinRate, 0.5/s), not all at once.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{})
		p.Feedback(pace.Feedback{
			Policies: []ratelimitheader.Policy{{Name: "p", Quota: 1, Window: 10 * 365 * 24 * time.Hour}},
			Limits:   []ratelimitheader.Limit{{Name: "p", Remaining: 0, Reset: ratelimitheader.NoReset}},
		})
		got := grantTimes(t, p, 1, 1, 1)
		f := pace.DefaultForget
		if want := []time.Duration{f, f + 2*time.Second, f + 4*time.Second}; !slices.Equal(got, want) {
			t.Errorf("after forgetting: granted at %v, want %v", got, want)
		}
	})
	// Each learned policy is forgotten on its own: one the target stopped
	// stating goes after Forget though another is restated all along.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{})
		p.Feedback(pace.Feedback{Policies: []ratelimitheader.Policy{{Name: "a", Quota: 100, Window: time.Second}, {Name: "day", Quota: 1000, Window: 24 * time.Hour}}})
		for range 12 {
			time.Sleep(time.Minute)
			p.Feedback(pace.Feedback{Policies: []ratelimitheader.Policy{{Name: "a", Quota: 100, Window: time.Second}}})
			r, _ := p.Wait(context.Background(), 1)
			r.Done()
		}
		if s := p.Stats(); s.Forgotten != 1 || s.Rate < 99 {
			t.Errorf("forgotten %d, rate %v; want the day policy forgotten and 100/s (or more) in force", s.Forgotten, s.Rate)
		}
	})
	// A ceiling does not take the spacing from a configured limit: 100 per
	// 10 s goes out one every 100 ms with or without a ceiling (2 every 200
	// ms before the spacing).
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{Limits: []sluice.Limit{{Name: "api", Quota: 100, Window: 10 * time.Second}}, Adaptive: pace.AdaptiveOptions{Ceiling: 1000}})
		if got, want := grantTimes(t, p, 1, 1, 1), []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}; !slices.Equal(got, want) {
			t.Errorf("with a ceiling: granted at %v, want %v", got, want)
		}
	})
	// A ceiling under the default MinRate is accepted (MinRate follows it).
	if _, err := pace.New(pace.Options{Adaptive: pace.AdaptiveOptions{Ceiling: 0.3}}); err != nil {
		t.Errorf("Ceiling 0.3: %v", err)
	}
}
