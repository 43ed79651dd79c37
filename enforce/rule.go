package enforce

import (
	"fmt"
	"math"
	"slices"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/ratelimitheader"
)

// MaxRuleName bounds a rule's name (a metrics label).
const MaxRuleName = 64

// CheckRuleName refuses a rule name that is empty, longer than
// MaxRuleName or not printable ASCII.
func CheckRuleName(name string) error {
	ok := name != "" && len(name) <= MaxRuleName
	for i := 0; ok && i < len(name); i++ {
		ok = name[i] >= 0x20 && name[i] <= 0x7e
	}
	if !ok {
		return fmt.Errorf("rule %q: the name must be 1 to %d bytes of printable ASCII", name, MaxRuleName)
	}
	return nil
}

// CompileQuota compiles a quota's limit and checks its static cost (0:
// none, a request costs 1): a positive number the limit can take — within
// its resolution and its capacity (a cost above it would refuse every
// request).
func CompileQuota(l sluice.Limit, cost float64) (*algo.Params, error) {
	p, err := algo.Compile(l)
	if err != nil {
		return nil, err
	}
	if cost < 0 || math.IsNaN(cost) || math.IsInf(cost, 0) {
		return nil, fmt.Errorf("cost %v: must be positive (0 means 1)", cost)
	}
	if cost > 0 {
		if _, err := p.Cost(cost); err != nil {
			return nil, err
		}
		if capacity := l.Capacity(); cost > capacity {
			return nil, fmt.Errorf("cost %v exceeds the limit's capacity %v: every request would be refused", cost, capacity)
		}
	}
	return p, nil
}

// MaxQuotas bounds the quotas of a rule, so that a request's bookkeeping
// (Request) fits on the stack.
const MaxQuotas = 8

// Rule is a rule as the middleware of every transport decides it: the
// limits a request spends on and how. A transport's own rule (httplimit.Rule,
// grpclimit.Rule) adds what selects requests and where their keys come from.
type Rule struct {
	// Name identifies the rule in metrics (CheckRuleName).
	Name string
	// Quotas are the limits a request spends on, decided as one in this
	// order (sluice.Limiter.AllowAll): 1 to MaxQuotas, with distinct limit
	// names.
	Quotas []Quota
	// Mode: sluice.AllOrNothing (the default) or sluice.RejectionsCount.
	Mode sluice.Mode
	// Shadow decides and records, but never rejects: a rejection is the
	// outcome ShadowRejected, and the request runs.
	Shadow bool
	// OnError is what a request does when the limiter fails with an error
	// rather than a decision: sluice.FailOpen (the default) runs it,
	// sluice.FailClosed refuses it. sluice.FailLocal is refused by Compile:
	// a middleware has no local fallback (a store's outage policy has one:
	// redisstore's).
	OnError sluice.FailurePolicy
	// CheckQuota, when set, is the transport's own check of quota i —
	// where its key comes from, what else may set its cost — run by
	// Compile after its own checks, quota by quota, with the rule compiled
	// so far (for CheckCost and Chargeable). It returns the quota's
	// KeyPrefix, or an error that Compile reports naming the rule and the
	// quota (QuotaError).
	CheckQuota func(r *CompiledRule, i int) (keyPrefix string, err error)
}

// Quota is one limit of a Rule.
type Quota struct {
	// Limit is the limit (checked by Compile).
	Limit sluice.Limit
	// KeyPrefix starts every key the quota counts under, naming its kind:
	// GlobalKey, IPPrefix, HeaderPrefix(name), PrincipalPrefix or
	// MethodPrefix (set by Rule.CheckQuota when it is set). The transport
	// builds the keys from it.
	KeyPrefix string
	// Cost is what a request spends unless the transport finds another
	// cost for it; 0 means 1. Checked by Compile (CompileQuota).
	Cost float64
}

// CompiledRule is a Rule checked by Compile and ready for requests. It is
// safe for concurrent use, and must not be changed.
type CompiledRule struct {
	Rule
	// Policies are the quotas as RateLimit-Policy members
	// (ratelimitheader.PolicyOf), in order.
	Policies []ratelimitheader.Policy
	// PolicyField is the RateLimit-Policy value of Policies (draft -11),
	// the same on every response.
	PolicyField string

	params []*algo.Params
	limits ratelimitheader.LimitField
}

// Compile checks r — its name, quotas (count, limits, static costs,
// distinct limit names), mode and failure policy, then what r.CheckQuota
// checks of each quota — and returns it ready for requests. An error names
// the rule, and the quota when it is about one.
func Compile(r Rule) (*CompiledRule, error) {
	if err := CheckRuleName(r.Name); err != nil {
		return nil, err
	}
	if len(r.Quotas) == 0 || len(r.Quotas) > MaxQuotas {
		return nil, fmt.Errorf("rule %q: %d quotas: a rule spends on 1 to %d limits", r.Name, len(r.Quotas), MaxQuotas)
	}
	if r.Mode != sluice.AllOrNothing && r.Mode != sluice.RejectionsCount {
		return nil, fmt.Errorf("rule %q: unknown mode %d", r.Name, r.Mode)
	}
	switch r.OnError {
	case sluice.FailOpen, sluice.FailClosed:
	case sluice.FailLocal:
		return nil, fmt.Errorf("rule %q: OnError %v: a middleware has no local fallback; use %v or %v (a store's outage policy is where %v goes)",
			r.Name, r.OnError, sluice.FailOpen, sluice.FailClosed, sluice.FailLocal)
	default:
		return nil, fmt.Errorf("rule %q: unknown OnError %d", r.Name, r.OnError)
	}
	c := &CompiledRule{Rule: r}
	c.Quotas = slices.Clone(r.Quotas)
	names := make([]string, len(r.Quotas))
	for i, q := range c.Quotas {
		p, err := CompileQuota(q.Limit, q.Cost)
		if err != nil {
			return nil, c.QuotaError(i, err)
		}
		if slices.Contains(names[:i], q.Limit.Name) {
			return nil, fmt.Errorf("rule %q: limit %q is used twice", r.Name, q.Limit.Name)
		}
		names[i] = q.Limit.Name
		c.params = append(c.params, p)
		c.Policies = append(c.Policies, ratelimitheader.PolicyOf(q.Limit))
	}
	var err error
	if c.PolicyField, err = ratelimitheader.FormatPolicies(c.Policies); err != nil {
		return nil, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	if c.limits, err = ratelimitheader.NewLimitField(names); err != nil {
		return nil, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	if r.CheckQuota == nil {
		return c, nil
	}
	for i := range c.Quotas {
		if c.Quotas[i].KeyPrefix, err = r.CheckQuota(c, i); err != nil {
			return nil, c.QuotaError(i, err)
		}
	}
	return c, nil
}

// QuotaError is err about the rule's quota i, as Compile words it: the
// rule, the quota's index and its limit's name. A transport wraps its own
// checks of a quota (its key, its cost source) with it.
func (r *Rule) QuotaError(i int, err error) error {
	return fmt.Errorf("rule %q, quota %d (%s): %w", r.Name, i, r.Quotas[i].Limit.Name, err)
}

// CheckCost reports whether quota i's limit can take cost (a positive
// number within its resolution; whole for SlidingLog and Concurrency): nil,
// or the error the limiter would return, wrapping sluice.ErrInvalidCost.
func (r *CompiledRule) CheckCost(i int, cost float64) error {
	_, err := r.params[i].Cost(cost)
	return err
}

// Chargeable reports whether quota i's limit can be charged after a
// response (sluice.Charger): nil, or why not.
func (r *CompiledRule) Chargeable(i int) error { return r.params[i].Chargeable() }

// AppendLimits appends the RateLimit value (draft -11) about ds, the
// decisions of the rule's quotas in order, to dst and returns the extended
// buffer (ratelimitheader.LimitField: no allocation but dst's growth).
func (r *CompiledRule) AppendLimits(dst []byte, ds []sluice.Decision) []byte {
	return r.limits.Append(dst, ds)
}

// Limits are ds, the decisions of the rule's quotas in order, as RateLimit
// members (ratelimitheader.LimitOf), for the formats AppendLimits does not
// write (draft -06, the legacy fields).
func (r *CompiledRule) Limits(ds []sluice.Decision) []ratelimitheader.Limit {
	ls := make([]ratelimitheader.Limit, len(ds))
	for i := range ds {
		ls[i] = ratelimitheader.LimitOf(r.Quotas[i].Limit.Name, ds[i])
	}
	return ls
}
