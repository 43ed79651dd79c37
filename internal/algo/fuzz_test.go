package algo

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice"
)

// FuzzTraces runs fuzzed traces through every algorithm: no panic, every
// decision consistent (see checkDecision).
func FuzzTraces(f *testing.F) {
	f.Fuzz(rapid.MakeFuzz(func(rt *rapid.T) {
		alg := rapid.SampledFrom(algorithms).Draw(rt, "algorithm")
		c := genCase(alg).Draw(rt, "case")
		p, _ := Compile(c.Limit)
		for i, e := range run(rt, c, NewState(alg)) {
			if err := checkDecision(p, e); err != nil {
				rt.Fatalf("call %d: %v", i, err)
			}
		}
	}))
}

// FuzzCompile feeds arbitrary limit fields and costs: Validate and Cost
// either refuse them or the algorithm answers without panicking, at any
// instant, with a consistent decision.
func FuzzCompile(f *testing.F) {
	// window is in microseconds.
	f.Add(uint8(0), 5.0, int64(1e6), 0.0, 0.0, 1.0, int64(0))
	f.Add(uint8(5), 2.0, int64(1e6), 3.0, 1.0, 1.0, int64(math.MaxInt64))
	f.Add(uint8(3), 1e4, int64(3.6e9), 0.0, 0.0, 3.0, int64(-1))
	f.Add(uint8(4), 1e-6, int64(1), 0.0, 0.0, 1e-6, int64(math.MinInt64))
	f.Fuzz(func(t *testing.T, alg uint8, quota float64, window int64, burst, delay, cost float64, now int64) {
		l := sluice.Limit{Name: "fuzz", Algorithm: sluice.Algorithm(alg), Quota: quota, Window: time.Duration(window) * time.Microsecond, Burst: burst, DelayThreshold: delay}
		p, err := Compile(l)
		if err != nil {
			return
		}
		atoms, err := p.Cost(cost)
		if err != nil {
			return
		}
		// Instants near the ends of the clock are out of scope for stores
		// (they are Unix nanoseconds of real clocks), but must not panic.
		s := NewState(l.Algorithm)
		s.Init(p, now)
		for i := range 3 {
			d, err := s.Step(p, Call{Now: now, Cost: atoms, Ticket: uint64(i + 1)}, true)
			if err == nil && !d.Allowed() && d.RetryAfter() <= 0 && now > math.MinInt64/2 && now < math.MaxInt64/2 {
				t.Fatalf("rejected with RetryAfter %v", d.RetryAfter())
			}
		}
	})
}
