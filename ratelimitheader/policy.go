package ratelimitheader

import (
	"time"

	"github.com/sluicehq/sluice"
)

// PolicyOf is a limit as a RateLimit-Policy member, in the whole numbers
// the field carries: its quota per whole seconds at the limit's rate,
// rounded down (100 per 100 ms is q=1000;w=1, 10 per 90 s is q=10;w=90);
// for a concurrency limit, its slots, unit "concurrent-requests" and no
// window.
func PolicyOf(l sluice.Limit) Policy {
	if l.Algorithm == sluice.Concurrency {
		return Policy{Name: l.Name, Quota: int64(l.Quota), Unit: "concurrent-requests"}
	}
	w := max(time.Second, (l.Window+time.Second-1)/time.Second*time.Second)
	q := l.Quota * float64(w) / float64(l.Window)
	return Policy{Name: l.Name, Quota: max(int64(q), 0), Window: w}
}
