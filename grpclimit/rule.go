package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/ratelimitheader"
)

// Rule says which calls it applies to and what they spend. Rules are tried
// in order; the first whose Match matches a call and whose keys can all be
// found for it applies (so a rule keyed by an API key in metadata is
// skipped for a call without one, and the next rule — say, by peer address
// for anonymous clients — applies instead). A call no rule applies to is
// not limited.
type Rule struct {
	// Name identifies the rule in metrics. Required, unique, at most 64
	// bytes of printable ASCII.
	Name string
	// Match selects the calls; the zero Match selects all.
	Match Match
	// Quotas are the limits the call spends on, decided as one in this
	// order (sluice.Limiter.AllowAll). At least one, at most 8; their limit
	// names must be distinct.
	Quotas []Quota
	// Mode: all or nothing (the default) or rejections count.
	Mode sluice.Mode
	// Shadow decides and records, but never rejects: the call goes through
	// without rate-limit metadata, and the would-be rejection is counted
	// (enforce.ShadowRejected). For trying a rule on live traffic.
	Shadow bool
	// OnError is what the rule does when the limiter fails with an error
	// (not a rejection; a store's outage policy answers before that).
	// Default enforce.FailOpen.
	OnError enforce.OnError
}

// Match selects calls by their full method name.
type Match struct {
	// Methods are full method names, "/pkg.Service/Method", or
	// "/pkg.Service/*" for every method of a service. Empty means every
	// method. Names are compared exactly (gRPC names are case-sensitive).
	Methods []string
}

// Quota is one limit a call spends on: the limit, whose key the spend goes
// to, and how much.
type Quota struct {
	// Limit is the limit (validated when the interceptor is built).
	Limit sluice.Limit
	// Key says whose the spend is.
	Key Key
	// Cost is what one call spends; 0 means 1.
	Cost float64
	// CostMetadata, when set, names an incoming metadata key (any case;
	// not a "-bin" one) in which the client declares what its call costs:
	// one positive decimal number such as "3" or "2.5" (at most six
	// decimals; whole for SlidingLog and Concurrency limits). A call
	// without it spends Cost. A malformed value — not a number, zero,
	// negative, an exponent, NaN or Inf, several values — ends the call
	// INVALID_ARGUMENT before the limiter is asked (the client's mistake,
	// not the limiter's; the Observer hears enforce.Invalid). The client
	// chooses what it spends: use it where
	// the declaration is checked later (a batch's declared size), or
	// trusted. Exclusive with CostFunc.
	CostMetadata string
	// CostFunc, when set, computes the cost of a call instead (a
	// per-method weight). A result of 0 means Cost; an invalid one
	// (negative, NaN, infinite) ends the call INVALID_ARGUMENT, nothing
	// spent. Exclusive with CostMetadata.
	CostFunc func(ctx context.Context, fullMethod string) float64
}

// KeyKind is where a key comes from.
type KeyKind uint8

const (
	// Global: one key for every call (a limit on the whole service).
	Global KeyKind = iota
	// Metadata: the first value of the incoming metadata key Key.Metadata
	// (an API key). A call without it (or with an empty value) does not
	// match the rule.
	Metadata
	// Method: the call's full method name, so that each method of the
	// rule has its own budget.
	Method
	// Peer: the IP address of the connection's peer (never a forwarding
	// header): IPv4 addresses whole, IPv6 addresses grouped by their /64,
	// IPv4-mapped IPv6 addresses as IPv4. A call whose peer has no IP
	// address (a Unix socket, an in-memory listener) does not match the
	// rule. Behind a proxy every call has the proxy's address: key by
	// Metadata or Principal there.
	Peer
	// Principal: the authenticated identity Options.Principal returns. A
	// call it reports none for does not match the rule.
	Principal
)

// String returns "global", "metadata", "method", "peer" or "principal".
func (k KeyKind) String() string {
	switch k {
	case Global:
		return "global"
	case Metadata:
		return "metadata"
	case Method:
		return "method"
	case Peer:
		return "peer"
	case Principal:
		return "principal"
	}
	return "key_kind(" + strconv.Itoa(int(k)) + ")"
}

// Key says whose a spend is.
type Key struct {
	Kind     KeyKind
	Metadata string // for Metadata: the metadata key's name (any case)
}

// compiledRule is a Rule ready for calls.
type compiledRule struct {
	Rule
	methods methodSet
	quotas  []compiledQuota
	// policyField is the ratelimit-policy value, fixed for the rule.
	policyField string
}

type compiledQuota struct {
	Quota
	params *algo.Params
	md     string // lower-case metadata key, for Metadata keys
	costMD string // lower-case metadata key of CostMetadata
	prefix string // what starts the key: the kind, so kinds never collide
}

// maxMetadataName bounds a metadata key.
const maxMetadataName = 128

func compileRule(r Rule, principal bool) (compiledRule, error) {
	c := compiledRule{Rule: r}
	if err := enforce.CheckRuleName(r.Name); err != nil {
		return c, err
	}
	var err error
	if c.methods, err = compileMethods(r.Match.Methods); err != nil {
		return c, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	if len(r.Quotas) == 0 || len(r.Quotas) > maxQuotas {
		return c, fmt.Errorf("rule %q: %d quotas: a rule spends on 1 to %d limits", r.Name, len(r.Quotas), maxQuotas)
	}
	if r.Mode != sluice.AllOrNothing && r.Mode != sluice.RejectionsCount {
		return c, fmt.Errorf("rule %q: unknown mode %d", r.Name, r.Mode)
	}
	if r.OnError > enforce.FailClosed {
		return c, fmt.Errorf("rule %q: unknown OnError %d", r.Name, r.OnError)
	}
	var policies []ratelimitheader.Policy
	for i, q := range r.Quotas {
		cq, err := compileQuota(q, principal)
		if err != nil {
			return c, fmt.Errorf("rule %q, quota %d (%s): %w", r.Name, i, q.Limit.Name, err)
		}
		for _, o := range c.quotas {
			if o.Limit.Name == q.Limit.Name {
				return c, fmt.Errorf("rule %q: limit %q is used twice", r.Name, q.Limit.Name)
			}
		}
		c.quotas = append(c.quotas, cq)
		policies = append(policies, ratelimitheader.PolicyOf(q.Limit))
	}
	if c.policyField, err = ratelimitheader.FormatPolicies(policies); err != nil {
		return c, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	return c, nil
}

func compileQuota(q Quota, principal bool) (compiledQuota, error) {
	c := compiledQuota{Quota: q}
	p, err := enforce.CompileQuota(q.Limit, q.Cost)
	if err != nil {
		return c, err
	}
	c.params = p
	if q.CostMetadata != "" {
		if q.CostFunc != nil {
			return c, errors.New("set at most one of CostMetadata and CostFunc")
		}
		if c.costMD, err = metadataName(q.CostMetadata); err != nil {
			return c, fmt.Errorf("CostMetadata: %w", err)
		}
		if strings.HasSuffix(c.costMD, "-bin") {
			return c, fmt.Errorf("CostMetadata %q: a cost is text, not a binary (-bin) key", q.CostMetadata)
		}
	}
	switch q.Key.Kind {
	case Global:
		c.prefix = "global"
	case Metadata:
		if q.Key.Metadata == "" {
			return c, errors.New("a metadata key needs Key.Metadata, the metadata key's name")
		}
		if c.md, err = metadataName(q.Key.Metadata); err != nil {
			return c, fmt.Errorf("Key.Metadata: %w", err)
		}
		// The key httplimit gives the same header: an API key spends one
		// budget whether it calls over HTTP or gRPC (same limiter, same
		// limit).
		c.prefix = "h:" + textproto.CanonicalMIMEHeaderKey(c.md) + ":"
	case Method:
		c.prefix = "m:"
	case Peer:
		c.prefix = "ip:"
	case Principal:
		if !principal {
			return c, errors.New("a principal key needs Options.Principal")
		}
		c.prefix = "p:"
	default:
		return c, fmt.Errorf("unknown key kind %d", q.Key.Kind)
	}
	return c, nil
}

// metadataName validates a metadata key's name and returns it in lower
// case, as gRPC keeps incoming metadata: letters, digits, '-', '_' and '.',
// and not a reserved "grpc-" key.
func metadataName(s string) (string, error) {
	if s == "" || len(s) > maxMetadataName {
		return "", fmt.Errorf("%q: a metadata key is 1 to %d bytes", s, maxMetadataName)
	}
	l := strings.ToLower(s)
	for i := 0; i < len(l); i++ {
		b := l[i]
		if !('a' <= b && b <= 'z' || '0' <= b && b <= '9' || b == '-' || b == '_' || b == '.') {
			return "", fmt.Errorf("%q: a metadata key holds only letters, digits, '-', '_' and '.'", s)
		}
	}
	if strings.HasPrefix(l, "grpc-") {
		return "", fmt.Errorf("%q: grpc- keys are reserved by gRPC", s)
	}
	return l, nil
}
