package limittest

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// ChargeTimelines are the conformance tables of sluice.Charger: a cost
// charged after the work runs the key into debt, at most one capacity
// deep, and later calls wait it out.
var ChargeTimelines = []Timeline{
	{
		Name:  "TokenBucketDebt",
		Limit: lim("debt", sluice.TokenBucket, 2, s1, 5),
		Steps: []Step{
			{At: 0, N: 3, Want: allow(2, 1500*ms)},
			// 2 − 6 = −4: a debt of 4, full again in (5 + 4)/2 s.
			{At: 0, Cost: 6, Charge: true, Want: allow(0, 4500*ms)},
			{At: 0, Want: reject(0, 2500*ms, 4500*ms)},
			// −4 + 2 × 2.499 = 0.998.
			{At: 2499 * ms, Want: reject(0.998, ms, 2001*ms)},
			{At: 2500 * ms, Want: allow(0, 2500*ms)},
		},
	},
	{
		Name:  "GCRADebt",
		Limit: lim("debt", sluice.GCRA, 2, s1, 5),
		Steps: []Step{
			{At: 0, N: 3, Want: allow(2, 1500*ms)},
			{At: 0, Cost: 6, Charge: true, Want: allow(0, 4500*ms)},
			{At: 0, Want: reject(0, 2500*ms, 4500*ms)},
			{At: 2499 * ms, Want: reject(0.998, ms, 2001*ms)},
			{At: 2500 * ms, Want: allow(0, 2500*ms)},
		},
	},
	{
		// A charge of 100 on a capacity of 5: the debt stops at −5, the rest
		// is forgiven.
		Name:  "DebtFloor",
		Limit: lim("floor", sluice.TokenBucket, 2, s1, 5),
		Steps: []Step{
			{At: 0, Cost: 100, Charge: true, Want: allow(0, 5*s1)},
			{At: 0, Want: reject(0, 3*s1, 5*s1)},
			{At: 3 * s1, Want: allow(0, 2500*ms)},
		},
	},
	{
		// The window's count goes up to 2 × quota; the debt ends with the
		// window.
		Name:  "FixedWindowDebt",
		Limit: lim("debt", sluice.FixedWindow, 10, time.Minute, 0),
		Steps: []Step{
			{At: 0, N: 4, Want: allow(6, time.Minute)},
			{At: s1, Cost: 30, Charge: true, Want: allow(0, 59*s1)},
			{At: 2 * s1, Want: reject(0, 58*s1, 58*s1)},
			{At: time.Minute, Want: allow(9, time.Minute)},
		},
	},
	{
		// 15 charged in the first window: in the next one its weight falls
		// with time, 15 × (60 − e)/60 + 1 ≤ 10 from e = 24 s.
		Name:  "SlidingWindowDebt",
		Limit: lim("debt", sluice.SlidingWindow, 10, time.Minute, 0),
		Steps: []Step{
			{At: 0, Cost: 15, Charge: true, Want: allow(0, 2*time.Minute)},
			{At: 30 * s1, Want: reject(0, 54*s1, 90*s1)},
			{At: 83 * s1, Want: reject(0.75, s1, 37*s1)}, // 15 × 37/60 = 9.25 counted
			{At: 84 * s1, Want: allow(0, 96*s1)},
		},
	},
}

// charge runs the Charger conformance: the tables, the algorithms that
// refuse a charge (nothing spent), and bad input.
func (s *suite) charge(t *testing.T) {
	t.Parallel()
	l, _ := s.store(t)
	if _, ok := l.(sluice.Charger); !ok {
		t.Skip("the store is not a sluice.Charger")
	}
	t.Run("Timelines", func(t *testing.T) { s.playAll(t, ChargeTimelines) })
	t.Run("Refused", func(t *testing.T) {
		t.Parallel()
		l, _ := s.store(t)
		c := l.(sluice.Charger)
		ctx := context.Background()
		for _, alg := range []sluice.Algorithm{sluice.SlidingLog, sluice.LeakyBucket, sluice.Concurrency} {
			limit := lim("refused-"+alg.String(), alg, 3, time.Minute, 0)
			key := s.key(t, alg.String())
			if d, err := c.Charge(ctx, key, limit, 1); !errors.Is(err, sluice.ErrInvalidRequest) || d.Allowed {
				t.Errorf("%v: Charge = %+v, %v; want ErrInvalidRequest", alg, d, err)
			}
			if d, err := l.Allow(ctx, key, limit, 1); err != nil || !d.Allowed || d.Remaining != 2 {
				t.Errorf("%v after a refused charge: %+v, %v; want 2 left of 3 (nothing spent)", alg, d, err)
			}
		}
		huge := sluice.Limit{Name: "refused-huge", Quota: 4e9, Window: s1}
		if _, err := c.Charge(ctx, s.key(t, "huge"), huge, 1); !errors.Is(err, sluice.ErrInvalidRequest) {
			t.Errorf("a limit too large for a debt: %v, want ErrInvalidRequest", err)
		}
	})
	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		l, _ := s.store(t)
		c := l.(sluice.Charger)
		ctx := context.Background()
		good := lim("charge-bad", sluice.TokenBucket, 5, s1, 0)
		for _, b := range []struct {
			key   string
			limit sluice.Limit
			cost  float64
			want  error
		}{
			{"k", good, 0, sluice.ErrInvalidCost},
			{"k", good, -1, sluice.ErrInvalidCost},
			{"k", good, math.NaN(), sluice.ErrInvalidCost},
			{"k", good, math.Inf(1), sluice.ErrInvalidCost},
			{"", good, 1, sluice.ErrInvalidKey},
			{"k", sluice.Limit{Name: "charge-bad", Quota: -1, Window: s1}, 1, sluice.ErrInvalidLimit},
		} {
			key := b.key
			if key != "" {
				key = s.key(t, key)
			}
			if d, err := c.Charge(ctx, key, b.limit, b.cost); !errors.Is(err, b.want) || d.Allowed {
				t.Errorf("Charge(key %q, %v, cost %v) = %+v, %v; want %v", b.key, b.limit, b.cost, d, err, b.want)
			}
		}
		if d, err := l.Allow(ctx, s.key(t, "k"), good, 1); err != nil || d.Remaining != 4 {
			t.Errorf("after the refused charges: %+v, %v; want 4 left of 5", d, err)
		}
	})
}
