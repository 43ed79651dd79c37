package limittest

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice"
)

// x/time/rate's published tables (rate_test.go, TestLimiterBurst1 and
// TestLimiterBurst3): rate.NewLimiter(10, b) is a token bucket of 10 per
// second and burst b; t0…t9 are 100 ms apart. x/time/rate lists the tokens
// before each call; sluice reports what remains after it, so an allowed
// row's Remaining is x/time/rate's tokens minus n. Its last Burst3 row,
// AllowN(t9, 0), is left out: sluice refuses a cost of zero.
var xTimeRateTables = []Timeline{
	{
		Name:  "NewLimiter(10,1)",
		Limit: lim("xtime", sluice.TokenBucket, 10, s1, 1),
		Steps: []Step{
			{At: 0, Want: allow(0, 100*ms)},                // {t0, 1, 1, true}
			{At: 0, N: 2, Want: reject(0, 100*ms, 100*ms)}, // {t0, 0, 1, false} ×2
			{At: 100 * ms, Want: allow(0, 100*ms)},         // {t1, 1, 1, true}
			{At: 100 * ms, N: 2, Want: reject(0, 100*ms, 100*ms)},
			{At: 200 * ms, Cost: 2, Want: never(1, 0)}, // {t2, 1, 2, false}: burst 1, n=2 always fails
			{At: 200 * ms, Want: allow(0, 100*ms)},     // {t2, 1, 1, true}
			{At: 200 * ms, Want: reject(0, 100*ms, 100*ms)},
		},
	},
	{
		Name:  "NewLimiter(10,3)",
		Limit: lim("xtime", sluice.TokenBucket, 10, s1, 3),
		Steps: []Step{
			{At: 0, Cost: 2, Want: allow(1, 200*ms)},              // {t0, 3, 2, true}
			{At: 0, Cost: 2, Want: reject(1, 100*ms, 200*ms)},     // {t0, 1, 2, false}
			{At: 0, Want: allow(0, 300*ms)},                       // {t0, 1, 1, true}
			{At: 0, Want: reject(0, 100*ms, 300*ms)},              // {t0, 0, 1, false}
			{At: 100 * ms, Cost: 4, Want: never(1, 200*ms)},       // {t1, 1, 4, false}
			{At: 200 * ms, Want: allow(1, 200*ms)},                // {t2, 2, 1, true}
			{At: 300 * ms, Want: allow(1, 200*ms)},                // {t3, 2, 1, true}
			{At: 400 * ms, Want: allow(1, 200*ms)},                // {t4, 2, 1, true}
			{At: 400 * ms, Want: allow(0, 300*ms)},                // {t4, 1, 1, true}
			{At: 400 * ms, N: 2, Want: reject(0, 100*ms, 300*ms)}, // {t4, 0, 1, false} ×2
			{At: 900 * ms, Cost: 3, Want: allow(0, 300*ms)},       // {t9, 3, 3, true}
		},
	},
}

func (s *suite) xTimeRateTables(t *testing.T) { s.playAll(t, xTimeRateTables) }

// xTimeRateDifferential replays random integer traces (whole rates, bursts
// and costs, times on a millisecond grid) on the store and on
// x/time/rate's Limiter, the oracle: every call must get the same answer
// and leave the same tokens.
func (s *suite) xTimeRateDifferential(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, seed(t)))
	l, clock := s.store(t)
	for trace := range 200 {
		r := 1 + rng.IntN(50)
		b := 1 + rng.IntN(10)
		if trace < 100 { // half on the published limiters
			r, b = 10, 1+2*(trace%2) // bursts 1 and 3
		}
		limit := lim("xtime", sluice.TokenBucket, float64(r), s1, float64(b))
		oracle := rate.NewLimiter(rate.Limit(r), b)
		key := s.key(t, "trace-"+strconv.Itoa(trace))
		now := Epoch
		for i := range 100 {
			if rng.IntN(3) > 0 {
				now = now.Add(time.Duration(rng.IntN(300)) * ms)
			}
			n := 1 + rng.IntN(b+1)
			clock.Set(now)
			d, err := l.Allow(ctx, key, limit, float64(n))
			want := oracle.AllowN(now, n)
			if d.Allowed != want || (err != nil) != (n > b) {
				t.Fatalf("trace %d (rate %d, burst %d), call %d at +%v, n=%d: allowed %v (err %v), x/time/rate %v",
					trace, r, b, i, now.Sub(Epoch), n, d.Allowed, err, want)
			}
			if tokens := oracle.TokensAt(now); math.Abs(tokens-d.Remaining) > 1e-6 {
				t.Fatalf("trace %d, call %d: remaining %v, x/time/rate has %v tokens", trace, i, d.Remaining, tokens)
			}
		}
	}
}
