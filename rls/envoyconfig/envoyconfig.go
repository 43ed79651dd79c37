// Package envoyconfig reads envoyproxy/ratelimit's configuration files, in
// their own format and unchanged, and answers which limit applies to a
// descriptor, as envoyproxy/ratelimit's GetLimit does. It is what lets
// `sluice serve` replace that service and keep its files.
//
// One file is one domain:
//
//	domain: edge                 # required, unique across the files
//	descriptors:
//	  - key: remote_address      # required
//	    value: 50.0.0.5          # optional: absent matches any value; a trailing * is a prefix
//	    rate_limit:              # optional: without it the descriptor only leads to nested ones
//	      unit: second           # second, minute, hour, day, week, month, year (any case)
//	      requests_per_unit: 10  # 0 to 2^32-1; 0 refuses everything
//	      unlimited: false       # true: never limited (then no unit)
//	      name: per_ip           # what another rule's replaces names
//	      replaces: [{name: other}]
//	    shadow_mode: false       # over the limit is still reported OK
//	    detailed_metric: false   # the full key carries the request's values
//	    value_to_metric: false   # this level's key carries the request's value
//	    share_threshold: false   # every value a wildcard matches shares one counter
//	    descriptors: []          # nested descriptors: the request's next entry
//
// Semantics mirrored from envoyproxy/ratelimit (src/config/config_impl.go,
// main as of December 2025: loadDescriptors, validateYamlKeys, GetLimit;
// src/utils/utilities.go UnitToDivider; src/limiter cache keys):
//
//   - a descriptor's map key is "key" or "key_value"; two descriptors with
//     the same one at one level are a duplicate ("key_a" without a value and
//     "key" with value "a" collide, as there);
//   - a request's entries are matched level by level: first "key_value"
//     exactly, then the level's wildcards ("key_value" starting with what
//     precedes the *; the first such descriptor in file order, not the
//     longest), then "key" alone; the rule applies only when the request has
//     exactly as many entries as the levels matched (Example 4 of their
//     README);
//   - units are matched case-insensitively (strings.ToUpper, as theirs);
//     "unknown" is no unit; a unit is refused beside unlimited: true, but an
//     unlimited rule's invalid unit is not looked at;
//   - the full key (their FullKey, the stats key) is "domain.k1_v1.k2" from
//     the configuration, changed per request by detailed_metric,
//     value_to_metric and share_threshold exactly as theirs is;
//   - the counter of a descriptor is its domain and entries, so a value-less
//     key counts each value apart; share_threshold replaces a wildcard-matched
//     value by the wildcard (see Rule.KeyEntries);
//   - windows are fixed and aligned to the unit: a week is 7 days, a month
//     30, a year 365.
//
// Where sluice is stricter: what envoy's ratelimit silently ignores is
// refused, with the line — a known key in the wrong place (shadow_mode inside
// rate_limit), a key set twice in one mapping, a second YAML document — and
// so are quota_mode and metadata (added to envoyproxy/ratelimit in 2026 for
// quota-based routing, which sluice does not do), nesting deeper than
// MaxDepth and files larger than MaxFileSize. A descriptor value that YAML
// reads as a float (1.5) is refused as theirs refuses it: quote it. Their
// MERGE_DOMAIN_CONFIG (one domain over several files) is not supported: a
// domain is defined once.
//
// # Sluice's extensions
//
// Inside rate_limit, sluice also reads algorithm (a sluice.Algorithm name;
// default fixed_window), burst (for token_bucket, gcra and leaky_bucket),
// window (a Go duration such as 30s, instead of unit) and on_failure
// (fail_open, fail_closed or fail_local: what a shared store does when it
// cannot answer; default the store's). A file that uses them is sluice's own
// schema and no longer envoy's (Domain.Extensions); a file without them
// parses exactly as envoy's ratelimit parses it.
//
// A Config is immutable and safe for concurrent use; to reload, load a new
// one and swap it.
package envoyconfig

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/configfile"
)

// Unit is a rate limit's unit of time. Its values are those of Envoy's
// RateLimitResponse.RateLimit.Unit (rls.proto), so a conversion either way
// is a cast.
type Unit int32

// The units envoyproxy/ratelimit accepts.
const (
	UnitUnknown Unit = 0
	UnitSecond  Unit = 1
	UnitMinute  Unit = 2
	UnitHour    Unit = 3
	UnitDay     Unit = 4
	UnitMonth   Unit = 5 // 30 days
	UnitYear    Unit = 6 // 365 days
	UnitWeek    Unit = 7 // 7 days
)

var units = [...]struct {
	name string
	d    time.Duration
}{
	UnitUnknown: {"UNKNOWN", 0},
	UnitSecond:  {"SECOND", time.Second},
	UnitMinute:  {"MINUTE", time.Minute},
	UnitHour:    {"HOUR", time.Hour},
	UnitDay:     {"DAY", 24 * time.Hour},
	UnitMonth:   {"MONTH", 30 * 24 * time.Hour},
	UnitYear:    {"YEAR", 365 * 24 * time.Hour},
	UnitWeek:    {"WEEK", 7 * 24 * time.Hour},
}

// String returns the unit's name in Envoy's spelling, such as "MINUTE".
func (u Unit) String() string {
	if u >= 0 && int(u) < len(units) {
		return units[u].name
	}
	return fmt.Sprintf("Unit(%d)", int32(u))
}

// Duration returns the unit's length (the length of its fixed window), and
// 0 for UnitUnknown or a value that is no unit.
func (u Unit) Duration() time.Duration {
	if u >= 0 && int(u) < len(units) {
		return units[u].d
	}
	return 0
}

// parseUnit reads a unit as envoy's ratelimit does: upper-cased, then looked
// up among the enum's names, UNKNOWN excluded.
func parseUnit(s string) (Unit, bool) {
	up := strings.ToUpper(s)
	for u, x := range units {
		if u != int(UnitUnknown) && x.name == up {
			return Unit(u), true
		}
	}
	return UnitUnknown, false
}

// unitOf returns the unit whose length is d, or UnitUnknown.
func unitOf(d time.Duration) Unit {
	for u, x := range units {
		if u != int(UnitUnknown) && x.d == d {
			return Unit(u)
		}
	}
	return UnitUnknown
}

// Entry is one key and value of a request's descriptor.
type Entry struct{ Key, Value string }

// Rule is the rate limit a descriptor matched. Rules returned by Match and
// Rules may be shared: treat them as read-only.
type Rule struct {
	// FullKey is envoyproxy/ratelimit's FullKey: the domain and the matched
	// path ("test-domain.key1_value1.subkey1"), as adjusted for the request
	// by detailed_metric, value_to_metric and share_threshold.
	FullKey string
	// Name is rate_limit.name: what other rules' Replaces refer to; may be
	// empty.
	Name string
	// Unit is rate_limit.unit; with sluice's window extension, the unit of
	// that length or UnitUnknown; UnitUnknown for an unlimited rule.
	Unit Unit
	// RequestsPerUnit is rate_limit.requests_per_unit (0 when absent): the
	// quota per Window. 0 refuses every request.
	RequestsPerUnit uint32
	// Unlimited: the descriptor is never limited (Limit reports no limit).
	Unlimited bool
	// ShadowMode: a request over the limit is reported OK (and counted).
	ShadowMode bool
	// Replaces are the names of the rules this one replaces when a request
	// matches both.
	Replaces []string
	// DetailedMetric is detailed_metric: FullKey carries the request's
	// values.
	DetailedMetric bool
	// SharePatterns holds, for each of the request's entries, the wildcard
	// (such as "files/*") its value is counted under because of
	// share_threshold, or "" for an entry counted by its own value; nil
	// when share_threshold applies to none. Set by Match only.
	SharePatterns []string

	// Algorithm enforcing the limit: sluice.FixedWindow unless the file
	// chose another (a sluice extension).
	Algorithm sluice.Algorithm
	// Window is the length of the fixed window: the unit's, or the window
	// extension's.
	Window time.Duration
	// Burst is the burst extension; 0 when absent.
	Burst float64
	// OnFailure is the on_failure extension: what a shared store decides
	// for the rule's limit when it cannot answer (fail_open, fail_closed or
	// fail_local); nil when the file does not say, and the store's default
	// applies.
	OnFailure *sluice.FailurePolicy

	limitName string // limitName of the configured full key: the same for every request
}

// blockQuota stands for requests_per_unit 0: the smallest quota sluice
// accepts, so that every whole request is refused (sluice.ErrCostExceedsLimit,
// RetryAfter sluice.Never).
const blockQuota = 0.000001

// Limit returns the sluice limit enforcing the rule, and false for an
// unlimited rule, which has none. The limit is named by the configured
// rule's full key — not the request's (detailed_metric, value_to_metric):
// one limit per rule, whatever the values — or, for an Override, by the
// domain and the entries' keys ("domain.override.k1.k2"): as is when it is
// at most sluice.MaxNameLen bytes of letters, digits and "_-.:/"; otherwise
// with every other byte replaced by "_", cut to 111 bytes and followed by
// ":" and 16 hex digits of its FNV-64a hash, so that different keys keep
// different names in every process. Quota is
// RequestsPerUnit — or, for 0, which envoy's ratelimit uses to refuse every
// request, 0.000001 (the least sluice accepts): every cost of a whole
// request exceeds it. A rule read from a file always yields a limit that
// passes sluice.Limit.Validate.
func (r *Rule) Limit() (sluice.Limit, bool) {
	if r.Unlimited {
		return sluice.Limit{}, false
	}
	name := r.limitName
	if name == "" {
		name = limitName(r.FullKey)
	}
	q := float64(r.RequestsPerUnit)
	if q == 0 {
		q = blockQuota
	}
	return sluice.Limit{Name: name, Algorithm: r.Algorithm, Quota: q, Window: r.Window, Burst: r.Burst}, true
}

// KeyEntries returns the entries the request's counter is keyed by, as
// envoyproxy/ratelimit builds its cache key: the request's entries, except
// that an entry matched by a share_threshold wildcard has the wildcard
// ("files/*") for its value, so every value the wildcard matches shares one
// counter. It returns entries itself when share_threshold applies to none.
func (r *Rule) KeyEntries(entries []Entry) []Entry {
	if r.SharePatterns == nil {
		return entries
	}
	out := make([]Entry, len(entries))
	copy(out, entries)
	for i, p := range r.SharePatterns {
		if p != "" && i < len(out) {
			out[i].Value = p
		}
	}
	return out
}

// limitName bounds and sanitises a full key into a sluice.Limit name.
func limitName(key string) string {
	ok := key != "" && len(key) <= sluice.MaxNameLen
	b := []byte(key)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.' || c == ':' || c == '/') {
			b[i] = '_'
			ok = false
		}
	}
	if ok {
		return key
	}
	const keep = sluice.MaxNameLen - 17 // ":" and 16 hex digits
	if len(b) > keep {
		b = b[:keep]
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	return fmt.Sprintf("%s:%016x", b, h.Sum64())
}

// Error is a refused configuration: the file, the line and the reason,
// said as "file:line: reason" (or "file: reason" about the whole file),
// as the gateway's (gateway/config.Error) are: it is the same type. Its
// Reason is in envoyproxy/ratelimit's words where they have some.
type Error = configfile.Error

// Domain is one parsed file: a domain and its descriptors. It is immutable
// once Parse returns it.
type Domain struct {
	// Name is the domain.
	Name string
	// File is the name the file was parsed under.
	File string
	// Extensions reports whether the file uses sluice's extensions (it is
	// then sluice's schema, no longer envoy's).
	Extensions bool

	line  int // of the domain's name
	root  *node
	rules []*Rule
}

// Rules returns every rule of the domain, in file order, with their
// configured full keys.
func (d *Domain) Rules() []*Rule {
	return append([]*Rule(nil), d.rules...)
}

// node is one descriptor (or the domain's root) of the matching tree.
type node struct {
	children      map[string]*node // by "key" or "key_value"
	wildcards     []string         // children's map keys ending in "*", in file order
	rule          *Rule            // nil: no rate_limit
	valueToMetric bool
	share         bool   // share_threshold
	pattern       string // its own map key when share
}

// Config is a set of domains. It is immutable and safe for concurrent use.
type Config struct {
	domains map[string]*Domain
}

// New returns the configuration of the domains, refusing a domain defined
// twice as envoy's ratelimit does (without MERGE_DOMAIN_CONFIG).
func New(domains ...*Domain) (*Config, error) {
	c := &Config{domains: make(map[string]*Domain, len(domains))}
	for _, d := range domains {
		if d == nil {
			return nil, errors.New("envoyconfig: New: a nil domain")
		}
		if first, ok := c.domains[d.Name]; ok {
			return nil, &Error{File: d.File, Line: d.line, Reason: fmt.Sprintf("duplicate domain '%s' in config file (first defined in %s, line %d)", d.Name, first.File, first.line)}
		}
		c.domains[d.Name] = d
	}
	return c, nil
}

// Domains returns the configuration's domains, in no particular order.
func (c *Config) Domains() []*Domain {
	out := make([]*Domain, 0, len(c.domains))
	for _, d := range c.domains {
		out = append(out, d)
	}
	return out
}

// LoadFiles parses the files and returns their configuration. A file
// larger than MaxFileSize is refused.
func LoadFiles(paths ...string) (*Config, error) {
	ds := make([]*Domain, 0, len(paths))
	for _, p := range paths {
		data, err := readFile(p)
		if err != nil {
			return nil, err
		}
		d, err := Parse(p, data)
		if err != nil {
			return nil, err
		}
		ds = append(ds, d)
	}
	return New(ds...)
}

// LoadDir loads the regular files (symbolic links followed) of dir whose
// names end in .yaml or .yml, in name order, as envoy's ratelimit loads its
// runtime directory; names starting with "." are skipped (Kubernetes'
// ..data, editors' files) and so are subdirectories.
func LoadDir(dir string) (*Config, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("envoyconfig: read directory: %w", err)
	}
	var paths []string
	for _, e := range es {
		name := e.Name()
		ext := filepath.Ext(name)
		if strings.HasPrefix(name, ".") || !strings.EqualFold(ext, ".yaml") && !strings.EqualFold(ext, ".yml") {
			continue
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("envoyconfig: %w", err)
		}
		if fi.Mode().IsRegular() {
			paths = append(paths, p)
		}
	}
	return LoadFiles(paths...)
}

func readFile(path string) ([]byte, error) {
	data, err := configfile.ReadFile(path, MaxFileSize)
	if fe := (*configfile.FileError)(nil); errors.As(err, &fe) {
		if fe.TooLarge {
			return nil, &Error{File: path, Reason: tooLarge}
		}
		return nil, &Error{File: path, Reason: fe.Reason, Err: fe.Err}
	}
	return data, nil
}
