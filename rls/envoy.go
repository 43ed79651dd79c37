package rls

import (
	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/rls/envoyconfig"
)

// FromEnvoyConfig is the Matcher of a configuration in envoyproxy/ratelimit's
// format (and sluice's extensions of it).
func FromEnvoyConfig(c *envoyconfig.Config) Matcher {
	m := envoyMatcher{c: c, rules: map[*envoyconfig.Rule]*Rule{}}
	for _, d := range c.Domains() {
		for _, r := range d.Rules() {
			m.rules[r] = fromEnvoy(r, nil)
		}
	}
	return m
}

// envoyMatcher converts the rules Match returns, once for the
// configuration's own rules (rules adjusted for a request — detailed
// metrics, shared wildcards — are converted per request).
type envoyMatcher struct {
	c     *envoyconfig.Config
	rules map[*envoyconfig.Rule]*Rule // read-only once built
}

func (m envoyMatcher) Match(domain string, es []Entry) (*Rule, bool) {
	r, ok := m.c.Match(domain, es)
	if !ok {
		return nil, false
	}
	if r.SharePatterns == nil {
		if out, ok := m.rules[r]; ok {
			return out, true
		}
	}
	return fromEnvoy(r, es), true
}

func (m envoyMatcher) Override(domain string, es []Entry, n uint32, unit rlpb.RateLimitResponse_RateLimit_Unit) (*Rule, bool) {
	r, ok := m.c.Override(domain, es, n, envoyconfig.Unit(unit)) // the same enum values
	if !ok {
		return nil, false
	}
	return fromEnvoy(r, es), true
}

func fromEnvoy(r *envoyconfig.Rule, es []Entry) *Rule {
	out := &Rule{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: rlpb.RateLimitResponse_RateLimit_Unit(r.Unit),
		Unlimited: r.Unlimited, ShadowMode: r.ShadowMode, Replaces: r.Replaces}
	out.Limit, _ = r.Limit()
	if r.SharePatterns != nil {
		out.KeyEntries = r.KeyEntries(es) // a copy: es may be the caller's buffer
	}
	return out
}
