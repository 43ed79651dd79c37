package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"golang.org/x/net/http/httpguts"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/enforce"
)

// Rule says which requests it applies to and what they spend. Rules are
// tried in order; the first whose Match matches a request and whose keys
// can all be found for it applies (so a rule keyed by an API key header is
// skipped for a request without one, and the next rule — say, by client IP
// for anonymous clients — applies instead). A request no rule applies to is
// not limited.
//
// Name, Quotas, Mode, Shadow and OnError are decided by the core every
// transport shares, and mean what they mean in enforce.Rule (a unique name
// of 1 to 64 bytes of printable ASCII for metrics; 1 to 8 limits of
// distinct names decided as one in order; all or nothing by default;
// shadow mode; FailOpen by default, FailLocal refused by New). Over HTTP, a
// rule in shadow mode sends no rate-limit fields, and FailClosed answers
// 503 Service Unavailable.
type Rule struct {
	Name   string
	Match  Match // the requests; the zero Match selects all
	Quotas []Quota
	Mode   sluice.Mode
	Shadow bool
	// OnError answers a limiter that fails with an error (not a rejection;
	// a store's outage policy answers before that).
	OnError sluice.FailurePolicy
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

var keyKindNames = [...]string{Global: "global", IP: "ip", Header: "header", Principal: "principal"}

// String returns "global", "ip", "header" or "principal".
func (k KeyKind) String() string {
	if int(k) < len(keyKindNames) {
		return keyKindNames[k]
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

// compiledRule is a Rule ready for requests: the core every transport
// decides with, and what selects HTTP requests and finds their keys.
type compiledRule struct {
	Rule
	core    *enforce.CompiledRule
	path    pattern
	methods methodSet
	headers []string // canonical header names of Header keys, by quota
	charges bool     // some quota has a Charge
	// policyField is core.PolicyField as a response's header map takes it:
	// a one-element slice (which an Add copies), shared by every response.
	policyField []string
}

func compileRule(r Rule, chargeable bool, principal bool) (compiledRule, error) {
	c := compiledRule{Rule: r, headers: make([]string, len(r.Quotas))}
	quotas := make([]enforce.Quota, len(r.Quotas))
	for i, q := range r.Quotas {
		quotas[i] = enforce.Quota{Limit: q.Limit, Cost: q.Cost}
		c.charges = c.charges || q.Charge != nil
	}
	core, err := enforce.Compile(enforce.Rule{Name: r.Name, Quotas: quotas, Mode: r.Mode, Shadow: r.Shadow, OnError: r.OnError,
		CheckQuota: func(core *enforce.CompiledRule, i int) (string, error) {
			return c.checkQuota(core, i, chargeable, principal)
		}})
	if err != nil {
		return c, err
	}
	c.core, c.policyField = core, []string{core.PolicyField}
	if c.path, err = compilePattern(r.Match.Path); err != nil {
		return c, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	if c.methods, err = compileMethods(r.Match.Methods); err != nil {
		return c, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	return c, nil
}

// checkQuota checks quota i's key and Charge, and returns its key's
// prefix.
func (c *compiledRule) checkQuota(core *enforce.CompiledRule, i int, chargeable, principal bool) (string, error) {
	q := &c.Quotas[i]
	if q.Charge != nil {
		if !chargeable {
			return "", errors.New("a Charge needs a Limiter that is a sluice.Charger")
		}
		if err := core.Chargeable(i); err != nil {
			return "", err
		}
	}
	switch q.Key.Kind {
	case Global:
		return enforce.GlobalKey, nil
	case IP:
		return enforce.IPPrefix, nil
	case Header:
		if q.Key.Header == "" {
			return "", errors.New("a header key needs Key.Header, the header's name")
		}
		if !validHeaderName(q.Key.Header) {
			return "", fmt.Errorf("header %q: not a header name (RFC 9110 token characters only)", q.Key.Header)
		}
		c.headers[i] = http.CanonicalHeaderKey(q.Key.Header)
		return enforce.HeaderPrefix(q.Key.Header), nil
	case Principal:
		if !principal {
			return "", errors.New("a principal key needs Options.Principal")
		}
		return enforce.PrincipalPrefix, nil
	}
	return "", fmt.Errorf("unknown key kind %d", q.Key.Kind)
}

// validHeaderName reports whether s is an RFC 9110 token, as a field name
// must be, of at most enforce.MaxRuleName bytes.
func validHeaderName(s string) bool {
	return s != "" && len(s) <= enforce.MaxRuleName && httpguts.ValidHeaderFieldName(s)
}
