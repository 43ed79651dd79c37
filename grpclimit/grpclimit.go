// Package grpclimit enforces rate limits on a gRPC server, as unary and
// stream server interceptors: which calls are counted (rules matching full
// method names, "/pkg.Service/Method" or a whole "/pkg.Service/*"), whose
// (a key: an incoming metadata value such as an API key, the method, the
// connection's peer address, an authenticated principal, or one global
// key), what they cost (static, computed, or declared by the client in
// metadata), and several limits per call in declared order — decided by
// any sluice.Limiter (memstore in one process, redisstore for a fleet). It
// is the gRPC twin of httplimit, with the same rules and the same keys.
//
// A rejected call ends with the status
//
//	code:    RESOURCE_EXHAUSTED
//	message: rate limited
//	details: google.rpc.RetryInfo{retry_delay: 20s}
//
// and the response header metadata
//
//	ratelimit-policy: "per-key";q=3;w=60
//	ratelimit: "per-key";r=0;t=20
//
// RetryInfo's retry_delay is the wait in whole milliseconds, rounded up, at
// least 1 ms. When the cost can never fit (it exceeds a limit's capacity)
// the message is "rate limited: the cost exceeds the limit's capacity" and
// there is no RetryInfo: retrying cannot help. Allowed calls carry
// ratelimit-policy and ratelimit too, in the format of
// draft-ietf-httpapi-ratelimit-headers-11 (package ratelimitheader); rules in
// shadow mode send neither. When the limiter fails and the rule is
// sluice.FailClosed, the call ends UNAVAILABLE, "rate limiter unavailable",
// with a RetryInfo of one second; a concurrency slot the failing limiter
// reported taking is given back at once (under sluice.FailOpen, when the
// handler returns). A cost declared in metadata that is not a positive
// decimal number ends the call INVALID_ARGUMENT, before the limiter is
// asked; a cost the limiter refuses ends it INVALID_ARGUMENT too,
// "invalid cost: " and the reason.
//
// No status, detail or metadata ever carries a key or an identity: every
// branch — a known or unknown API key, a key seen before or not — answers
// with the same fields and makes the same one call to the limiter.
package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/enforce"
)

// Options configures an Interceptor. Limiter and Rules are required; every
// other zero field means its documented default.
type Options struct {
	// Limiter decides.
	Limiter sluice.Limiter
	// Rules, tried in order; the first that applies to a call decides it
	// (see Rule).
	Rules []Rule
	// Principal returns the authenticated identity of a call (say, from
	// the claims an authentication interceptor earlier in the chain put in
	// the context), for Principal keys, and false when there is none.
	Principal func(ctx context.Context) (string, bool)
	// Observer hears every decision (metrics, heaviest tenants). Optional.
	Observer enforce.Observer
	// TenantLabel names a call's tenant for the Observer (say, an account
	// ID from the authentication context). Default: a per-process
	// pseudonym of the first quota's key (never the key itself).
	TenantLabel func(ctx context.Context, fullMethod string) string
}

// Interceptor enforces its rules on the calls of a gRPC server. It is safe
// for concurrent use; install both of its interceptors to cover unary and
// streaming methods:
//
//	grpc.NewServer(grpc.ChainUnaryInterceptor(in.Unary()), grpc.ChainStreamInterceptor(in.Stream()))
type Interceptor struct {
	limiter   sluice.Limiter
	rules     []compiledRule
	principal func(context.Context) (string, bool)
	observer  enforce.Observer
	label     func(context.Context, string) string
	seed      maphash.Seed
	sleep     func(context.Context, time.Duration) error // tests: instead of a timer
}

// New builds an Interceptor, validating every rule, method pattern, quota
// and limit: an error names the rule, the quota and what is wrong.
func New(opts Options) (*Interceptor, error) {
	if opts.Limiter == nil {
		return nil, errors.New("grpclimit: Options.Limiter is required")
	}
	if len(opts.Rules) == 0 {
		return nil, errors.New("grpclimit: no rules: at least one is required")
	}
	in := &Interceptor{
		limiter: opts.Limiter, principal: opts.Principal, observer: opts.Observer, label: opts.TenantLabel,
		seed: maphash.MakeSeed(),
	}
	for _, r := range opts.Rules {
		c, err := compileRule(r, in.principal != nil)
		if err != nil {
			return nil, fmt.Errorf("grpclimit: %w", err)
		}
		for _, o := range in.rules {
			if o.Name == r.Name {
				return nil, fmt.Errorf("grpclimit: two rules named %q", r.Name)
			}
		}
		in.rules = append(in.rules, c)
	}
	return in, nil
}

// Unary returns the interceptor for unary methods. A call it lets through
// runs the handler; the concurrency slots it holds are released when the
// handler returns.
func (in *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		var c call
		if err := in.admit(ctx, info.FullMethod, nil, &c); err != nil {
			return nil, err
		}
		if c.verdict.Held {
			defer in.release(ctx, &c)
		}
		return handler(ctx, req)
	}
}

// Stream returns the interceptor for streaming methods. A stream is
// decided once, when it starts (its cost comes from the stream's metadata
// or CostFunc, not from its messages); the concurrency slots it holds are
// released when the handler returns.
func (in *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		var c call
		ctx := ss.Context()
		if err := in.admit(ctx, info.FullMethod, ss, &c); err != nil {
			return err
		}
		if c.verdict.Held {
			defer in.release(ctx, &c)
		}
		return handler(srv, ss)
	}
}

// call is one call's decision in the making: its rule, the key and cost of
// each of the rule's quotas, and the decisions it runs with.
type call struct {
	enforce.Request
	rule    *compiledRule
	verdict enforce.Verdict // the call runs with its decisions
}

// admit decides a call of method. A nil error lets it through
// (c.verdict.Held says whether it must be released after the handler);
// otherwise the error is the status the call ends with. The rate-limit
// fields are set as header metadata on ss, or with grpc.SetHeader when ss
// is nil (a unary call).
func (in *Interceptor) admit(ctx context.Context, method string, ss grpc.ServerStream, c *call) error {
	if !in.match(ctx, method, c) {
		return nil
	}
	rule := c.rule
	if err := in.costs(ctx, method, c); err != nil {
		if in.observer != nil {
			in.observe(ctx, method, c, enforce.Invalid, 0, nil)
		}
		return err // the client's mistake: nothing decided, nothing spent
	}
	var start time.Time
	if in.observer != nil {
		start = time.Now()
	}
	rule.core.Decide(ctx, in.limiter, &c.Request, &c.verdict)
	v := &c.verdict
	if in.observer != nil {
		in.observe(ctx, method, c, v.Outcome, time.Since(start), v.Err)
	}
	switch v.Outcome {
	case enforce.Invalid:
		return invalidCost(v.Err)
	case enforce.Failed:
		if !v.Serve { // fail_closed
			return unavailable()
		}
		// fail_open: the call runs, holding whatever slot the failed
		// limiter reported taking, released when its handler returns.
	case enforce.Rejected:
		setHeader(ctx, ss, rule.fields(v.Decisions()))
		return rejection(v.Combined().RetryAfter, v.Never)
	case enforce.Allowed:
		if !rule.Shadow {
			setHeader(ctx, ss, rule.fields(v.Decisions()))
			// A leaky bucket (nginx's burst without nodelay) admits a
			// call to be served later: it waits its turn here.
			if v.Combined().Delay > 0 {
				if err := in.wait(ctx, v.Combined().Delay); err != nil {
					rule.core.Release(ctx, in.limiter, &c.Request, v.Decisions())
					return err
				}
			}
		}
	}
	// Allowed, rejected in shadow, or failed open: the call runs, holding
	// what it took (c.verdict.Held).
	return nil
}

// wait holds a call for d: nil, or the status of a call whose context
// ended first.
func (in *Interceptor) wait(ctx context.Context, d time.Duration) error {
	if in.sleep != nil {
		return in.sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// match finds the rule for a call of method, and its keys.
func (in *Interceptor) match(ctx context.Context, method string, c *call) bool {
rules:
	for i := range in.rules {
		rule := &in.rules[i]
		if !rule.methods.match(method) {
			continue
		}
		for j := range rule.Quotas {
			k, ok := in.keyOf(ctx, method, rule, j)
			if !ok {
				continue rules
			}
			c.Keys[j] = k
		}
		c.rule = rule
		return true
	}
	return false
}

// costs finds the cost of each of the rule's quotas: the client's
// declaration in metadata, CostFunc's result, or Cost. A malformed
// declaration is an INVALID_ARGUMENT status.
func (in *Interceptor) costs(ctx context.Context, method string, c *call) error {
	for i := range c.rule.Quotas {
		q := &c.rule.Quotas[i]
		cost := q.Cost
		switch {
		case q.CostMetadata != "":
			declared, ok, err := c.rule.declaredCost(ctx, i)
			if err != nil {
				return err
			}
			if ok {
				cost = declared
			}
		case q.CostFunc != nil:
			if v := q.CostFunc(ctx, method); v != 0 {
				if !(v > 0) || math.IsInf(v, 0) {
					return status.Errorf(codes.InvalidArgument, "invalid cost: the cost of %s is %v", method, v)
				}
				cost = v
			}
		}
		if cost == 0 {
			cost = 1
		}
		c.Costs[i] = cost
	}
	return nil
}

// release gives back the concurrency slots a call held, once its handler
// has returned (enforce.CompiledRule.Release).
func (in *Interceptor) release(ctx context.Context, c *call) {
	c.rule.core.Release(ctx, in.limiter, &c.Request, c.verdict.Decisions())
}

func (in *Interceptor) observe(ctx context.Context, method string, c *call, o enforce.Outcome, latency time.Duration, err error) {
	e := enforce.Event{Rule: c.rule.Name, Outcome: o, Latency: latency, Cost: c.Costs[0]}
	if o == enforce.Failed {
		e.Err = err
	}
	if in.label != nil {
		e.Tenant = in.label(ctx, method)
	} else {
		e.Tenant = enforce.Pseudonym(in.seed, c.rule.Quotas[0].Key.Kind.String(), c.Keys[0])
	}
	in.observer.Observe(e)
}
