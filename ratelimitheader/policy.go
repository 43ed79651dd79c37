package ratelimitheader

import (
	"math"
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

// LimitOf is a decision as the RateLimit member named name: r is its
// Remaining rounded down to a whole unit, t is ResetOf(d).
func LimitOf(name string, d sluice.Decision) Limit {
	return Limit{Name: name, Remaining: remainingOf(&d), Reset: decisionReset(&d)}
}

// ResetOf is the t of a decision, in whole seconds rounded up: for an
// allowed decision, when its key is full again (ResetAfter); for a
// rejection, when the same cost would fit (RetryAfter), at least one
// second — the wait FormatRetryAfter writes, so that a response's
// Retry-After is never earlier than the t of a limit that rejected it; and
// NoReset for a cost that can never fit (RetryAfter sluice.Never). Every
// transport writes a decision's t with it.
func ResetOf(d sluice.Decision) time.Duration { return decisionReset(&d) }

func decisionReset(d *sluice.Decision) time.Duration {
	switch {
	case d.Allowed:
		return wholeSeconds(ceilSeconds(max(d.ResetAfter, 0)))
	case d.RetryAfter == sluice.Never:
		return NoReset
	}
	return wholeSeconds(retrySeconds(d.RetryAfter))
}

// remainingOf is a decision's r: its Remaining rounded down.
func remainingOf(d *sluice.Decision) int64 { return int64(math.Floor(d.Remaining)) }

// retrySeconds is a wait as a rejection reports it, in Retry-After and in
// a rejecting limit's t: whole seconds rounded up, at least 1.
func retrySeconds(wait time.Duration) int64 { return ceilSeconds(max(wait, time.Second)) }

// wholeSeconds is s seconds as a Duration, the largest whole number of
// seconds one holds when s is more.
func wholeSeconds(s int64) time.Duration { return time.Duration(min(s, maxSeconds)) * time.Second }
