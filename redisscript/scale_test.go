package redisscript

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// FailLocal's share of a limit is a valid limit that, taken n times, never
// allows more than the limit — no greater rate, no greater capacity, no
// greater threshold — unless the share is the smallest amount it can be
// (one unit of a whole-unit limit). And it is a share, not the whole,
// whenever the limit can be divided: always, but for windows so long that
// the exact arithmetic has no room left (a bucket's window beyond
// MaxWindow/n).
func TestScaleDown(t *testing.T) {
	quotas := []float64{1, 2, 3, 7, 10, 100, 1e3, 12345, 0.5, 3.7, 1e9}
	windows := []time.Duration{time.Microsecond * 7, time.Millisecond, time.Second, 7 * time.Second, time.Hour, 24 * time.Hour, sluice.MaxWindow}
	for alg := sluice.TokenBucket; alg <= sluice.Concurrency; alg++ {
		for _, q := range quotas {
			for _, w := range windows {
				l := sluice.Limit{Name: "l", Algorithm: alg, Quota: q, Window: w}
				if l.HasBurst() {
					l.Burst = q * 3
				}
				if alg == sluice.LeakyBucket {
					l.DelayThreshold = l.Capacity() / 2
				}
				if l.Validate() != nil {
					continue
				}
				for _, n := range []int{2, 3, 7, 1000} {
					s := scaleDown(l, n)
					if err := s.Validate(); err != nil {
						t.Fatalf("%v / %d = %v: %v", l, n, s, err)
					}
					rate := func(l sluice.Limit) float64 { return l.Quota / l.Window.Seconds() }
					if s == l {
						if !(l.WholeUnits() && q == 1) && w <= sluice.MaxWindow/time.Duration(n) {
							t.Errorf("%v / %d: kept whole", l, n)
						}
						continue
					}
					// more reports v as more than a share of whole, unless it
					// is the least amount of its rounding step.
					more := func(v, whole float64) bool {
						return float64(n)*v > whole*(1+1e-9) && v != 1e-6 && v != 1e-3 && v != 1
					}
					if more(rate(s)*s.Window.Seconds(), rate(l)*s.Window.Seconds()) || more(s.Capacity(), l.Capacity()) ||
						more(s.DelayThreshold, l.DelayThreshold) {
						t.Errorf("%v / %d = %v: more than a share", l, n, s)
					}
				}
			}
		}
	}
}
