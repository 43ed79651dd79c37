package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/enforce"
)

// Rule says which calls it applies to and what they spend. Rules are tried
// in order; the first whose Match matches a call and whose keys can all be
// found for it applies (so a rule keyed by an API key in metadata is
// skipped for a call without one, and the next rule — say, by peer address
// for anonymous clients — applies instead). A call no rule applies to is
// not limited.
//
// A rule is decided as httplimit decides its own, by package enforce: see
// enforce.Rule for Name (unique, for metrics), Quotas (1 to 8, of distinct
// limit names, decided as one in order), Mode, Shadow and OnError. Over
// gRPC, a rule in shadow mode sends no rate-limit metadata, and
// sluice.FailClosed ends a call whose limiter failed UNAVAILABLE;
// sluice.FailLocal is refused by New.
type Rule struct {
	Name    string
	Match   Match   // which calls; the zero Match selects all
	Quotas  []Quota // what they spend on
	Mode    sluice.Mode
	Shadow  bool
	OnError sluice.FailurePolicy // when the limiter fails with an error (a store's outage policy answers first)
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

var keyKindNames = [...]string{Global: "global", Metadata: "metadata", Method: "method", Peer: "peer", Principal: "principal"}

// String returns "global", "metadata", "method", "peer" or "principal".
func (k KeyKind) String() string {
	if int(k) >= len(keyKindNames) {
		return "key_kind(" + strconv.Itoa(int(k)) + ")"
	}
	return keyKindNames[k]
}

// Key says whose a spend is.
type Key struct {
	Kind     KeyKind
	Metadata string // for Metadata: the metadata key's name (any case)
}

// compiledRule is a Rule ready for calls: the core every transport
// decides with, and what selects gRPC calls and finds their keys and
// costs.
type compiledRule struct {
	Rule
	core    *enforce.CompiledRule
	methods methodSet
	quotas  []compiledQuota // by quota
	// policyField is core.PolicyField as header metadata takes it: a
	// one-element slice, shared by every call (gRPC copies what it is
	// given).
	policyField []string
}

// compiledQuota is where a quota's key and cost come from in metadata.
type compiledQuota struct {
	md     string // lower-case metadata key, for Metadata keys
	costMD string // lower-case metadata key of CostMetadata
}

// maxMetadataName bounds a metadata key.
const maxMetadataName = 128

func compileRule(r Rule, principal bool) (compiledRule, error) {
	c := compiledRule{Rule: r, quotas: make([]compiledQuota, len(r.Quotas))}
	quotas := make([]enforce.Quota, len(r.Quotas))
	for i, q := range r.Quotas {
		quotas[i] = enforce.Quota{Limit: q.Limit, Cost: q.Cost}
	}
	core, err := enforce.Compile(enforce.Rule{Name: r.Name, Quotas: quotas, Mode: r.Mode, Shadow: r.Shadow, OnError: r.OnError,
		CheckQuota: func(_ *enforce.CompiledRule, i int) (string, error) { return c.checkQuota(i, principal) }})
	if err != nil {
		return c, err
	}
	c.core, c.policyField = core, []string{core.PolicyField}
	if c.methods, err = compileMethods(r.Match.Methods); err != nil {
		return c, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	return c, nil
}

// checkQuota checks quota i's cost source and key, and returns its key's
// prefix.
func (c *compiledRule) checkQuota(i int, principal bool) (string, error) {
	q, cq := &c.Quotas[i], &c.quotas[i]
	var err error
	if q.CostMetadata != "" {
		if q.CostFunc != nil {
			return "", errors.New("set at most one of CostMetadata and CostFunc")
		}
		if cq.costMD, err = metadataName(q.CostMetadata); err != nil {
			return "", fmt.Errorf("CostMetadata: %w", err)
		}
		if strings.HasSuffix(cq.costMD, "-bin") {
			return "", fmt.Errorf("CostMetadata %q: a cost is text, not a binary (-bin) key", q.CostMetadata)
		}
	}
	switch q.Key.Kind {
	case Global:
		return enforce.GlobalKey, nil
	case Metadata:
		if q.Key.Metadata == "" {
			return "", errors.New("a metadata key needs Key.Metadata, the metadata key's name")
		}
		if cq.md, err = metadataName(q.Key.Metadata); err != nil {
			return "", fmt.Errorf("Key.Metadata: %w", err)
		}
		// The key httplimit gives the same header: an API key spends one
		// budget whether it calls over HTTP or gRPC (same limiter, same
		// limit).
		return enforce.HeaderPrefix(cq.md), nil
	case Method:
		return enforce.MethodPrefix, nil
	case Peer:
		return enforce.IPPrefix, nil
	case Principal:
		if !principal {
			return "", errors.New("a principal key needs Options.Principal")
		}
		return enforce.PrincipalPrefix, nil
	}
	return "", fmt.Errorf("unknown key kind %d", q.Key.Kind)
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
