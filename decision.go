package sluice

import (
	"math"
	"time"
)

// Never is the RetryAfter of a cost that can never be allowed because it
// exceeds the limit's capacity. It is the largest time.Duration.
const Never time.Duration = math.MaxInt64

// Decision is a Limiter's answer for one key and cost at one instant.
//
// Durations are exact to the microsecond under the store's clock: RetryAfter
// is the first instant at which the same cost would be allowed if nothing
// else spent on the key in between.
type Decision struct {
	// Allowed reports whether the cost was admitted (and spent).
	Allowed bool

	// Limit is the limit this decision is about; in a combined decision,
	// the one that decided (see Limiter.AllowAll).
	Limit Limit

	// Remaining is the cost that could still be spent on the key right after
	// this decision, in cost units, rounded down to the resolution of one
	// millionth. For a SlidingWindow it is an estimate by the algorithm's own
	// weighting.
	Remaining float64

	// RetryAfter is zero when Allowed; otherwise how long until the same
	// cost would be allowed, or Never when it exceeds the capacity.
	RetryAfter time.Duration

	// ResetAfter is how long until the key is back to its full capacity
	// (empty window, full bucket, drained queue, no holders) if nothing more
	// is spent. Zero when it is full now.
	ResetAfter time.Duration

	// Delay is, for an allowed LeakyBucket decision, how long the caller must
	// wait before doing the work; zero otherwise.
	Delay time.Duration

	// Ticket identifies, for an allowed Concurrency decision, the slots it
	// holds: pass it to Limiter.Release. Zero otherwise.
	Ticket uint64
}

// Never reports whether the cost can never be allowed under the limit.
func (d Decision) Never() bool { return !d.Allowed && d.RetryAfter == Never }

// Combine is the decision of several limits of one request, as
// Limiter.AllowAll defines it: allowed only if all are; when rejected, the
// rejecting decision with the longest RetryAfter (the first on a tie); when
// allowed, the decision with the least Remaining (the first on a tie), with
// Delay the longest of all; Ticket always zero. ds must not be empty.
// Stores use it; callers have AllowAll.
func Combine(ds []Decision) Decision {
	pick, delay := 0, time.Duration(0)
	allowed := true
	for _, d := range ds {
		allowed = allowed && d.Allowed
		delay = max(delay, d.Delay)
	}
	for i, d := range ds[1:] {
		p := &ds[pick]
		if allowed && d.Remaining < p.Remaining ||
			!allowed && !d.Allowed && (p.Allowed || d.RetryAfter > p.RetryAfter) {
			pick = i + 1
		}
	}
	d := ds[pick]
	d.Allowed = allowed
	if allowed {
		d.Delay = delay
	}
	d.Ticket = 0
	return d
}
