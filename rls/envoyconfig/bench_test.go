package envoyconfig_test

import (
	"testing"

	"github.com/sluicehq/sluice/rls/envoyconfig"
)

// BenchmarkMatch: a two-level match on their basic_config.yaml, a value-less
// key (the configured rule, shared) and a wildcard with share_threshold
// (a rule adjusted for the request).
func BenchmarkMatch(b *testing.B) {
	for _, bc := range []struct {
		name, file string
		entries    []envoyconfig.Entry
	}{
		{"nested", "tests/basic_config.yaml", es("key1=value1", "subkey1=something")},
		{"share_threshold", "tests/share_threshold.yaml", es("files=files/a.pdf")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := envoyconfig.LoadFiles("testdata/" + bc.file)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, ok := c.Match("test-domain", bc.entries); !ok {
						b.Fatal("no rule")
					}
				}
			})
		})
	}
}
