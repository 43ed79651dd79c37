package rls

import (
	rlpb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/rls/envoyconfig"
)

// FromEnvoyConfig is the Matcher of a configuration in envoyproxy/ratelimit's
// format (and sluice's extensions of it).
func FromEnvoyConfig(c *envoyconfig.Config) Matcher { return envoyMatcher{c} }

type envoyMatcher struct{ c *envoyconfig.Config }

func (m envoyMatcher) Match(domain string, es []Entry) (*Rule, bool) {
	in := toEnvoy(es)
	r, ok := m.c.Match(domain, in)
	if !ok {
		return nil, false
	}
	return fromEnvoy(r, in), true
}

func (m envoyMatcher) Override(domain string, es []Entry, n uint32, unit rlpb.RateLimitResponse_RateLimit_Unit) (*Rule, bool) {
	in := toEnvoy(es)
	r, ok := m.c.Override(domain, in, n, envoyconfig.Unit(unit)) // the same enum values
	if !ok {
		return nil, false
	}
	return fromEnvoy(r, in), true
}

func toEnvoy(es []Entry) []envoyconfig.Entry {
	out := make([]envoyconfig.Entry, len(es))
	for i, e := range es {
		out[i] = envoyconfig.Entry(e)
	}
	return out
}

func fromEnvoy(r *envoyconfig.Rule, in []envoyconfig.Entry) *Rule {
	out := &Rule{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: rlpb.RateLimitResponse_RateLimit_Unit(r.Unit),
		Unlimited: r.Unlimited, ShadowMode: r.ShadowMode, Replaces: r.Replaces}
	out.Limit, _ = r.Limit()
	if r.SharePatterns != nil {
		for _, e := range r.KeyEntries(in) {
			out.KeyEntries = append(out.KeyEntries, Entry(e))
		}
	}
	return out
}
