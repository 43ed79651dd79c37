package envoyconfig_test

import (
	"fmt"

	"github.com/sluicehq/sluice/rls/envoyconfig"
)

// An envoyproxy/ratelimit file, unchanged: which rule a descriptor gets,
// and the sluice limit that enforces it.
func Example() {
	d, err := envoyconfig.Parse("messaging.yaml", []byte(`
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`))
	if err != nil {
		panic(err)
	}
	cfg, err := envoyconfig.New(d)
	if err != nil {
		panic(err)
	}
	for _, desc := range [][]envoyconfig.Entry{
		{{Key: "message_type", Value: "marketing"}, {Key: "to_number", Value: "2061111111"}},
		{{Key: "to_number", Value: "2061111111"}},
		{{Key: "message_type", Value: "receipt"}, {Key: "to_number", Value: "2061111111"}},
	} {
		rule, ok := cfg.Match("messaging", desc)
		if !ok {
			fmt.Printf("%v: no limit\n", desc)
			continue
		}
		limit, _ := rule.Limit()
		fmt.Printf("%v: %s, %d per %s: %v\n", desc, rule.FullKey, rule.RequestsPerUnit, rule.Unit, limit)
	}
	_, err = envoyconfig.Parse("bad.yaml", []byte("domain: messaging\ndescriptors:\n  - key: to_number\n    rate_limit:\n      unit: fortnight\n"))
	fmt.Println(err)
	// Output:
	// [{message_type marketing} {to_number 2061111111}]: messaging.message_type_marketing.to_number, 5 per DAY: messaging.message_type_marketing.to_number: fixed_window 5 per 24h0m0s
	// [{to_number 2061111111}]: messaging.to_number, 100 per DAY: messaging.to_number: fixed_window 100 per 24h0m0s
	// [{message_type receipt} {to_number 2061111111}]: no limit
	// bad.yaml:5: invalid rate limit unit 'fortnight'
}
