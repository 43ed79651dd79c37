package envoyconfig_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/rls/envoyconfig"
)

// refused checks that err is an *envoyconfig.Error of file at line whose
// reason contains want.
func refused(t *testing.T, err error, file string, line int, want string) {
	t.Helper()
	var e *envoyconfig.Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want an *envoyconfig.Error", err)
	}
	if e.File != file || e.Line != line || !strings.Contains(e.Reason, want) {
		t.Fatalf("got %q (file %q, line %d), want file %q, line %d, a reason containing %q", err, e.File, e.Line, file, line, want)
	}
	if !strings.Contains(err.Error(), file) {
		t.Fatalf("%q does not name the file %q", err, file)
	}
}

// The rejections of envoyproxy/ratelimit's config_test.go (their messages,
// which sluice keeps), and what sluice refuses besides.
func TestParseRefuses(t *testing.T) {
	t.Parallel()
	const head = "domain: d\ndescriptors:\n"
	for _, tc := range []struct {
		name string
		yaml string
		line int
		want string
	}{
		// theirs
		{"empty domain", "domain: \"\"\ndescriptors: []\n", 1, "config file cannot have empty domain"},
		{"no domain", "descriptors:\n  - key: a\n", 1, "config file cannot have empty domain"},
		{"null domain", "domain:\n", 1, "config file cannot have empty domain"},
		{"empty file", "", 1, "config file cannot have empty domain"},
		{"comments only", "# nothing\n", 1, "config file cannot have empty domain"},
		{"empty key", head + "  - value: v\n    rate_limit: {unit: second, requests_per_unit: 1}\n", 3, "descriptor has empty key"},
		{"null key", head + "  - key:\n", 3, "descriptor has empty key"},
		{"duplicate descriptor", head + "  - key: a\n    value: b\n  - key: a\n    value: b\n", 5, "duplicate descriptor composite key 'd.a_b'"},
		{"duplicate value-less descriptor", head + "  - key: a\n  - key: a\n", 4, "duplicate descriptor composite key 'd.a'"},
		{"duplicate nested descriptor", head + "  - key: a\n    descriptors:\n      - key: b\n        value: c*\n      - key: b\n        value: c*\n", 7, "duplicate descriptor composite key 'd.a.b_c*'"},
		{"key_value collides with key and value", head + "  - key: a_b\n  - key: a\n    value: b\n", 4, "duplicate descriptor composite key 'd.a_b'"},
		{"unknown unit", head + "  - key: a\n    rate_limit:\n      unit: foo\n      requests_per_unit: 1\n", 5, "invalid rate limit unit 'foo'"},
		{"unit unknown", head + "  - key: a\n    rate_limit: {unit: unknown, requests_per_unit: 1}\n", 4, "invalid rate limit unit 'unknown'"},
		{"no unit", head + "  - key: a\n    rate_limit:\n      requests_per_unit: 1\n", 5, "invalid rate limit unit ''"},
		{"empty rate_limit", head + "  - key: a\n    rate_limit: {}\n", 4, "invalid rate limit unit ''"},
		{"unit with unlimited", head + "  - key: a\n    rate_limit:\n      unlimited: true\n      unit: day\n", 6, "should not specify rate limit unit when unlimited"},
		{"unknown key at the top", "domain: d\nratelimit: {}\n", 2, "config error, unknown key 'ratelimit' in the top level"},
		{"a gateway configuration", "listen: 127.0.0.1:8080\nupstream: http://127.0.0.1:3000\nlimits: []\n", 1, "unknown key 'listen' in the top level: this looks like a gateway configuration (sluice gateway --config)"},
		{"a gateway configuration's limits", "limits: [{name: a, quota: 1, window: 1s}]\nrules: []\n", 1, "unknown key 'limits' in the top level: this looks like a gateway configuration (sluice gateway --config)"},
		{"a gateway key in a descriptor", head + "  - key: a\n    limits: []\n", 4, "unknown key 'limits' in a descriptor (want one of key, value"},
		{"unknown key in a descriptor", head + "  - key: a\n    ratelimit:\n      unit: day\n", 4, "config error, unknown key 'ratelimit' in a descriptor"},
		{"unknown key in rate_limit", head + "  - key: a\n    rate_limit:\n      unit: day\n      requestsperunit: 5\n", 6, "config error, unknown key 'requestsperunit' in rate_limit"},
		{"unknown key in replaces", head + "  - key: a\n    rate_limit:\n      unit: day\n      replaces: [{nam: x}]\n", 6, "config error, unknown key 'nam' in a replaces entry"},
		{"non-string key", "0.25: d\n", 1, "config error, key is not of type string: 0.25"},
		{"bool key", head + "  - key: a\n    true: x\n", 4, "config error, key is not of type string: true"},
		{"list of non-maps", head + "  - a\n  - b\n", 3, "config error, yaml file contains list of type other than map: a"},
		{"replaces of non-maps", head + "  - key: a\n    rate_limit: {unit: day, replaces: [x]}\n", 4, "list of type other than map: x"},
		{"replaces itself", head + "  - key: a\n    rate_limit:\n      name: self\n      unit: second\n      replaces:\n        - name: self\n", 8, "replaces should not contain name of same descriptor"},
		{"empty replaces entry", head + "  - key: a\n    rate_limit:\n      unit: second\n      replaces:\n        - name: \"\"\n", 7, "should not have an empty replaces entry"},
		{"negative requests_per_unit", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n", 4, "requests_per_unit must be a whole number from 0 to 4294967295, not \"-1\""},
		{"requests_per_unit beyond 32 bits", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n", 4, "requests_per_unit must be a whole number"},
		{"fractional requests_per_unit", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1.5}\n", 4, "not \"1.5\" (float)"},
		{"quoted requests_per_unit", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: \"5\"}\n", 4, "not \"5\" (str)"},
		{"float value", head + "  - key: a\n    value: 1.5\n", 4, "value 1.5 is a float, which envoy's ratelimit refuses; quote it"},
		{"list value", head + "  - key: [a]\n", 3, "key must be a string, not a list"},
		{"quoted bool", head + "  - key: a\n    shadow_mode: \"true\"\n", 4, "shadow_mode must be true or false"},
		{"share_threshold without a wildcard", head + "  - key: a\n    value: b\n    share_threshold: true\n", 3, "share_threshold can only be used with wildcard values (ending with '*'), but found key 'a_b'"},
		{"not YAML", "domain: d\ndescriptors: [\n", 2, "error loading config file: yaml: line 2: did not find expected node content"},
		{"tab indentation", "domain: d\n\tdescriptors: []\n", 2, "error loading config file: yaml: line 2"},
		{"a list at the top", "- domain: d\n", 1, "the file must be a mapping of domain and descriptors, not a list"},
		{"a scalar at the top", "hello\n", 1, "the file must be a mapping"},
		{"descriptors not a list", "domain: d\ndescriptors: {key: a}\n", 2, "descriptors must be a list of descriptors, not a mapping"},
		{"rate_limit not a mapping", head + "  - key: a\n    rate_limit: 5\n", 4, "rate_limit must be a mapping"},

		// sluice's own: what envoy's ratelimit silently ignores, and what sluice does not do
		{"misplaced shadow_mode", head + "  - key: a\n    rate_limit:\n      unit: day\n      shadow_mode: true\n", 6, "unknown key 'shadow_mode' in rate_limit (it is a key of a descriptor; envoy's ratelimit would ignore it here)"},
		{"misplaced unit", head + "  - key: a\n    unit: day\n", 4, "unknown key 'unit' in a descriptor (it is a key of rate_limit"},
		{"key set twice", "domain: d\ndomain: e\n", 2, "key 'domain' is set twice in the top level (first at line 1)"},
		{"quota_mode", head + "  - key: a\n    quota_mode: true\n", 4, "quota mode"},
		{"metadata", head + "  - key: a\n    metadata: {name: x}\n", 4, "descriptor metadata"},
		{"unit_multiplier", head + "  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1, unit_multiplier: 5}\n", 4, "sluice's window extension"},
		{"second document", "domain: d\n---\ndomain: e\n", 3, "a second YAML document"},
		{"too deep", "domain: d\ndescriptors:" + strings.Repeat(" [{key: k, descriptors:", 33) + " []" + strings.Repeat("}]", 33) + "\n", 2, "nested more than 32 levels deep"},
		{"merge of a scalar", head + "  - <<: 5\n    key: a\n", 3, "a merge key (<<) must name a mapping"},

		// sluice's extensions, validated
		{"unknown algorithm", head + "  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: bucket}\n", 4, "algorithm: sluice: invalid limit: unknown algorithm \"bucket\""},
		{"burst on a fixed window", head + "  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1, burst: 5}\n", 4, "fixed_window has no burst"},
		{"unit and window", head + "  - key: a\n    rate_limit: {unit: minute, window: 30s, requests_per_unit: 1}\n", 4, "both unit and window"},
		{"bad window", head + "  - key: a\n    rate_limit: {window: soon, requests_per_unit: 1}\n", 4, "window \"soon\": want a positive Go duration"},
		{"negative window", head + "  - key: a\n    rate_limit: {window: -1s, requests_per_unit: 1}\n", 4, "want a positive Go duration"},
		{"sub-microsecond window", head + "  - key: a\n    rate_limit: {window: 1500ns, requests_per_unit: 1}\n", 4, "whole number of microseconds"},
		{"on_failure not a string", head + "  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1, on_failure: [fail_open]}\n", 4, "on_failure must be a string, not a list"},
		{"burst not a number", head + "  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: gcra, burst: fast}\n", 4, "burst must be a number, not \"fast\" (str)"},
		{"bad on_failure", head + "  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1, on_failure: fail_maybe}\n", 4, "on_failure \"fail_maybe\": want fail_open, fail_closed or fail_local"},
		{"extension when unlimited", head + "  - key: a\n    rate_limit: {unlimited: true, algorithm: gcra}\n", 4, "should not specify algorithm when unlimited"},
		{"concurrency beyond MaxEntries", head + "  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 20000, algorithm: concurrency}\n", 4, "whole number up to 10000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := envoyconfig.Parse("t.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("accepted, domain %q with %d rules; want %q at line %d", d.Name, len(d.Rules()), tc.want, tc.line)
			}
			refused(t, err, "t.yaml", tc.line, tc.want)
		})
	}
}

// Every refusal reads "file:line: reason" (or "file: reason" about the
// whole file), in the configuration's words: no Go package, type or
// constant name.
func TestErrorFormat(t *testing.T) {
	t.Parallel()
	if got := (&envoyconfig.Error{File: "edge.yaml", Line: 4, Reason: "invalid rate limit unit 'fortnight'"}).Error(); got != "edge.yaml:4: invalid rate limit unit 'fortnight'" {
		t.Errorf("with a line: %q", got)
	}
	if got := (&envoyconfig.Error{File: "edge.yaml", Reason: "larger than 1048576 bytes"}).Error(); got != "edge.yaml: larger than 1048576 bytes" {
		t.Errorf("without a line: %q", got)
	}
	for name, yaml := range map[string]string{
		"too large":  "domain: d\n" + strings.Repeat("#", envoyconfig.MaxFileSize),
		"too deep":   "domain: d\ndescriptors:" + strings.Repeat(" [{key: k, descriptors:", 33) + " []" + strings.Repeat("}]", 33) + "\n",
		"bad unit":   "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
		"gateway":    "upstream: http://127.0.0.1:3000\n",
		"on_failure": "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1, on_failure: open}\n",
	} {
		_, err := envoyconfig.Parse("t.yaml", []byte(yaml))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "t.yaml:") {
			t.Errorf("%s: %q does not start with the file", name, msg)
		}
		for _, goName := range []string{"envoyconfig", "MaxFileSize", "MaxDepth", "FailurePolicy", "sluice.", "*"} {
			if strings.Contains(msg, goName) {
				t.Errorf("%s: %q says %q, a Go name", name, msg, goName)
			}
		}
	}
}

// Aliases cannot make a small file an exponential walk.
func TestParseRefusesAliasBomb(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n  - key: a0\n    descriptors: &l0 [{key: x}, {key: y}]\n")
	for i := 1; i < 30; i++ {
		fmt.Fprintf(&b, "  - key: a%d\n    descriptors: &l%d [{key: x, descriptors: *l%d}, {key: y, descriptors: *l%d}]\n", i, i, i-1, i-1)
	}
	_, err := envoyconfig.Parse("bomb.yaml", []byte(b.String()))
	var e *envoyconfig.Error
	if !errors.As(err, &e) || !strings.Contains(e.Reason, "YAML nodes once aliases are expanded") || e.Line < 4 {
		t.Fatalf("got %v, want a refusal of the expansion", err)
	}
}

func TestParseRefusesLargeFile(t *testing.T) {
	t.Parallel()
	data := []byte("domain: d\n" + strings.Repeat("#", envoyconfig.MaxFileSize))
	_, err := envoyconfig.Parse("big.yaml", data)
	refused(t, err, "big.yaml", 0, "larger than 1048576 bytes")
	p := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = envoyconfig.LoadFiles(p)
	refused(t, err, p, 0, "larger than 1048576 bytes")
}

// envoyproxy/ratelimit's own refused files (testdata/refused, one comment
// line added on top), with their messages.
func TestParseRefusesTheirFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file string
		line int
		want string
	}{
		{"duplicate_key.yaml", 7, "duplicate descriptor composite key 'test-domain.key1_value1'"},
		{"misspelled_key.yaml", 6, "config error, unknown key 'ratelimit'"},
		{"misspelled_key2.yaml", 8, "config error, unknown key 'requestsperunit'"},
		{"non_map_list.yaml", 4, "config error, yaml file contains list of type other than map: a"},
		{"non_string_key.yaml", 2, "config error, key is not of type string: 0.25"},
		{"replaces_empty.yaml", 11, "should not have an empty replaces entry"},
		{"replaces_self.yaml", 11, "replaces should not contain name of same descriptor"},
		{"unlimited_with_unit.yaml", 7, "should not specify rate limit unit when unlimited"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			p := filepath.Join("testdata", "refused", tc.file)
			_, err := envoyconfig.LoadFiles(p)
			refused(t, err, p, tc.line, tc.want)
		})
	}
}

func TestDuplicateDomain(t *testing.T) {
	t.Parallel()
	a, err := envoyconfig.Parse("a.yaml", []byte("domain: test-domain\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := envoyconfig.Parse("b.yaml", []byte("# the same domain\ndomain: test-domain\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = envoyconfig.New(a, b)
	refused(t, err, "b.yaml", 2, "duplicate domain 'test-domain' in config file (first defined in a.yaml, line 1)")

	dir := t.TempDir()
	for name, body := range map[string]string{"1.yaml": "domain: x\n", "2.yml": "domain: x\n", "3.txt": "not read", ".4.yaml": "not read"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, err = envoyconfig.LoadDir(dir)
	refused(t, err, filepath.Join(dir, "2.yml"), 1, "duplicate domain 'x'")
}

func TestLoadDirSkips(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, body := range map[string]string{"a.yaml": "domain: a\n", "b.YML": "domain: b\n", "c.txt": "{", ".d.yaml": "{"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "e.yaml"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "a.yaml.target"), filepath.Join(dir, "f.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := envoyconfig.LoadDir(dir); err == nil || !strings.Contains(err.Error(), "f.yaml") {
		t.Fatalf("a dangling link: %v, want an error naming it", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.yaml.target"), []byte("domain: f\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := envoyconfig.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"a", "b", "f"} {
		if _, ok := c.Override(d, []envoyconfig.Entry{{Key: "k"}}, 1, envoyconfig.UnitSecond); !ok {
			t.Errorf("domain %q not loaded", d)
		}
	}
	if _, err := envoyconfig.LoadDir(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing directory loaded")
	}
}

// What envoyproxy/ratelimit accepts (yaml.v2 and their loader), sluice
// accepts with the same meaning.
func TestParseAccepts(t *testing.T) {
	t.Parallel()
	const head = "domain: d\ndescriptors:\n"
	type want struct {
		unit      envoyconfig.Unit
		rpu       uint32
		window    time.Duration
		unlimited bool
		shadow    bool
	}
	for _, tc := range []struct {
		name string
		yaml string
		want want
	}{
		{"unit in capitals", head + "  - key: a\n    rate_limit: {unit: MINUTE, requests_per_unit: 7}\n", want{envoyconfig.UnitMinute, 7, time.Minute, false, false}},
		{"unit in mixed case", head + "  - key: a\n    rate_limit: {unit: sEcOnD, requests_per_unit: 7}\n", want{envoyconfig.UnitSecond, 7, time.Second, false, false}},
		{"hour", head + "  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n", want{envoyconfig.UnitHour, 1, time.Hour, false, false}},
		{"day", head + "  - key: a\n    rate_limit: {unit: day, requests_per_unit: 1}\n", want{envoyconfig.UnitDay, 1, 24 * time.Hour, false, false}},
		{"week", head + "  - key: a\n    rate_limit: {unit: week, requests_per_unit: 1}\n", want{envoyconfig.UnitWeek, 1, 7 * 24 * time.Hour, false, false}},
		{"month", head + "  - key: a\n    rate_limit: {unit: month, requests_per_unit: 1}\n", want{envoyconfig.UnitMonth, 1, 30 * 24 * time.Hour, false, false}},
		{"year", head + "  - key: a\n    rate_limit: {unit: year, requests_per_unit: 1}\n", want{envoyconfig.UnitYear, 1, 365 * 24 * time.Hour, false, false}},
		{"zero: refuse all", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 0}\n", want{envoyconfig.UnitSecond, 0, time.Second, false, false}},
		{"no requests_per_unit", head + "  - key: a\n    rate_limit: {unit: second}\n", want{envoyconfig.UnitSecond, 0, time.Second, false, false}},
		{"largest requests_per_unit", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4294967295}\n", want{envoyconfig.UnitSecond, 4294967295, time.Second, false, false}},
		{"hex and underscores", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 0x1_0}\n", want{envoyconfig.UnitSecond, 16, time.Second, false, false}},
		{"unlimited with requests_per_unit", head + "  - key: a\n    rate_limit: {unlimited: true, requests_per_unit: 5}\n", want{envoyconfig.UnitUnknown, 5, 0, true, false}},
		{"unlimited with a unit that is none", head + "  - key: a\n    rate_limit: {unlimited: true, unit: fortnight}\n", want{envoyconfig.UnitUnknown, 0, 0, true, false}},
		{"YAML 1.1 booleans", head + "  - key: a\n    shadow_mode: yes\n    rate_limit: {unlimited: On}\n", want{envoyconfig.UnitUnknown, 0, 0, true, true}},
		{"false booleans", head + "  - key: a\n    shadow_mode: off\n    rate_limit: {unlimited: n, unit: second, requests_per_unit: 1}\n", want{envoyconfig.UnitSecond, 1, time.Second, false, false}},
		{"anchors and aliases", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &rl {unit: minute, requests_per_unit: 3}\n  - key: b\n    rate_limit: *rl\n", want{envoyconfig.UnitMinute, 3, time.Minute, false, false}},
		{"merge keys", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &rl {unit: minute, requests_per_unit: 3}\n  - key: b\n    rate_limit:\n      <<: *rl\n      requests_per_unit: 9\n", want{envoyconfig.UnitMinute, 3, time.Minute, false, false}},
		{"a document marker", "---\n" + head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2}\n...\n", want{envoyconfig.UnitSecond, 2, time.Second, false, false}},
		{"an empty second document", head + "  - key: a\n    rate_limit: {unit: second, requests_per_unit: 2}\n---\n", want{envoyconfig.UnitSecond, 2, time.Second, false, false}},
		{"sluice's window", head + "  - key: a\n    rate_limit: {window: 1m, requests_per_unit: 2}\n", want{envoyconfig.UnitMinute, 2, time.Minute, false, false}},
		{"sluice's odd window", head + "  - key: a\n    rate_limit: {window: 90s, requests_per_unit: 2}\n", want{envoyconfig.UnitUnknown, 2, 90 * time.Second, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := envoyconfig.Parse("t.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			r := d.Rules()[0]
			got := want{r.Unit, r.RequestsPerUnit, r.Window, r.Unlimited, r.ShadowMode}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Descriptor keys and values are strings whatever YAML reads them as
// (yaml.v2 sets a string field from any scalar but a float).
func TestParseScalarsAsStrings(t *testing.T) {
	t.Parallel()
	d, err := envoyconfig.Parse("t.yaml", []byte("domain: 42\ndescriptors:\n  - key: true\n    value: 0x10\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: date\n    value: 2024-01-02\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: no\n    value: ~\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, r := range d.Rules() {
		keys = append(keys, r.FullKey)
	}
	if want := []string{"42.true_0x10", "42.date_2024-01-02", "42.no"}; d.Name != "42" || !reflect.DeepEqual(keys, want) {
		t.Fatalf("domain %q, keys %q; want 42, %q", d.Name, keys, want)
	}
}

func TestParseExtensions(t *testing.T) {
	t.Parallel()
	plain, err := envoyconfig.Parse("t.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if plain.Extensions || plain.Rules()[0].Algorithm != sluice.FixedWindow || plain.Rules()[0].OnFailure != nil {
		t.Fatalf("an envoy file: extensions %v, %+v", plain.Extensions, plain.Rules()[0])
	}
	d, err := envoyconfig.Parse("t.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      window: 30s\n      requests_per_unit: 10\n      algorithm: token_bucket\n      burst: 2.5\n      on_failure: fail_local\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := d.Rules()[0]
	l, ok := r.Limit()
	want := sluice.Limit{Name: "d.a", Algorithm: sluice.TokenBucket, Quota: 10, Window: 30 * time.Second, Burst: 2.5}
	if !d.Extensions || !ok || l != want || r.OnFailure == nil || *r.OnFailure != sluice.FailLocal || r.Unit != envoyconfig.UnitUnknown {
		t.Fatalf("extensions %v, rule %+v, limit %+v (%v); want %+v, fail_local", d.Extensions, r, l, ok, want)
	}
	for _, p := range []sluice.FailurePolicy{sluice.FailOpen, sluice.FailClosed, sluice.FailLocal} {
		d, err := envoyconfig.Parse("t.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, on_failure: "+p.String()+"}\n"))
		if err != nil {
			t.Fatalf("on_failure %v: %v", p, err)
		}
		if got := d.Rules()[0].OnFailure; got == nil || *got != p {
			t.Errorf("on_failure %v: read %v", p, got)
		}
	}
}

func TestLimitNames(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("v", 200)
	for _, tc := range []struct{ value, want string }{
		{"plain", "d.k_plain"},
		{"a b", "d.k_a_b:"},
		{"a+b", "d.k_a_b:"},
		{"/api/v1:x.y-z", "d.k_/api/v1:x.y-z"},
		{long, "d.k_" + long[:107] + ":"},
	} {
		d, err := envoyconfig.Parse("t.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    value: '"+tc.value+"'\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
		if err != nil {
			t.Fatal(err)
		}
		l, _ := d.Rules()[0].Limit()
		if err := l.Validate(); err != nil {
			t.Errorf("%q: %v", tc.value, err)
		}
		if !strings.HasPrefix(l.Name, tc.want) || strings.HasSuffix(tc.want, ":") != (len(l.Name) == len(tc.want)+16) {
			t.Errorf("%q: name %q, want %q (+ 16 hex digits when it ends in :)", tc.value, l.Name, tc.want)
		}
	}
	// Different keys that sanitise alike keep different names.
	a, _ := envoyconfig.Parse("t.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    value: 'a b'\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: k\n    value: 'a+b'\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	l1, _ := a.Rules()[0].Limit()
	l2, _ := a.Rules()[1].Limit()
	if l1.Name == l2.Name {
		t.Fatalf("both named %q", l1.Name)
	}
}

// requests_per_unit 0 refuses everything; unlimited has no limit.
func TestLimitZeroAndUnlimited(t *testing.T) {
	t.Parallel()
	d, err := envoyconfig.Parse("t.yaml", []byte("domain: d\ndescriptors:\n  - key: z\n    rate_limit: {unit: second, requests_per_unit: 0}\n  - key: u\n    rate_limit: {unlimited: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	l, ok := d.Rules()[0].Limit()
	if !ok || l.Validate() != nil || l.Capacity() >= 1 || l.Algorithm != sluice.FixedWindow {
		t.Fatalf("requests_per_unit 0: %+v, %v; want a valid fixed window of capacity < 1", l, ok)
	}
	if l, ok := d.Rules()[1].Limit(); ok {
		t.Fatalf("unlimited: %+v, want none", l)
	}
}

// Their example and test files parse unchanged.
func TestTheirFilesParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file   string
		domain string
		rules  int
	}{
		{"examples/example.yaml", "rl", 8},
		{"examples/config.yaml", "mongo_cps", 2},
		{"tests/basic_config.yaml", "test-domain", 8},
		{"tests/wildcard.yaml", "test-domain", 4},
		{"tests/shadowmode_config.yaml", "test-domain", 4},
		{"tests/share_threshold.yaml", "test-domain", 9},
	} {
		c, err := envoyconfig.LoadFiles(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		d, err := envoyconfig.Parse(tc.file, mustRead(t, filepath.Join("testdata", tc.file)))
		if err != nil {
			t.Fatal(err)
		}
		if d.Name != tc.domain || len(d.Rules()) != tc.rules || d.Extensions {
			t.Errorf("%s: domain %q, %d rules, extensions %v; want %q, %d, false", tc.file, d.Name, len(d.Rules()), d.Extensions, tc.domain, tc.rules)
		}
		for _, r := range d.Rules() {
			if l, ok := r.Limit(); ok {
				if err := l.Validate(); err != nil {
					t.Errorf("%s: %s: %v", tc.file, r.FullKey, err)
				}
			}
		}
		if _, ok := c.Override(tc.domain, []envoyconfig.Entry{{Key: "k"}}, 1, envoyconfig.UnitSecond); !ok {
			t.Errorf("%s: domain %q not loaded", tc.file, tc.domain)
		}
	}
	c, err := envoyconfig.LoadDir(filepath.Join("testdata", "examples"))
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := c.Match("mongo_cps", []envoyconfig.Entry{{Key: "database", Value: "users"}}); !ok || r.RequestsPerUnit != 5 {
		t.Fatalf("LoadDir: mongo_cps database=users: %+v, %v", r, ok)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
