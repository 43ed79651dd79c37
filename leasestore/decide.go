package leasestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/lease"
)

// decide spends cost from e's Holder, or says why not. e is nil for a key
// beyond MaxKeys.
func (s *Store) decide(ll *leasedLimit, e *entry, key string, limit sluice.Limit, cost float64) (sluice.Decision, error) {
	for retried := false; ; retried = true {
		if e == nil && s.isClosed() {
			return sluice.Decision{}, ErrClosed
		}
		if e == nil {
			// Beyond MaxKeys: no Holder, refused whatever the failure
			// policy — under fail_open, a client that keeps MaxKeys keys
			// busy would make every new key unlimited. A cost no
			// partition holds still never fits.
			if held, err := ll.part(limit); err == nil && cost > held.Capacity()/float64(ll.Partitions) {
				return never(limit, cost, held.Capacity()/float64(ll.Partitions), ll.Partitions, refill(limit))
			}
			return sluice.Decision{Limit: limit, RetryAfter: ll.renew, ResetAfter: refill(limit)}, nil
		}
		if cost > e.burst {
			return e.never(cost)
		}
		e.ask(cost)
		_, ok, wait, err := e.h.Take(cost)
		switch {
		case err == nil && ok:
			return sluice.Decision{Allowed: true, Limit: limit, ResetAfter: e.reset}, nil
		case err == nil:
			return s.rejected(ll, e, key, limit, cost, wait)
		case errors.Is(err, lease.ErrCostTooLarge):
			return e.never(cost)
		case errors.Is(err, lease.ErrClosed) && !retried && !s.isClosed():
			// Stopped (idle, or replaced) since the lookup: the key's
			// new entry decides.
			if e, err = s.resolve(ll, key, limit, cost); err != nil {
				return sluice.Decision{}, err
			}
			continue
		case errors.Is(err, lease.ErrClosed):
			return sluice.Decision{}, ErrClosed
		}
		return sluice.Decision{}, fmt.Errorf("leasestore: limit %q: %w", limit.Name, err)
	}
}

// rejected is the decision when e's Holder could not pay: a rejection with
// the Holder's wait while it is starting (its first round under way),
// reaches the Coordinator or still holds usable partitions; the failure
// policy's decision when it is cut off and holds nothing usable.
func (s *Store) rejected(ll *leasedLimit, e *entry, key string, limit sluice.Limit, cost float64, wait time.Duration) (sluice.Decision, error) {
	st := e.h.Stats()
	if st.Syncs == 0 || st.Reachable || st.Usable > 0 {
		if s.isClosed() {
			return sluice.Decision{}, ErrClosed
		}
		return sluice.Decision{Limit: limit, RetryAfter: wait, ResetAfter: e.reset}, nil
	}
	return s.fail(ll, e, st.Members, key, limit, cost)
}

// fail decides by ll's failure policy: the Coordinator is out of reach
// and the key holds nothing usable (members is the member count its
// Holder last saw), or the key is beyond MaxKeys (e nil).
func (s *Store) fail(ll *leasedLimit, e *entry, members int, key string, limit sluice.Limit, cost float64) (sluice.Decision, error) {
	switch ll.Policy {
	case sluice.FailOpen:
		ll.failOpen.Add(1)
		return sluice.Decision{Allowed: true, Limit: limit}, nil
	case sluice.FailLocal:
		ll.failLocal.Add(1)
		if e != nil && members > 0 && ll.OutageShare > 0 {
			if loc := e.localFor(members); loc.ok && cost <= loc.limit.Capacity() {
				d, err := s.local.Allow(context.Background(), key, loc.limit, cost)
				d.Limit = limit
				return d, err
			}
		}
	default:
		ll.failClosed.Add(1)
	}
	reset := refill(limit)
	if e != nil {
		reset = e.reset
	}
	return sluice.Decision{Limit: limit, RetryAfter: ll.renew, ResetAfter: reset}, nil
}

// localFor is e's fail_local bucket for a member count: the outage share
// s of the limit divided among the members, its quota s×Q over members
// windows (which divides the rate exactly) and its burst s×B/members.
func (e *entry) localFor(members int) *localLimit {
	if loc := e.local.Load(); loc != nil && loc.members == members {
		return loc
	}
	loc := &localLimit{members: members}
	share, ok := cut(e.limit, e.ll.OutageShare)
	if ok && e.limit.Window <= sluice.MaxWindow/time.Duration(members) {
		share.Window *= time.Duration(members)
		share.Burst, ok = divide(share.Capacity(), members)
		loc.limit, loc.ok = share, ok && share.Validate() == nil
	}
	e.local.Store(loc)
	return loc
}

// divide is v/n rounded down to a millionth, a thousandth or a unit;
// false when it is below the step.
func divide(v float64, n int) (float64, bool) {
	for _, perUnit := range []float64{1e6, 1e3, 1} {
		d := float64(int64(v/float64(n)*perUnit*(1+1e-12))) / perUnit
		if d > 0 {
			return d, true
		}
	}
	return 0, false
}

// never is the decision of a cost above one partition's burst.
func (e *entry) never(cost float64) (sluice.Decision, error) {
	return never(e.limit, cost, e.burst, e.ll.Partitions, e.reset)
}

func never(limit sluice.Limit, cost, burst float64, partitions int, reset time.Duration) (sluice.Decision, error) {
	return sluice.Decision{Limit: limit, RetryAfter: sluice.Never, ResetAfter: reset},
		fmt.Errorf("%w: cost %v for limit %q: above one partition's burst %v (the leased burst cut into %d partitions)", sluice.ErrCostExceedsLimit, cost, limit.Name, burst, partitions)
}

func (s *Store) isClosed() bool {
	s.life.RLock()
	defer s.life.RUnlock()
	return s.closed
}

// AllowAll decides several limits as one; see sluice.Limiter. When none
// is leased, Next decides them all, with Next's guarantees. Otherwise
// every request is checked first (nothing is spent on bad input); then
// Next decides the limits not leased, as one call in mode, and then each
// leased limit is taken from its partitions, in their declared order:
//
//   - RejectionsCount is exact: every limit that admits its part is
//     charged.
//   - AllOrNothing is exact when Next rejects (no leased limit is
//     touched) and with a single leased limit and Next allowing; a leased
//     limit that rejects after Next allowed leaves Next's spends, and the
//     earlier leased limits', spent (a Concurrency slot is released): the
//     call under-admits, it never over-admits. A leased limit whose cost
//     can never fit rejects the call before Next is asked.
//
// A part not decided because another rejected first is reported allowed
// with Remaining 0: nothing was spent on it.
func (s *Store) AllowAll(ctx context.Context, reqs []sluice.Request, mode sluice.Mode, each []sluice.Decision) (sluice.Decision, error) {
	if err := sluice.ValidateRequests(reqs, mode, each); err != nil {
		return sluice.Decision{}, err
	}
	var leasedIdx, nextIdx []int
	for i, q := range reqs {
		if s.leasedOf(q.Limit.Name) != nil {
			leasedIdx = append(leasedIdx, i)
		} else {
			nextIdx = append(nextIdx, i)
		}
	}
	if len(leasedIdx) == 0 {
		return s.next.AllowAll(ctx, reqs, mode, each)
	}
	// Check the leased parts (and find their entries) before anything is
	// spent.
	entries := make([]*entry, len(reqs))
	for _, i := range leasedIdx {
		q := reqs[i]
		e, err := s.resolve(s.leasedOf(q.Limit.Name), q.Key, q.Limit, q.Cost)
		if err != nil {
			return sluice.Decision{}, fmt.Errorf("request %d: %w", i, err)
		}
		for _, j := range leasedIdx {
			if j >= i {
				break
			}
			if reqs[j].Limit.Name == q.Limit.Name && reqs[j].Key == q.Key {
				return sluice.Decision{}, fmt.Errorf("%w: requests %d and %d have the same limit name %q and key", sluice.ErrInvalidRequest, j, i, q.Limit.Name)
			}
		}
		entries[i] = e
	}
	ds := make([]sluice.Decision, len(reqs))
	var errs []error
	rejected := false
	for _, i := range leasedIdx {
		if e := entries[i]; e != nil && reqs[i].Cost > e.burst {
			var err error
			ds[i], err = e.never(reqs[i].Cost)
			errs, rejected = append(errs, fmt.Errorf("request %d: %w", i, err)), true
		}
	}
	if len(nextIdx) > 0 && !(rejected && mode == sluice.AllOrNothing) {
		sub := make([]sluice.Request, len(nextIdx))
		out := make([]sluice.Decision, len(nextIdx))
		for k, i := range nextIdx {
			sub[k] = reqs[i]
		}
		_, err := s.next.AllowAll(ctx, sub, mode, out)
		if err != nil && !errors.Is(err, sluice.ErrCostExceedsLimit) {
			return sluice.Decision{}, err // bad input, or Next failed: nothing decided here
		}
		if err != nil {
			errs = append(errs, err)
		}
		for k, i := range nextIdx {
			ds[i] = out[k]
			rejected = rejected || !out[k].Allowed
		}
	}
	for _, i := range leasedIdx {
		q := reqs[i]
		switch {
		case ds[i].RetryAfter == sluice.Never:
			continue
		case rejected && mode == sluice.AllOrNothing:
			ds[i] = notTried(q.Limit, entries[i])
			continue
		}
		d, err := s.decide(s.leasedOf(q.Limit.Name), entries[i], q.Key, q.Limit, q.Cost)
		if err != nil && !errors.Is(err, sluice.ErrCostExceedsLimit) {
			errs = append(errs, fmt.Errorf("request %d: %w", i, err))
			d = sluice.Decision{Limit: q.Limit}
		} else if err != nil {
			errs = append(errs, fmt.Errorf("request %d: %w", i, err))
		}
		ds[i] = d
		rejected = rejected || !d.Allowed
	}
	for _, i := range nextIdx {
		if ds[i].Limit.Name == "" { // Next was not asked: a leased part never fits
			ds[i] = notTried(reqs[i].Limit, nil)
		}
	}
	if rejected {
		// A Concurrency slot is held only when the call is allowed.
		for _, i := range nextIdx {
			if t := ds[i].Ticket; t != 0 {
				if err := s.next.Release(context.WithoutCancel(ctx), reqs[i].Key, reqs[i].Limit, t); err != nil {
					errs = append(errs, fmt.Errorf("request %d: release: %w", i, err))
				}
				ds[i].Ticket = 0
			}
		}
	}
	copy(each, ds)
	return sluice.Combine(ds), errors.Join(errs...)
}

// notTried reports a part left undecided because another rejected first:
// allowed, nothing known to remain, nothing spent.
func notTried(limit sluice.Limit, e *entry) sluice.Decision {
	d := sluice.Decision{Allowed: true, Limit: limit}
	if e != nil {
		d.ResetAfter = e.reset
	}
	return d
}
