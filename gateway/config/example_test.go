package config_test

import (
	"fmt"

	"github.com/sluicehq/sluice/gateway/config"
)

// A file parsed, and one of its rules as the middleware receives it; then
// a misspelt field, refused with its line and the field meant.
func Example() {
	f, err := config.Parse("gateway.yaml", []byte(`
limits:
  - {name: per-ip, quota: 100, window: 1m, burst: 20}
rules:
  - name: api
    match: {methods: [GET, POST], path: /api/}
    quotas: [{limit: per-ip, key: ip}]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	r := f.HTTPRules()[0]
	l := r.Quotas[0].Limit
	fmt.Println(r.Name, r.Match.Methods, r.Match.Path, r.OnError)
	fmt.Println(l.Name, l.Algorithm, l.Quota, l.Window, l.Burst)

	_, err = config.Parse("typo.yaml", []byte("limits:\n  - name: per-ip\n    qouta: 100\n"))
	fmt.Println(err)
	// Output:
	// api [GET POST] /api/ fail_open
	// per-ip token_bucket 100 1m0s 20
	// typo.yaml:3: unknown field "qouta" (did you mean "quota"?)
}
