package envoyconfig_test

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rls/envoyconfig"
)

// es builds entries from "k=v" (or "k" for an empty value) strings.
func es(kvs ...string) []envoyconfig.Entry {
	out := make([]envoyconfig.Entry, len(kvs))
	for i, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		out[i] = envoyconfig.Entry{Key: k, Value: v}
	}
	return out
}

// rule is a compact expected Rule: the fields Match decides.
type rule struct {
	FullKey   string
	Unit      envoyconfig.Unit
	RPU       uint32
	Unlimited bool
	Shadow    bool
	Name      string
	Replaces  []string
	Detailed  bool
	Share     []string
}

func compact(r *envoyconfig.Rule) *rule {
	if r == nil {
		return nil
	}
	return &rule{r.FullKey, r.Unit, r.RequestsPerUnit, r.Unlimited, r.ShadowMode, r.Name, r.Replaces, r.DetailedMetric, r.SharePatterns}
}

type matchCase struct {
	domain  string
	entries []envoyconfig.Entry
	want    *rule // nil: no rule applies
}

func load(t *testing.T, yamls ...string) *envoyconfig.Config {
	t.Helper()
	var ds []*envoyconfig.Domain
	for i, y := range yamls {
		var data []byte
		if strings.HasSuffix(y, ".yaml") {
			data = mustRead(t, filepath.Join("testdata", y))
		} else {
			data = []byte(y)
		}
		d, err := envoyconfig.Parse(y[:min(len(y), 16)]+string(rune('0'+i)), data)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	c, err := envoyconfig.New(ds...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func runMatches(t *testing.T, c *envoyconfig.Config, cases []matchCase) {
	t.Helper()
	for _, tc := range cases {
		got, ok := c.Match(tc.domain, tc.entries)
		if ok != (got != nil) {
			t.Errorf("%s %v: ok %v with rule %+v", tc.domain, tc.entries, ok, got)
		}
		if g := compact(got); !reflect.DeepEqual(g, tc.want) {
			t.Errorf("%s %v:\n got %+v\nwant %+v", tc.domain, tc.entries, g, tc.want)
		}
		if got == nil {
			continue
		}
		l, limited := got.Limit()
		if limited == got.Unlimited {
			t.Errorf("%s %v: Limit() ok %v for unlimited %v", tc.domain, tc.entries, limited, got.Unlimited)
		}
		if limited {
			if err := l.Validate(); err != nil {
				t.Errorf("%s %v: %v", tc.domain, tc.entries, err)
			}
			if l.Window != got.Unit.Duration() || l.Algorithm != sluice.FixedWindow || l.Quota != float64(got.RequestsPerUnit) && got.RequestsPerUnit != 0 {
				t.Errorf("%s %v: limit %+v for %+v", tc.domain, tc.entries, l, got)
			}
		}
	}
}

// Their TestBasicConfig (test/config/config_test.go), on their
// basic_config.yaml, plus what later versions of that file add — key2 with
// value3 and no limit (which exempts that value from key2's default), key6
// (unlimited), key7 (detailed_metric) — as a second domain.
func TestMatchBasicConfig(t *testing.T) {
	t.Parallel()
	c := load(t, "tests/basic_config.yaml", `domain: later
descriptors:
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: key2
    value: value3
  - key: key6
    rate_limit:
      unlimited: true
  - key: key7
    rate_limit:
      unit: minute
      requests_per_unit: 70
    detailed_metric: true
`)
	sec, min, hour, day := envoyconfig.UnitSecond, envoyconfig.UnitMinute, envoyconfig.UnitHour, envoyconfig.UnitDay
	runMatches(t, c, []matchCase{
		{"foo_domain", nil, nil},
		{"test-domain", nil, nil},
		{"foo_domain", es("key2=x"), nil},
		{"test-domain", es("key1=something"), nil},
		{"test-domain", es("key1=value1"), nil}, // a level without a limit
		{"test-domain", es("key2=value2", "subkey=subvalue"), nil},
		{"test-domain", es("key5=value5", "subkey5=subvalue"), nil},
		{"test-domain", es("key1=value1", "subkey1=something"), &rule{FullKey: "test-domain.key1_value1.subkey1", Unit: sec, RPU: 5}},
		{"test-domain", es("key1=value1", "subkey1=subvalue1"), &rule{FullKey: "test-domain.key1_value1.subkey1_subvalue1", Unit: sec, RPU: 10}},
		{"test-domain", es("key2=something"), &rule{FullKey: "test-domain.key2", Unit: min, RPU: 20}},
		{"test-domain", es("key2=value2"), &rule{FullKey: "test-domain.key2_value2", Unit: min, RPU: 30}},
		{"test-domain", es("key2=value3"), &rule{FullKey: "test-domain.key2", Unit: min, RPU: 20}}, // the default; their test's nil needs their value3 below
		{"test-domain", es("key3=foo"), &rule{FullKey: "test-domain.key3", Unit: hour, RPU: 1}},
		{"test-domain", es("key4=foo"), &rule{FullKey: "test-domain.key4", Unit: day, RPU: 1}},
		{"test-domain", es("key5=value5"), &rule{FullKey: "test-domain.key5_value5", Unit: day, RPU: 15}},
		{"test-domain", es("key5=value5", "subkey5=subvalue5"), &rule{FullKey: "test-domain.key5_value5.subkey5_subvalue5", Unit: day, RPU: 25}},
		{"test-domain", es("key3=foo", "more=entries"), nil}, // the request is deeper than the configuration
		{"later", es("key2=value3"), nil},
		{"later", es("key2=value4"), &rule{FullKey: "later.key2", Unit: min, RPU: 20}},
		{"later", es("key6=foo"), &rule{FullKey: "later.key6", Unlimited: true}},
		{"later", es("key7=unspecified_value"), &rule{FullKey: "later.key7_unspecified_value", Unit: min, RPU: 70, Detailed: true}},
		{"later", es("key7=another_value"), &rule{FullKey: "later.key7_another_value", Unit: min, RPU: 70, Detailed: true}},
		{"later", es("key7"), &rule{FullKey: "later.key7_", Unit: min, RPU: 70, Detailed: true}},
	})
}

// Their TestShadowModeConfig.
func TestMatchShadowMode(t *testing.T) {
	t.Parallel()
	c := load(t, "tests/shadowmode_config.yaml")
	sec, min := envoyconfig.UnitSecond, envoyconfig.UnitMinute
	runMatches(t, c, []matchCase{
		{"test-domain", es("key1=value1", "subkey1=something"), &rule{FullKey: "test-domain.key1_value1.subkey1", Unit: sec, RPU: 5}},
		{"test-domain", es("key1=value1", "subkey1=subvalue1"), &rule{FullKey: "test-domain.key1_value1.subkey1_subvalue1", Unit: sec, RPU: 10, Shadow: true}},
		{"test-domain", es("key2=something"), &rule{FullKey: "test-domain.key2", Unit: min, RPU: 20, Shadow: true}},
		{"test-domain", es("key2=value2"), &rule{FullKey: "test-domain.key2_value2", Unit: min, RPU: 30}},
	})
}

// Their TestWildcardConfig, and the wildcard stats keys of their PR #1017.
func TestMatchWildcard(t *testing.T) {
	t.Parallel()
	c := load(t, "tests/wildcard.yaml", `domain: vtm
descriptors:
  - key: wild
    value: foo*
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: pre*
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: first
    value: a*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: first
    value: ab*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: first
    value: abc
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: any
    value: "*"
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: exempt
    rate_limit:
`)
	min := envoyconfig.UnitMinute
	runMatches(t, c, []matchCase{
		{"test-domain", es("noVal=foo1"), &rule{FullKey: "test-domain.noVal", Unit: min, RPU: 20}},
		{"test-domain", es("noVal=foo2"), &rule{FullKey: "test-domain.noVal", Unit: min, RPU: 20}},
		{"test-domain", es("wild=foo1"), &rule{FullKey: "test-domain.wild_foo*", Unit: min, RPU: 20}},
		{"test-domain", es("wild=foo2"), &rule{FullKey: "test-domain.wild_foo*", Unit: min, RPU: 20}},
		{"test-domain", es("wild=foo"), &rule{FullKey: "test-domain.wild_foo*", Unit: min, RPU: 20}},
		{"test-domain", es("wild=bar"), nil},
		{"test-domain", es("noWild=foo1"), nil},
		{"test-domain", es("noWild=foo"), &rule{FullKey: "test-domain.noWild_foo", Unit: min, RPU: 20}},
		{"test-domain", es("midWildcard=barab"), nil},
		{"test-domain", es("midWild=barab"), nil},
		{"test-domain", es("midWild=bar*b"), &rule{FullKey: "test-domain.midWild_bar*b", Unit: min, RPU: 20}},
		// value_to_metric on a wildcard: the request's value
		{"vtm", es("wild=foo1"), &rule{FullKey: "vtm.wild_foo1", Unit: min, RPU: 20}},
		// a wildcard key without a value matches on "key_value": any key with its prefix
		{"vtm", es("prefix=x"), &rule{FullKey: "vtm.prefix_pre*", Unit: min, RPU: 5}},
		// the first wildcard in file order wins, not the longest; an exact value beats both
		{"vtm", es("first=abd"), &rule{FullKey: "vtm.first_a*", Unit: min, RPU: 1}},
		{"vtm", es("first=abc"), &rule{FullKey: "vtm.first_abc", Unit: min, RPU: 3}},
		// "*" alone: any value, the empty one included
		{"vtm", es("any=x"), &rule{FullKey: "vtm.any_*", Unit: min, RPU: 4}},
		{"vtm", es("any"), &rule{FullKey: "vtm.any_*", Unit: min, RPU: 4}},
		// a null rate_limit is no rate_limit
		{"vtm", es("exempt=x"), nil},
	})
}

// Their share_threshold.yaml (PR #1016): FullKeys, and the patterns that
// key the shared counter (their TestGenerateCacheKeysWithShareThreshold).
func TestMatchShareThreshold(t *testing.T) {
	t.Parallel()
	c := load(t, "tests/share_threshold.yaml")
	min := envoyconfig.UnitMinute
	runMatches(t, c, []matchCase{
		{"test-domain", es("files=files/a.pdf"), &rule{FullKey: "test-domain.files_files/*", Unit: min, RPU: 100, Share: []string{"files/*"}}},
		{"test-domain", es("files=files/sub/b.csv"), &rule{FullKey: "test-domain.files_files/*", Unit: min, RPU: 100, Share: []string{"files/*"}}},
		{"test-domain", es("nested=parent", "files=nested/f1.txt"), &rule{FullKey: "test-domain.nested_parent.files_nested/*", Unit: min, RPU: 200, Share: []string{"", "nested/*"}}},
		{"test-domain", es("files=top/f1.txt", "files=nested/s1.txt"), &rule{FullKey: "test-domain.files_top/*.files_nested/*", Unit: min, RPU: 300, Share: []string{"top/*", "nested/*"}}},
		{"test-domain", es("files=top/f1.txt"), nil}, // a level without a limit
		{"test-domain", es("route=api/v1", "method=GET"), &rule{FullKey: "test-domain.route_api/*.method", Unit: min, RPU: 60, Share: []string{"api/*", ""}}},
		{"test-domain", es("service=svc/a", "endpoint=/x"), &rule{FullKey: "test-domain.service_svc/*.endpoint_/x", Unit: min, RPU: 80, Detailed: true, Share: []string{"svc/*", ""}}},
		{"test-domain", es("path=path/a", "file=file/b", "type=pdf"), &rule{FullKey: "test-domain.path_path/*.file_file/*.type", Unit: min, RPU: 120, Share: []string{"path/*", "", ""}}},
		{"test-domain", es("user=user/1", "resource=res/2", "action=read"), &rule{FullKey: "test-domain.user_user/*.resource_res/*.action", Unit: min, RPU: 150, Share: []string{"user/*", "res/*", ""}}},
		{"test-domain", es("file=test1"), &rule{FullKey: "test-domain.file_test1", Unit: min, RPU: 50}},
		{"test-domain", es("file=test2"), &rule{FullKey: "test-domain.file_test*", Unit: min, RPU: 100, Share: []string{"test*"}}},
	})
	for _, tc := range []struct {
		entries, want []envoyconfig.Entry
	}{
		{es("files=files/a.pdf"), es("files=files/*")},
		{es("nested=parent", "files=nested/f1.txt"), es("nested=parent", "files=nested/*")},
		{es("files=top/f2.pdf", "files=nested/s2.csv"), es("files=top/*", "files=nested/*")},
		{es("file=test1"), es("file=test1")},
	} {
		r, ok := c.Match("test-domain", tc.entries)
		if !ok {
			t.Fatalf("%v: no rule", tc.entries)
		}
		if got := r.KeyEntries(tc.entries); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("KeyEntries(%v) = %v, want %v", tc.entries, got, tc.want)
		}
	}
}

// value_to_metric (their PR #996 and issue #994's configuration).
func TestMatchValueToMetric(t *testing.T) {
	t.Parallel()
	c := load(t, `domain: default
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: user_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
      - key: http_method
        value: DELETE
        descriptors:
          - key: user_id
            rate_limit:
              unit: minute
              requests_per_unit: 6
`)
	min := envoyconfig.UnitMinute
	runMatches(t, c, []matchCase{
		{"default", es("route=/a", "http_method=GET", "user_id=u1"), &rule{FullKey: "default.route_/a.http_method_GET.user_id", Unit: min, RPU: 60}},
		{"default", es("route=/a", "http_method=DELETE", "user_id=u1"), &rule{FullKey: "default.route_/a.http_method_DELETE.user_id", Unit: min, RPU: 6}},
		{"default", es("route", "http_method=GET", "user_id=u1"), &rule{FullKey: "default.route.http_method_GET.user_id", Unit: min, RPU: 60}},
	})
}

// The examples of their README ("The configuration format").
func TestMatchReadmeExamples(t *testing.T) {
	t.Parallel()
	c := load(t,
		"domain: mongo_cps\ndescriptors:\n  - key: database\n    value: users\n    rate_limit: {unit: second, requests_per_unit: 500}\n  - key: database\n    value: default\n    rate_limit: {unit: second, requests_per_unit: 500}\n",
		"domain: messaging\ndescriptors:\n  - key: message_type\n    value: marketing\n    descriptors:\n      - key: to_number\n        rate_limit: {unit: day, requests_per_unit: 5}\n  - key: to_number\n    rate_limit: {unit: day, requests_per_unit: 100}\n",
		"domain: edge_proxy_per_ip\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n  - key: remote_address\n    value: 50.0.0.5\n    rate_limit: {unit: second, requests_per_unit: 0}\n",
		"domain: example4\ndescriptors:\n  - key: key\n    value: value\n    rate_limit: {requests_per_unit: 300, unit: second}\n",
		"domain: internal\ndescriptors:\n  - key: ldap\n    rate_limit: {unlimited: true}\n  - key: azure\n    rate_limit: {unit: minute, requests_per_unit: 100}\n",
		"domain: example6\ndescriptors:\n  - key: service\n    descriptors:\n      - key: user\n        value: user-a\n        rate_limit: {requests_per_unit: 10, unit: second}\n        shadow_mode: true\n      - key: user\n        value: user-b\n        rate_limit: {requests_per_unit: 20, unit: second}\n",
		"domain: example7\ndescriptors:\n  - key: key_1\n    value: value_1\n    descriptors:\n      - key: user\n        value: bkthomps\n        rate_limit: {name: specific_limit, requests_per_unit: 5, unit: second}\n  - key: key_2\n    value: value_2\n    descriptors:\n      - key: user\n        value: bkthomps\n        rate_limit:\n          replaces:\n            - name: specific_limit\n          requests_per_unit: 10\n          unit: second\n",
	)
	sec, min, day := envoyconfig.UnitSecond, envoyconfig.UnitMinute, envoyconfig.UnitDay
	runMatches(t, c, []matchCase{
		{"mongo_cps", es("database=users"), &rule{FullKey: "mongo_cps.database_users", Unit: sec, RPU: 500}},
		{"mongo_cps", es("database=other"), nil},
		{"messaging", es("message_type=marketing", "to_number=2061111111"), &rule{FullKey: "messaging.message_type_marketing.to_number", Unit: day, RPU: 5}},
		{"messaging", es("to_number=2061111111"), &rule{FullKey: "messaging.to_number", Unit: day, RPU: 100}},
		{"messaging", es("message_type=transactional", "to_number=2061111111"), nil},
		{"edge_proxy_per_ip", es("remote_address=50.0.0.1"), &rule{FullKey: "edge_proxy_per_ip.remote_address", Unit: sec, RPU: 10}},
		{"edge_proxy_per_ip", es("remote_address=50.0.0.5"), &rule{FullKey: "edge_proxy_per_ip.remote_address_50.0.0.5", Unit: sec, RPU: 0}},
		{"example4", es("key=value", "subkey=subvalue"), nil},
		{"example4", es("key=value"), &rule{FullKey: "example4.key_value", Unit: sec, RPU: 300}},
		{"internal", es("ldap=x"), &rule{FullKey: "internal.ldap", Unlimited: true}},
		{"internal", es("azure=x"), &rule{FullKey: "internal.azure", Unit: min, RPU: 100}},
		{"example6", es("service=auth-service", "user=user-a"), &rule{FullKey: "example6.service.user_user-a", Unit: sec, RPU: 10, Shadow: true}},
		{"example6", es("service=auth-service", "user=user-b"), &rule{FullKey: "example6.service.user_user-b", Unit: sec, RPU: 20}},
		{"example6", es("service=auth-service", "user=user-c"), nil},
		{"example7", es("key_1=value_1", "user=bkthomps"), &rule{FullKey: "example7.key_1_value_1.user_bkthomps", Unit: sec, RPU: 5, Name: "specific_limit"}},
		{"example7", es("key_2=value_2", "user=bkthomps"), &rule{FullKey: "example7.key_2_value_2.user_bkthomps", Unit: sec, RPU: 10, Replaces: []string{"specific_limit"}}},
	})
}

// Their example.yaml (examples/ratelimit/config), with the curl calls of
// their README's demo.
func TestMatchTheirExample(t *testing.T) {
	t.Parallel()
	c := load(t, "examples/example.yaml")
	sec, min := envoyconfig.UnitSecond, envoyconfig.UnitMinute
	runMatches(t, c, []matchCase{
		{"rl", es("source_cluster=proxy", "destination_cluster=mock"), &rule{FullKey: "rl.source_cluster_proxy.destination_cluster_mock", Unit: min, RPU: 1}},
		{"rl", es("foo=foo"), &rule{FullKey: "rl.foo", Unit: min, RPU: 2}},
		{"rl", es("foo=foo", "bar=bar"), &rule{FullKey: "rl.foo.bar", Unit: min, RPU: 3}},
		{"rl", es("foo=foo", "bar=banned"), &rule{FullKey: "rl.foo.bar_banned", Unit: min, RPU: 0}},
		{"rl", es("foo=foo", "baz=baz"), &rule{FullKey: "rl.foo.baz", Unit: sec, RPU: 1}},
		{"rl", es("foo=foo", "baz=shady"), &rule{FullKey: "rl.foo.baz_shady", Unit: min, RPU: 1, Shadow: true}},
		{"rl", es("foo=foo", "bay=x"), &rule{FullKey: "rl.foo.bay", Unlimited: true}},
		{"rl", es("qux=x"), &rule{FullKey: "rl.qux", Unlimited: true}},
		{"rl", es("foo=foo", "nope=x"), nil},
	})
}

// A rule Match returns unchanged is the configured one; one it adjusts is a
// copy, so the configuration never changes.
func TestMatchDoesNotChangeTheConfig(t *testing.T) {
	t.Parallel()
	c := load(t, "domain: d\ndescriptors:\n  - key: k\n    detailed_metric: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	a, _ := c.Match("d", es("k=a"))
	b, _ := c.Match("d", es("k=b"))
	la, _ := a.Limit()
	lb, _ := b.Limit()
	// The full key (stats) carries the value; the limit keeps the
	// configured rule's name, one per rule whatever the values.
	if a.FullKey != "d.k_a" || b.FullKey != "d.k_b" || la.Name != "d.k" || lb.Name != "d.k" {
		t.Fatalf("got %q (%q) and %q (%q)", a.FullKey, la.Name, b.FullKey, lb.Name)
	}
	configured := c.Domains()[0].Rules()[0]
	if configured.FullKey != "d.k" || a == configured || b == configured {
		t.Fatalf("the configured rule changed or was returned adjusted: %+v", configured)
	}
}

// Their TestConfigLimitOverride.
func TestOverride(t *testing.T) {
	t.Parallel()
	c := load(t, "tests/basic_config.yaml")
	if r, ok := c.Override("foo_domain", nil, 10, envoyconfig.UnitDay); ok {
		t.Fatalf("unknown domain: %+v", r)
	}
	// The full key is theirs; the limit is named by the domain and the
	// entries' keys (one name per kind of descriptor, whatever the values).
	const name = "test-domain.override.key1.subkey1"
	for _, tc := range []struct {
		entries []envoyconfig.Entry
		rpu     uint32
		unit    envoyconfig.Unit
		want    string
	}{
		{es("key1=value1", "subkey1=something"), 10, envoyconfig.UnitDay, "test-domain.key1_value1.subkey1_something"},
		{es("key1=value1", "subkey1=something"), 42, envoyconfig.UnitHour, "test-domain.key1_value1.subkey1_something"},
		{es("key1=value1", "subkey1=something_else"), 42, envoyconfig.UnitHour, "test-domain.key1_value1.subkey1_something_else"},
		{es("key1", "subkey1=x"), 1, envoyconfig.UnitWeek, "test-domain.key1.subkey1_x"},
	} {
		r, ok := c.Override("test-domain", tc.entries, tc.rpu, tc.unit)
		if !ok {
			t.Fatalf("%v: no rule", tc.entries)
		}
		l, _ := r.Limit()
		want := sluice.Limit{Name: name, Algorithm: sluice.FixedWindow, Quota: float64(tc.rpu), Window: tc.unit.Duration()}
		if r.FullKey != tc.want || r.RequestsPerUnit != tc.rpu || r.Unit != tc.unit || r.ShadowMode || r.Name != "" || l != want {
			t.Errorf("%v: %+v, limit %+v; want %q, %+v", tc.entries, r, l, tc.want, want)
		}
	}
	if r, ok := c.Override("test-domain", es("k=v"), 1, envoyconfig.UnitUnknown); ok {
		t.Fatalf("an override without a unit: %+v", r)
	}
}

func TestUnits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		u    envoyconfig.Unit
		name string
		d    time.Duration
	}{
		{envoyconfig.UnitUnknown, "UNKNOWN", 0},
		{envoyconfig.UnitSecond, "SECOND", time.Second},
		{envoyconfig.UnitMinute, "MINUTE", time.Minute},
		{envoyconfig.UnitHour, "HOUR", time.Hour},
		{envoyconfig.UnitDay, "DAY", 24 * time.Hour},
		{envoyconfig.UnitMonth, "MONTH", 30 * 24 * time.Hour},
		{envoyconfig.UnitYear, "YEAR", 365 * 24 * time.Hour},
		{envoyconfig.UnitWeek, "WEEK", 7 * 24 * time.Hour},
		{8, "Unit(8)", 0},
		{-1, "Unit(-1)", 0},
	} {
		if tc.u.String() != tc.name || tc.u.Duration() != tc.d {
			t.Errorf("%d: %q %v, want %q %v", int32(tc.u), tc.u.String(), tc.u.Duration(), tc.name, tc.d)
		}
	}
}
