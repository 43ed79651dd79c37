package envoyconfig_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/rls/envoyconfig"
)

// FuzzParse: Parse never panics; what it refuses is an *Error naming the
// file; what it accepts loads, and every rule's limit — as configured and as
// Match adjusts it for a request — passes sluice.Limit.Validate.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"examples", "tests", "refused"} {
		paths, _ := filepath.Glob(filepath.Join("testdata", dir, "*.yaml"))
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b, "key1=value1,subkey1=x")
		}
	}
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    value: 'a b*'\n    share_threshold: true\n    detailed_metric: true\n    rate_limit: {unit: second, requests_per_unit: 0}\n"), "k=a b c")
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    value_to_metric: true\n    rate_limit: {window: 90s, requests_per_unit: 3, algorithm: gcra, burst: 2}\n"), "k=\x00\xff")
	f.Add([]byte("domain: d\ndescriptors:\n  - &a {key: k, rate_limit: {unlimited: yes}}\n  - <<: *a\n    key: j\n"), "j=1")
	f.Fuzz(func(t *testing.T, data []byte, request string) {
		d, err := envoyconfig.Parse("fuzz.yaml", data)
		if err != nil {
			var e *envoyconfig.Error
			if !errors.As(err, &e) || e.File != "fuzz.yaml" || e.Line < 0 || e.Reason == "" {
				t.Fatalf("refused with %#v", err)
			}
			return
		}
		if d.Name == "" {
			t.Fatal("accepted an empty domain")
		}
		for _, r := range d.Rules() {
			if l, ok := r.Limit(); ok {
				if err := l.Validate(); err != nil {
					t.Fatalf("rule %q: %v", r.FullKey, err)
				}
			} else if !r.Unlimited {
				t.Fatalf("rule %q: no limit, yet not unlimited", r.FullKey)
			}
		}
		c, err := envoyconfig.New(d)
		if err != nil {
			t.Fatal(err)
		}
		var entries []envoyconfig.Entry
		for _, kv := range strings.Split(request, ",") {
			k, v, _ := strings.Cut(kv, "=")
			entries = append(entries, envoyconfig.Entry{Key: k, Value: v})
		}
		r, ok := c.Match(d.Name, entries)
		if !ok {
			return
		}
		if l, ok := r.Limit(); ok {
			if err := l.Validate(); err != nil {
				t.Fatalf("rule %q for %v: %v", r.FullKey, entries, err)
			}
		}
		if got := r.KeyEntries(entries); len(got) != len(entries) {
			t.Fatalf("KeyEntries: %d entries for %d", len(got), len(entries))
		}
	})
}
