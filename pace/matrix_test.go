package pace_test

import (
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/pace"
)

// TestSimulationMatrix runs the 5×L simulation against targets beyond the
// issue's (other bursts, rates and algorithms) and logs the figures that
// docs/BENCHMARKS.md records. It takes minutes: run it with
// SLUICE_SIM=1 (make sim).
func TestSimulationMatrix(t *testing.T) {
	if os.Getenv("SLUICE_SIM") == "" {
		t.Skip("SLUICE_SIM not set: the simulation matrix runs with make sim")
	}
	for _, l := range []sluice.Limit{
		{Name: "a", Quota: 50, Window: time.Second},
		{Name: "a", Quota: 50, Window: time.Second, Burst: 10},
		{Name: "a", Quota: 500, Window: time.Second},
		{Name: "a", Quota: 5, Window: time.Second},
		{Name: "a", Quota: 50, Window: time.Second, Algorithm: sluice.GCRA, Burst: 10},
		{Name: "a", Quota: 50, Window: time.Second, Algorithm: sluice.FixedWindow},
		{Name: "a", Quota: 50, Window: time.Second, Algorithm: sluice.SlidingWindow},
	} {
		for _, c := range []struct {
			name  string
			f     fields
			holds pace.HoldScope
		}{
			{"RateLimit fields", rateLimitFields, pace.HoldTarget},
			{"429 + Retry-After only", retryAfterOnly, pace.HoldTarget},
			{"429 + Retry-After only, HoldRequest", retryAfterOnly, pace.HoldRequest},
		} {
			t.Run(l.String()+"/"+c.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					res, _ := simulateWith(t, l, c.f, pace.Options{}, pace.RetryOptions{Holds: c.holds}, simFor)
					t.Logf("%v, %s, limit unknown: %v", l, c.name, res)
				})
			})
		}
	}
}
