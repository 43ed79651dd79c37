package config_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/gateway/config"
)

const requestRules = `
limits: [{name: a, quota: 1, window: 1s}]
rules: [{name: r, quotas: [{limit: a, key: principal, header: %s}]}]
`

// The request section: its defaults, and each refusal names the field and
// the values it takes.
func TestRequestSection(t *testing.T) {
	t.Parallel()
	f, err := config.Parse("t.yaml", []byte(strings.Replace(requestRules, "%s", "X-User", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if want := (config.Request{EscapedSlashes: "reject", PathParameters: "keep", HeadersWithUnderscores: "allow"}); f.Request != want {
		t.Errorf("defaults %+v, want %+v", f.Request, want)
	}
	for _, c := range []struct{ request, header, want string }{
		{"{escaped_slashes: keep}", "X-User", `t.yaml:1: request escaped_slashes "keep": reject or unescape`},
		{"{path_parameters: drop}", "X-User", `t.yaml:1: request path_parameters "drop": keep, strip or reject`},
		{"{headers_with_underscores: strip}", "X-User", `t.yaml:1: request headers_with_underscores "strip": allow, drop or reject`},
		{"{headers_with_underscores: drop}", "X_User", `t.yaml:3: rule "r": header "X_User" has a byte outside A-Za-z0-9- (an underscore or other punctuation), and request headers_with_underscores: drop would remove it from every request`},
		{"{headers_with_underscores: reject}", "X.User", `t.yaml:3: rule "r": header "X.User" has a byte outside A-Za-z0-9- (an underscore or other punctuation), and request headers_with_underscores: reject would refuse every request that has it`},
		{"{escaped_slash: reject}", "X-User", `t.yaml:1: unknown field "escaped_slash" (did you mean "escaped_slashes"?)`},
	} {
		_, err := config.Parse("t.yaml", []byte("request: "+c.request+strings.Replace(requestRules, "%s", c.header, 1)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("request: %s: %v, want %q", c.request, err, c.want)
		}
	}
	for _, ok := range []string{"{escaped_slashes: unescape, path_parameters: strip, headers_with_underscores: reject}", "{path_parameters: reject, headers_with_underscores: drop}"} {
		if _, err := config.Parse("t.yaml", []byte("request: "+ok+strings.Replace(requestRules, "%s", "X-User", 1))); err != nil {
			t.Errorf("request: %s: %v", ok, err)
		}
	}
}
