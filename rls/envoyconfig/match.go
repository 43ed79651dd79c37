package envoyconfig

import (
	"strings"

	"github.com/sluicehq/sluice"
)

// How a level of the request was matched.
const (
	byValue    = iota // "key_value" exactly
	byWildcard        // a wildcard descriptor of the level
	byKey             // "key" alone: the descriptor without a value
)

// step is one matched level.
type step struct {
	n    *node
	how  int
	wild string // the wildcard's map key, for byWildcard
}

// Match returns the rule that applies to a descriptor of domain — its
// entries in order — and false when none does: an unknown domain, no
// matching descriptor, or a request with more or fewer entries than the
// levels matched. It is envoyproxy/ratelimit's GetLimit: at each level
// "key_value" exactly, else the first wildcard whose prefix "key_value"
// starts with, else "key" alone; the rule is the last level's, when that
// level is the request's last entry. The FullKey and SharePatterns of the
// returned rule are the request's (see the package documentation).
func (c *Config) Match(domain string, entries []Entry) (*Rule, bool) {
	d := c.domains[domain]
	if d == nil || len(entries) == 0 {
		return nil, false
	}
	var buf [8]step
	steps := buf[:0]
	level := d.root
	var kbuf [64]byte
	key := kbuf[:0]
	var found *Rule
	for i, e := range entries {
		key = append(append(append(key[:0], e.Key...), '_'), e.Value...)
		s := step{how: byValue, n: level.children[string(key)]}
		if s.n == nil && len(level.wildcards) > 0 {
			ks := string(key)
			for _, w := range level.wildcards {
				if strings.HasPrefix(ks, w[:len(w)-1]) {
					s = step{how: byWildcard, n: level.children[w], wild: w}
					break
				}
			}
		}
		if s.n == nil {
			s = step{how: byKey, n: level.children[e.Key]}
		}
		if s.n == nil {
			break
		}
		steps = append(steps, s)
		if s.n.rule != nil && i == len(entries)-1 {
			found = s.n.rule
		}
		if len(s.n.children) == 0 {
			break
		}
		level = s.n
	}
	if found == nil {
		return nil, false
	}
	// share_threshold: the wildcard a level's value is counted under.
	var patterns []string
	for i, s := range steps {
		if s.how == byWildcard && s.n.share && s.n.pattern != "" {
			if patterns == nil {
				patterns = make([]string, len(entries))
			}
			patterns[i] = strings.TrimPrefix(s.n.pattern, entries[i].Key+"_")
		}
	}
	// The full key, built without allocating unless it differs from the
	// configured one.
	var kb [128]byte
	b := append(kb[:0], domain...)
	switch {
	case found.DetailedMetric && patterns != nil:
		for i, e := range entries {
			b = append(append(b, '.'), e.Key...)
			if patterns[i] != "" {
				b = append(append(b, '_'), patterns[i]...)
			} else if e.Value != "" {
				b = append(append(b, '_'), e.Value...)
			}
		}
	case found.DetailedMetric:
		for _, e := range entries {
			b = append(append(append(append(b, '.'), e.Key...), '_'), e.Value...)
		}
	default: // value_to_metric, and the wildcards' own spelling
		for i, e := range entries {
			s := steps[i]
			b = append(append(b, '.'), e.Key...)
			switch {
			case s.how == byWildcard && patterns != nil && patterns[i] != "":
				b = append(append(b, '_'), patterns[i]...)
			case s.how == byWildcard && !s.n.valueToMetric:
				b = append(append(b, '_'), strings.TrimPrefix(s.wild, e.Key+"_")...)
			case s.how == byKey && !s.n.valueToMetric:
			default:
				if e.Value != "" {
					b = append(append(b, '_'), e.Value...)
				}
			}
		}
	}
	same := string(b) == found.FullKey
	if same && patterns == nil {
		return found, true
	}
	r := *found
	r.SharePatterns = patterns
	if !same {
		// The full key (the stats key) carries the request's values; the
		// limit keeps the configured rule's name, so that the limits of a
		// rule stay one per rule whatever the values (the counter is per
		// descriptor anyway).
		r.FullKey = string(b)
	}
	return &r, true
}

// Override returns the rule of a descriptor that carries its own limit
// (Envoy's per-route limit override), as envoyproxy/ratelimit's GetLimit
// builds it: requestsPerUnit per unit, FullKey "domain.k1_v1.k2_v2" from the
// request's entries (an empty value adds no "_"), neither shadow mode nor
// name nor replaces, a fixed window. It returns false for an unknown domain,
// and for a unit without a length (UnitUnknown or no unit), which envoy's
// ratelimit cannot enforce either (its call fails); package rls refuses
// such a request INVALID_ARGUMENT before it asks, so that a bad override
// never stands for no limit.
func (c *Config) Override(domain string, entries []Entry, requestsPerUnit uint32, unit Unit) (*Rule, bool) {
	if c.domains[domain] == nil || unit.Duration() == 0 {
		return nil, false
	}
	var b strings.Builder
	b.WriteString(domain)
	b.WriteByte('.')
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	full := b.String()
	// The limit is named by the domain and the entries' keys, not their
	// values: one name per kind of descriptor (the counter is per
	// descriptor, and the quota and unit are in the limit's parameters).
	var n strings.Builder
	n.WriteString(domain)
	n.WriteString(".override")
	for _, e := range entries {
		n.WriteByte('.')
		n.WriteString(e.Key)
	}
	return &Rule{FullKey: full, Unit: unit, RequestsPerUnit: requestsPerUnit, Algorithm: sluice.FixedWindow, Window: unit.Duration(), limitName: limitName(n.String())}, true
}
