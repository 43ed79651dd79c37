package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"golang.org/x/net/http/httpguts"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/ratelimitheader"
)

// Rule says which requests it applies to and what they spend. Rules are
// tried in order; the first whose Match matches a request and whose keys
// can all be found for it applies (so a rule keyed by an API key header is
// skipped for a request without one, and the next rule — say, by client IP
// for anonymous clients — applies instead). A request no rule applies to is
// not limited.
type Rule struct {
	// Name identifies the rule in metrics. Required, unique, at most 64
	// bytes of printable ASCII.
	Name string
	// Match selects the requests; the zero Match selects all.
	Match Match
	// Quotas are the limits the request spends on, decided as one in this
	// order (sluice.Limiter.AllowAll). At least one; their limit names must
	// be distinct.
	Quotas []Quota
	// Mode: all or nothing (the default) or rejections count.
	Mode sluice.Mode
	// Shadow decides and records, but never rejects: the request goes
	// through without rate-limit fields, and the would-be rejection is
	// counted (enforce.ShadowRejected). For trying a rule on live traffic.
	Shadow bool
	// OnError is what the rule does when the limiter fails with an error
	// (not a rejection; a store's outage policy answers before that).
	// Default enforce.FailOpen.
	OnError enforce.OnError
}

// Match selects requests by method and path.
type Match struct {
	// Methods, upper case; empty means any. GET also matches HEAD.
	Methods []string
	// Path is a pattern on the request's URL path: "" or "/" matches every
	// path; "/api/" (a trailing slash) every path under /api/; "/health"
	// that path only. A segment may be a wildcard, {name} (any one
	// non-empty segment), and the last may be {name...} (the rest, like a
	// trailing slash): "/users/{id}/orders", "/files/{path...}".
	Path string
}

// Quota is one limit a request spends on: the limit, whose key the spend
// goes to, and how much.
type Quota struct {
	// Limit is the limit (validated when the middleware is built).
	Limit sluice.Limit
	// Key says whose the spend is.
	Key Key
	// Cost is what one request spends; 0 means 1.
	Cost float64
	// CostFunc, when set, computes the cost of a request instead (a
	// per-route weight, the size of a batch). A result of 0 means Cost; an
	// invalid one (negative, NaN) fails the decision (the rule's OnError).
	CostFunc func(*http.Request) float64
	// Charge, when set, is called after the handler has written its
	// response, with its status and header (the tokens an answer used, the
	// bytes it sent): a positive result is charged to the key
	// (sluice.Charger.Charge: a debt later requests wait out). It needs a
	// Limiter that is a sluice.Charger, and a limit that can be charged.
	Charge func(r *http.Request, status int, header http.Header) float64
}

// KeyKind is where a key comes from.
type KeyKind uint8

const (
	// Global: one key for every request (a limit on the whole service).
	Global KeyKind = iota
	// IP: the client's address, found by Options.ClientIP (IPv6 grouped
	// by prefix). Always found.
	IP
	// Header: the value of the request header Key.Header (an API key). A
	// request without it (or with an empty value) does not match the rule.
	Header
	// Principal: the authenticated identity Options.Principal returns. A
	// request it reports none for does not match the rule.
	Principal
)

// String returns "global", "ip", "header" or "principal".
func (k KeyKind) String() string {
	switch k {
	case Global:
		return "global"
	case IP:
		return "ip"
	case Header:
		return "header"
	case Principal:
		return "principal"
	}
	return "key_kind(" + strconv.Itoa(int(k)) + ")"
}

// Key says whose a spend is.
type Key struct {
	Kind   KeyKind
	Header string // for Header: the header's name
}

// Validate checks r as New does — its name, match, quotas, limits, keys
// and costs — for a Limiter that can be charged and with a Principal
// function (New also checks those two). A configuration loader calls it to
// refuse a rule, with its line, before anything starts.
func (r Rule) Validate() error {
	_, err := compileRule(r, true, true)
	return err
}

// compiledRule is a Rule ready for requests.
type compiledRule struct {
	Rule
	path    pattern
	methods methodSet
	quotas  []compiledQuota
	charges bool // some quota has a Charge
	// policies are the quotas as RateLimit-Policy members, and policyField
	// the draft -11 field (fixed for the rule; a response's header map
	// shares it: a one-element slice, which an Add copies).
	policies    []ratelimitheader.Policy
	policyField []string
}

type compiledQuota struct {
	Quota
	header string // canonical header name, for Header keys
	prefix string // what starts the key: the kind, so kinds never collide
	field  string // what starts its member of the RateLimit field: `"name";r=`, after ", " but for the first
	// q is the quota written in RateLimit-Policy (and X-RateLimit-Limit):
	// a whole number, the rate kept (100 per 100 ms is q=1000;w=1).
	q int64
}

func compileRule(r Rule, chargeable bool, principal bool) (compiledRule, error) {
	c := compiledRule{Rule: r}
	if err := enforce.CheckRuleName(r.Name); err != nil {
		return c, err
	}
	var err error
	if c.path, err = compilePattern(r.Match.Path); err != nil {
		return c, fmt.Errorf("rule %q: %w", r.Name, err)
	}
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
		cq, err := compileQuota(q, chargeable, principal)
		if err != nil {
			return c, fmt.Errorf("rule %q, quota %d (%s): %w", r.Name, i, q.Limit.Name, err)
		}
		for _, o := range c.quotas {
			if o.Limit.Name == q.Limit.Name {
				return c, fmt.Errorf("rule %q: limit %q is used twice", r.Name, q.Limit.Name)
			}
		}
		cq.field = strconv.Quote(q.Limit.Name) + ";r=" // printable ASCII: Quote escapes only " and \\, as RFC 9651 does
		if i > 0 {
			cq.field = ", " + cq.field
		}
		c.quotas = append(c.quotas, cq)
		c.charges = c.charges || q.Charge != nil
		policies = append(policies, ratelimitheader.PolicyOf(q.Limit))
	}
	field, err := ratelimitheader.FormatPolicies(policies)
	if err != nil {
		return c, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	c.policyField = []string{field}
	c.policies = policies
	return c, nil
}

func compileQuota(q Quota, chargeable, principal bool) (compiledQuota, error) {
	c := compiledQuota{Quota: q}
	p, err := enforce.CompileQuota(q.Limit, q.Cost)
	if err != nil {
		return c, err
	}
	if q.Charge != nil {
		if !chargeable {
			return c, errors.New("a Charge needs a Limiter that is a sluice.Charger")
		}
		if err := p.Chargeable(); err != nil {
			return c, err
		}
	}
	switch q.Key.Kind {
	case Global:
		c.prefix = "global"
	case IP:
		c.prefix = "ip:"
	case Header:
		if q.Key.Header == "" {
			return c, errors.New("a header key needs Key.Header, the header's name")
		}
		if !validHeaderName(q.Key.Header) {
			return c, fmt.Errorf("header %q: not a header name (RFC 9110 token characters only)", q.Key.Header)
		}
		c.header = http.CanonicalHeaderKey(q.Key.Header)
		c.prefix = "h:" + c.header + ":"
	case Principal:
		if !principal {
			return c, errors.New("a principal key needs Options.Principal")
		}
		c.prefix = "p:"
	default:
		return c, fmt.Errorf("unknown key kind %d", q.Key.Kind)
	}
	c.q = ratelimitheader.PolicyOf(q.Limit).Quota
	return c, nil
}

// validHeaderName reports whether s is an RFC 9110 token, as a field name
// must be, of at most enforce.MaxRuleName bytes.
func validHeaderName(s string) bool {
	return s != "" && len(s) <= enforce.MaxRuleName && httpguts.ValidHeaderFieldName(s)
}
