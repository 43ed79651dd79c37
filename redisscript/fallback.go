package redisscript

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice"
)

// policyFor is c's policy now.
func (s *Store) policyFor(c *compiled) sluice.FailurePolicy {
	if c.livePolicy {
		if p, ok := s.policyOf(c.params.Limit); ok && p.Valid() {
			return p
		}
	}
	return c.policy
}

// fallback decides reqs by their policies, Redis being unreachable. A
// cost that can never fit is refused as it would be by Redis, whatever the
// policy. FailLocal parts are decided by the in-process limiter, at the
// limit divided among Instances; one too large for that share is rejected
// as by FailClosed. When a part rejects the call (FailClosed, a cost that
// never fits) the local parts are decided as part of a rejected call: in
// AllOrNothing mode nothing is spent on them.
func (s *Store) fallback(ctx context.Context, rs []request, reqs []sluice.Request, mode sluice.Mode) ([]sluice.Decision, error) {
	ds := make([]sluice.Decision, len(rs))
	var local []sluice.Request
	var where []int
	var errs []error
	rejected := false
	for i, r := range rs {
		limit := r.c.params.Limit
		closed := sluice.Decision{Limit: limit, RetryAfter: s.closedRA}
		policy := s.policyFor(r.c)
		switch {
		case r.cost > r.c.ints.Cap:
			ds[i], rejected = sluice.Decision{Limit: limit, RetryAfter: sluice.Never}, true
			err := r.c.params.NeverError(r.cost)
			if len(rs) > 1 {
				err = fmt.Errorf("request %d: %w", i, err)
			}
			errs = append(errs, err)
		case policy == sluice.FailOpen:
			s.failOpen.Add(1)
			ds[i] = sluice.Decision{Allowed: true, Limit: limit}
		case policy == sluice.FailClosed:
			s.failClosed.Add(1)
			ds[i], rejected = closed, true
		case reqs[i].Cost > r.c.local.Capacity():
			s.failLocal.Add(1) // too large for this process's share
			ds[i], rejected = closed, true
		default:
			s.failLocal.Add(1)
			q := reqs[i]
			q.Limit = r.c.local
			local, where = append(local, q), append(where, i)
		}
	}
	if len(local) > 0 {
		if rejected {
			// Decide the local parts within a call that is rejected.
			local = append(local, rejectAll)
		}
		out := make([]sluice.Decision, len(local))
		_, err := s.local.AllowAll(ctx, local, mode, out)
		if err != nil && !rejected {
			errs = append(errs, err)
		}
		for k, i := range where {
			ds[i] = out[k]
			ds[i].Limit = rs[i].c.params.Limit
		}
	}
	return ds, errors.Join(errs...)
}

// rejectAll is a request that never fits, added to the local parts of a
// call another part rejects.
var rejectAll = sluice.Request{
	Key:   "rejected",
	Limit: sluice.Limit{Name: "redisstore.rejected", Quota: 1, Window: time.Second},
	Cost:  2,
}

// scaleDown is limit divided among n processes, for FailLocal. A bucket
// (TokenBucket, GCRA, LeakyBucket) keeps its quota over n windows, which
// divides its rate exactly, and divides its burst; the other algorithms
// divide their quota. Divided amounts are rounded down, to the limit's
// resolution if the result is a valid limit, else to thousandths, else to
// units, and are at least that step (whole units for SlidingLog and
// Concurrency). A limit that cannot be divided into a valid one is kept
// whole: each process then allows the whole limit while Redis is away.
func scaleDown(l sluice.Limit, n int) sluice.Limit {
	if n <= 1 {
		return l
	}
	for _, perUnit := range []float64{1e6, 1e3, 1} {
		if l.WholeUnits() && perUnit > 1 {
			continue
		}
		div := func(v float64) float64 {
			return max(1/perUnit, math.Floor(v/float64(n)*perUnit*(1+1e-12))/perUnit)
		}
		scaled := l
		if l.HasBurst() && l.Window <= sluice.MaxWindow/time.Duration(n) {
			scaled.Window = l.Window * time.Duration(n)
			scaled.Burst = div(l.Capacity())
		} else {
			scaled.Quota = div(l.Quota)
			if l.Burst != 0 {
				scaled.Burst = div(l.Burst)
			}
		}
		if l.DelayThreshold != 0 {
			scaled.DelayThreshold = min(div(l.DelayThreshold), scaled.Capacity())
		}
		if scaled.Validate() == nil {
			return scaled
		}
	}
	return l
}
