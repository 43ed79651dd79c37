package enforce

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice"
)

// Request is one request's part in its rule's decision: the key and the
// cost of each of the rule's quotas (Keys[i] and Costs[i] for Quotas[i]),
// found by the transport — a cost as the limiter takes it, the quota's
// Cost or 1 where the request says nothing else.
type Request struct {
	Keys  [MaxQuotas]string
	Costs [MaxQuotas]float64
}

// Verdict is what a rule decided for one request, and what the transport
// must do about it.
type Verdict struct {
	Outcome Outcome
	// Serve reports whether the request runs: it was allowed, rejected in
	// shadow mode, or its limiter failed under sluice.FailOpen. A request
	// that does not run holds nothing: Decide has already released the
	// concurrency slots its decisions took.
	Serve bool
	// Held reports whether the request, which runs, holds concurrency
	// slots: Release them once it has finished.
	Held bool
	// Never reports a rejection that retrying cannot help: a cost beyond a
	// limit's capacity (the limiter's error wraps sluice.ErrCostExceedsLimit,
	// or the combined RetryAfter is sluice.Never).
	Never bool
	// Err is the limiter's error: under Failed what failed, under Invalid
	// why the cost was refused (wrapping sluice.ErrInvalidCost), for a
	// rejection that never fits the error wrapping
	// sluice.ErrCostExceedsLimit; nil otherwise.
	Err error

	one      [1]sluice.Decision // the decision of a rule of one quota
	many     []sluice.Decision  // those of a rule of several
	combined sluice.Decision    // theirs combined
}

// Combined is the decisions combined (sluice.Combine: allowed only if all
// are; the rejecting one with the longest RetryAfter; the Delay to wait)
// when the limiter decided, zero under Failed and Invalid — except its
// Ticket, which means nothing (Decisions hold the tickets). It points
// into v (no copy on the request path): it is valid while v is.
func (v *Verdict) Combined() *sluice.Decision {
	if v.many == nil && v.Outcome != Failed && v.Outcome != Invalid {
		return &v.one[0]
	}
	return &v.combined
}

// Decisions are the limiter's decisions, one per quota of the rule in
// order; under Failed and Invalid, what the limiter returned with its
// error. For a rule of one quota the slice is in v (no allocation): it is
// valid while v is; keep v, not the slice.
func (v *Verdict) Decisions() []sluice.Decision {
	if v.many != nil {
		return v.many
	}
	return v.one[:]
}

// Decide asks l about req with one call — Allow for a rule of one quota
// (allocating nothing), AllowAll in the rule's Mode for several — and
// writes the answer, classified, into v (a Verdict of the caller's, on its
// stack: the request path copies no decision):
//
//   - an error wrapping sluice.ErrInvalidCost: Invalid, the client's
//     mistake (a cost finer than a limit's resolution, say);
//   - another error, except sluice.ErrCostExceedsLimit: Failed, served
//     under sluice.FailOpen, refused under sluice.FailClosed;
//   - a rejection, or a cost that can never fit: Rejected, or
//     ShadowRejected (served) in shadow mode;
//   - otherwise Allowed.
//
// A request that does not run has its concurrency slots released before
// Decide returns (memstore and redisstore never take one for a rejected
// request, but the Limiter contract does not promise it); one that runs
// must call Release when it has finished, if the Verdict says Held. The
// transport finds the keys and costs, waits out Combined.Delay, and
// writes the response.
func (r *CompiledRule) Decide(ctx context.Context, l sluice.Limiter, req *Request, v *Verdict) {
	*v = Verdict{}
	if len(r.Quotas) == 1 {
		v.one[0], v.Err = l.Allow(ctx, req.Keys[0], r.Quotas[0].Limit, req.Costs[0])
	} else {
		v.many, v.Err = r.allowAll(ctx, l, req)
	}
	v.classify(r)
	ds := v.Decisions()
	if !v.Serve {
		r.Release(ctx, l, req, ds)
		return
	}
	for i := range ds {
		v.Held = v.Held || ds[i].Ticket != 0
	}
}

// allowAll decides a rule of several quotas as one.
func (r *CompiledRule) allowAll(ctx context.Context, l sluice.Limiter, req *Request) ([]sluice.Decision, error) {
	n := len(r.Quotas)
	reqs := make([]sluice.Request, n)
	for i := range reqs {
		reqs[i] = sluice.Request{Key: req.Keys[i], Limit: r.Quotas[i].Limit, Cost: req.Costs[i]}
	}
	ds := make([]sluice.Decision, n)
	_, err := l.AllowAll(ctx, reqs, r.Mode, ds)
	return ds, err
}

// classify sets v's Outcome, Serve, Never and Combined from its decisions
// and Err, under r's policies.
func (v *Verdict) classify(r *CompiledRule) {
	if v.Err != nil {
		v.Never = errors.Is(v.Err, sluice.ErrCostExceedsLimit)
		switch {
		case errors.Is(v.Err, sluice.ErrInvalidCost):
			v.Outcome = Invalid
			return
		case !v.Never:
			v.Outcome = Failed
			v.Serve = r.OnError != sluice.FailClosed
			return
		}
	}
	c := &v.one[0]
	if v.many != nil {
		v.combined = sluice.Combine(v.many)
		c = &v.combined
	}
	v.Never = v.Never || c.RetryAfter == sluice.Never
	switch {
	case c.Allowed && !v.Never:
		v.Outcome, v.Serve = Allowed, true
	case r.Shadow:
		v.Outcome, v.Serve = ShadowRejected, true
	default:
		v.Outcome = Rejected
	}
}

// Release gives back the concurrency slots that ds, the decisions of req,
// hold (their Tickets), with a context that outlives a client that went
// away: a slot not released is held until its limit's window ends. A
// release that fails is not reported: the slot frees itself then.
func (r *CompiledRule) Release(ctx context.Context, l sluice.Limiter, req *Request, ds []sluice.Decision) {
	var keep context.Context // made only when a slot is held
	for i := range ds {
		if t := ds[i].Ticket; t != 0 {
			if keep == nil {
				keep = context.WithoutCancel(ctx)
			}
			_ = l.Release(keep, req.Keys[i], r.Quotas[i].Limit, t)
		}
	}
}
