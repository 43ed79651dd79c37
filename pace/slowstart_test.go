package pace_test

import (
	"math"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/ratelimitheader"
)

// answerAll reserves n unit costs at once and answers each at its grant,
// unthrottled (a target with no round trip), returning the grant instants and
// the Pacer's rate after each answer.
func answerAll(t *testing.T, p *pace.Pacer, n int) (at []time.Duration, rates []float64) {
	t.Helper()
	start := time.Now()
	rs := make([]*pace.Reservation, n)
	for i := range rs {
		r, err := p.Reserve(1)
		if err != nil {
			t.Fatal(err)
		}
		rs[i] = r
	}
	for _, r := range rs {
		<-r.Ready()
		now := time.Now()
		p.Feedback(pace.Feedback{Sent: now, Received: now})
		r.Done()
		at = append(at, now.Sub(start))
		rates = append(rates, p.Stats().Rate)
	}
	return at, rates
}

func TestSlowStartTimeline(t *testing.T) {
	// Told nothing, a Pacer starts at one unit per slice (5 per second) with
	// the first request, and doubles its rate every 50 ms of answers that
	// show the target took it while work waited for it: the second request
	// goes at 200 ms, whose answer doubles the rate (200 ms since it was
	// set: at most a doubling), the third at 300 ms, the fourth at 350 ms;
	// from there, each answer raises the rate by 2^(d/50ms), d the time
	// since the last one (17.678 ms after 375 ms at 56.57 per second: ×
	// 2^0.354 = 72.28, and so on).
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{})
		if r := p.Stats().Rate; !math.IsInf(r, 1) {
			t.Errorf("rate before the first request %v, want +Inf (the slow start begins with it)", r)
		}
		at, rates := answerAll(t, p, 8)
		want := []time.Duration{0, 200 * ms, 300 * ms, 350 * ms, 375 * ms, 392678 * time.Microsecond, 406514 * time.Microsecond, 417935 * time.Microsecond}
		wantRates := []float64{5, 10, 20, 40, 56.57, 72.28, 87.56, 102.6} // four significant digits
		if !slices.Equal(at, want) {
			t.Errorf("granted at %v, want %v", at, want)
		}
		for i := range rates {
			if math.Abs(rates[i]-wantRates[i]) > wantRates[i]/1000 {
				t.Errorf("rate after answer %d: %.4g, want %.4g", i, rates[i], wantRates[i])
			}
		}
	})
}

func TestSlowStartEnds(t *testing.T) {
	// At the first throttle: the rate its request went at (40 per second)
	// was too fast; CUBIC takes over from β × 40 = 28, and the answers that
	// follow climb along CUBIC, not by doubling.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{})
		answerAll(t, p, 4) // the rate reaches 40
		now := time.Now()
		p.Feedback(pace.Feedback{Throttled: true, Sent: now, Received: now})
		if r := p.Stats().Rate; math.Abs(r-28) > 0.01 {
			t.Fatalf("after the throttle: rate %v, want 0.7 × 40 = 28", r)
		}
		time.Sleep(100 * ms)
		_, rates := answerAll(t, p, 4)
		if r := rates[len(rates)-1]; r > 30 {
			t.Errorf("four answers after the throttle: rate %v, want CUBIC's slow climb from 28, not doubling", r)
		}
	})
	// At a learned policy: the target says its limit; the learned limit
	// paces (one every 100 ms at 10 per second), with no adaptive rate.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{})
		answerAll(t, p, 2)
		p.Feedback(pace.Feedback{Policies: []ratelimitheader.Policy{{Name: "api", Quota: 10, Window: time.Second}}})
		if r := p.Stats().Rate; r != 10 {
			t.Errorf("after a policy of 10 per second: rate %v, want 10", r)
		}
		at, rates := answerAll(t, p, 4)
		if want := []time.Duration{0, 100 * ms, 200 * ms, 300 * ms}; !slices.Equal(at, want) || rates[3] != 10 {
			t.Errorf("granted at %v with rate %v, want %v at 10", at, rates[3], want)
		}
	})
}

func TestSlowStartGrowsOnlyWhenUsed(t *testing.T) {
	// One request a second: the rate (5 per second) never holds work back,
	// so it is not raised — a rate the client does not use says nothing.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{})
		for range 5 {
			answerAll(t, p, 1)
			time.Sleep(time.Second)
		}
		if r := p.Stats().Rate; r != 5 {
			t.Errorf("after 5 requests a second apart: rate %v, want 5", r)
		}
	})
	// Answers a second after their requests: the rate doubles at most once
	// per round trip. Requests at 0 and 200 ms (5 per second), answered at
	// 1 s and 1.2 s: the first answer doubles the rate; the second, for a
	// request sent before that, does not.
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, pace.Options{})
		start := time.Now()
		a, _ := p.Reserve(1)
		b, _ := p.Reserve(1)
		c, _ := p.Reserve(1) // waits: the rate holds work back
		<-a.Ready()
		<-b.Ready()
		time.Sleep(time.Second - time.Since(start))
		p.Feedback(pace.Feedback{Sent: start})
		time.Sleep(200 * ms)
		p.Feedback(pace.Feedback{Sent: start.Add(200 * ms)})
		if r := p.Stats().Rate; r != 10 {
			t.Errorf("after two answers of one round trip: rate %v, want 10 (one doubling)", r)
		}
		c.Cancel()
	})
}

func TestNoSlowStart(t *testing.T) {
	for _, c := range []struct {
		name string
		opts pace.Options
		want []time.Duration // of 4 unit costs reserved at once
		rate float64         // Stats().Rate after them
	}{
		// A rate learned before (the relay passes it back as Initial)
		// runs at once: 40 per second from the first request.
		{"Initial 40", pace.Options{Adaptive: pace.AdaptiveOptions{Initial: 40}}, []time.Duration{0, 25 * ms, 50 * ms, 75 * ms}, 40},
		// A configured limit is the target's: nothing to probe for.
		{"a configured limit of 50/s", pace.Options{Limits: []sluice.Limit{{Name: "api", Quota: 50, Window: time.Second}}}, []time.Duration{0, 20 * ms, 40 * ms, 60 * ms}, 50},
		// Initial +Inf: unlimited until the first throttle.
		{"Initial +Inf", pace.Options{Adaptive: pace.AdaptiveOptions{Initial: math.Inf(1)}}, []time.Duration{0, 0, 0, 0}, math.Inf(1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newPacer(t, c.opts)
				at, rates := answerAll(t, p, 4)
				if !slices.Equal(at, c.want) || rates[3] != c.rate {
					t.Errorf("granted at %v, rate %v; want %v, %v", at, rates[3], c.want, c.rate)
				}
			})
		})
	}
}
