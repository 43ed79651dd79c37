package gateway

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/gateway/config"
)

// pathCases are escaped paths and their normal form under each policy
// ("" refused; its code in refused). reject: escaped_slashes reject,
// unescape: escaped_slashes unescape, strip and rejectParams: the
// path_parameters (with escaped_slashes reject).
var pathCases = []struct {
	raw                                   string
	reject, unescape, strip, rejectParams string
	refused                               string // the refusal's code under reject, when refused
}{
	{raw: "/", reject: "/", unescape: "/", strip: "/", rejectParams: "/"},
	{raw: "/api/items", reject: "/api/items", unescape: "/api/items", strip: "/api/items", rejectParams: "/api/items"},
	{raw: "/api/%2e%2e/x", reject: "/x", unescape: "/x", strip: "/x", rejectParams: "/x"},
	{raw: "/api/.%2e/x", reject: "/x", unescape: "/x", strip: "/x", rejectParams: "/x"},
	{raw: "/api/%2E%2E/x", reject: "/x", unescape: "/x", strip: "/x", rejectParams: "/x"},
	{raw: "/api/%2e/x", reject: "/api/x", unescape: "/api/x", strip: "/api/x", rejectParams: "/api/x"},
	{raw: "/api/x/..%2f..%2fadmin", unescape: "/admin", refused: "escaped_slash"},
	{raw: "/api%2fx", unescape: "/api/x", refused: "escaped_slash"},
	{raw: "/api%2Fx", unescape: "/api/x", refused: "escaped_slash"},
	{raw: "/api/x%5c..%5cy", unescape: "/api/y", refused: "escaped_slash"},
	{raw: `/x\..\api\y`, unescape: "/api/y", refused: "escaped_slash"},
	{raw: "//api/x", reject: "/api/x", unescape: "/api/x", strip: "/api/x", rejectParams: "/api/x"},
	{raw: "///api//x//", reject: "/api/x/", unescape: "/api/x/", strip: "/api/x/", rejectParams: "/api/x/"},
	{raw: "/x/../api/y", reject: "/api/y", unescape: "/api/y", strip: "/api/y", rejectParams: "/api/y"},
	{raw: "/../../api", reject: "/api", unescape: "/api", strip: "/api", rejectParams: "/api"},
	{raw: "/api/./x", reject: "/api/x", unescape: "/api/x", strip: "/api/x", rejectParams: "/api/x"},
	{raw: "/api/x/..", reject: "/api/", unescape: "/api/", strip: "/api/", rejectParams: "/api/"},
	{raw: "/api/x/.", reject: "/api/x/", unescape: "/api/x/", strip: "/api/x/", rejectParams: "/api/x/"},
	{raw: "/%61pi/x", reject: "/api/x", unescape: "/api/x", strip: "/api/x", rejectParams: "/api/x"},
	{raw: "/api/%7e%5F%2D", reject: "/api/~_-", unescape: "/api/~_-", strip: "/api/~_-", rejectParams: "/api/~_-"},
	{raw: "/api/caf%c3%a9", reject: "/api/caf%C3%A9", unescape: "/api/caf%C3%A9", strip: "/api/caf%C3%A9", rejectParams: "/api/caf%C3%A9"},
	{raw: "/api/a%20b%3F%23", reject: "/api/a%20b%3F%23", unescape: "/api/a%20b%3F%23", strip: "/api/a%20b%3F%23", rejectParams: "/api/a%20b%3F%23"},
	{raw: "/api/\"x\"<>", reject: "/api/%22x%22%3C%3E", unescape: "/api/%22x%22%3C%3E", strip: "/api/%22x%22%3C%3E", rejectParams: "/api/%22x%22%3C%3E"},
	{raw: "/api/!$&'()*+,=:@", reject: "/api/!$&'()*+,=:@", unescape: "/api/!$&'()*+,=:@", strip: "/api/!$&'()*+,=:@", rejectParams: "/api/!$&'()*+,=:@"},
	{raw: "/api;/x", reject: "/api;/x", unescape: "/api;/x", strip: "/api/x", refused: ""},
	{raw: "/api;jsessionid=1/x;v=2", reject: "/api;jsessionid=1/x;v=2", unescape: "/api;jsessionid=1/x;v=2", strip: "/api/x"},
	{raw: "/x/..;/api/y", strip: "/api/y", refused: "dot_parameter"},
	{raw: "/x/.;v=1/api/y", strip: "/x/api/y", refused: "dot_parameter"},
	{raw: "/x/%2e%2E;/api", strip: "/api", refused: "dot_parameter"},
	{raw: "/x/..a;/api", reject: "/x/..a;/api", unescape: "/x/..a;/api", strip: "/x/..a/api"},
	{raw: "/api%3b/x", reject: "/api%3B/x", unescape: "/api%3B/x", strip: "/api%3B/x", rejectParams: "/api%3B/x"},
	{raw: "/.well-known/x", reject: "/.well-known/x", unescape: "/.well-known/x", strip: "/.well-known/x", rejectParams: "/.well-known/x"},
	{raw: "/api/...", reject: "/api/...", unescape: "/api/...", strip: "/api/...", rejectParams: "/api/..."},
	{raw: "/api/%00", refused: "control_byte"},
	{raw: "/api/x\x01", refused: "control_byte"},
	{raw: "/api/%7f", refused: "control_byte"},
	{raw: "/api/%zz", refused: "bad_escape"},
	{raw: "/api/%2", refused: "bad_escape"},
	{raw: "api/x", refused: "path_form"},
	{raw: "", refused: "path_form"},
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	policies := []struct {
		name string
		p    pathPolicy
		want func(c int) string
	}{
		{"reject", pathPolicy{parameters: config.Keep}, func(c int) string { return pathCases[c].reject }},
		{"unescape", pathPolicy{unescapeSlashes: true, parameters: config.Keep}, func(c int) string { return pathCases[c].unescape }},
		{"strip", pathPolicy{parameters: config.Strip}, func(c int) string { return pathCases[c].strip }},
		{"reject parameters", pathPolicy{parameters: config.Reject}, func(c int) string { return pathCases[c].rejectParams }},
	}
	for _, pol := range policies {
		for i, c := range pathCases {
			want := pol.want(i)
			got, bad := pol.p.normalize(c.raw)
			switch {
			case want == "" && bad == nil:
				t.Errorf("%s: normalize(%q) = %q, want a refusal", pol.name, c.raw, got)
			case want != "" && (bad != nil || got != want):
				t.Errorf("%s: normalize(%q) = %q, %v; want %q", pol.name, c.raw, got, bad, want)
			case want == "" && pol.name == "reject" && c.refused != "" && bad.code != c.refused:
				t.Errorf("%s: normalize(%q) refused as %s, want %s", pol.name, c.raw, bad.code, c.refused)
			case want != "":
				if again, bad := pol.p.normalize(got); bad != nil || again != got {
					t.Errorf("%s: normalize(%q) = %q is not its own normal form: %q, %v", pol.name, c.raw, got, again, bad)
				}
				if pol.p.isNormal(c.raw) && got != c.raw {
					t.Errorf("%s: isNormal(%q), but its normal form is %q", pol.name, c.raw, got)
				}
			}
		}
	}
}

// The request's URL is what the proxy forwards: its Path (which the rules
// match) and its EscapedPath (which goes on the wire) are the normal form.
func TestNormalizeRequest(t *testing.T) {
	t.Parallel()
	p := pathPolicy{parameters: config.Keep}
	for _, c := range []struct{ method, target, path, escaped, refused string }{
		{"GET", "/api/%2e%2e/x%3F", "/x?", "/x%3F", ""},
		{"GET", "http://evil.example", "/", "/", ""},
		{"GET", "http://evil.example/api/%2e%2e/x", "/x", "/x", ""},
		{"GET", "/api/items?x=%2e%2e", "/api/items", "/api/items", ""},
		{"OPTIONS", "*", "", "", "asterisk_form"},
		{"CONNECT", "example.com:443", "", "", "connect"},
	} {
		u, err := url.ParseRequestURI(c.target)
		if c.method == "CONNECT" {
			u, err = &url.URL{Host: c.target}, nil
		}
		if err != nil {
			t.Fatal(err)
		}
		r := &http.Request{Method: c.method, URL: u, RequestURI: c.target, Header: http.Header{}}
		bad := p.normalizeRequest(r)
		if c.refused != "" {
			if bad == nil || bad.code != c.refused {
				t.Errorf("%s %s: refused %v, want %s", c.method, c.target, bad, c.refused)
			}
			continue
		}
		if bad != nil || r.URL.Path != c.path || r.URL.EscapedPath() != c.escaped {
			t.Errorf("%s %s: %v, Path %q, EscapedPath %q; want %q, %q", c.method, c.target, bad, r.URL.Path, r.URL.EscapedPath(), c.path, c.escaped)
		}
	}
}

// A path already in normal form is left as it is, without allocating
// (the gateway's hot path).
func TestNormalizeRequestAllocs(t *testing.T) {
	p := pathPolicy{parameters: config.Keep}
	r, _ := http.NewRequest("GET", "http://gateway.test/api/v1/orders/42", nil)
	if n := testing.AllocsPerRun(100, func() {
		if bad := p.normalizeRequest(r); bad != nil {
			t.Fatal(bad.reason)
		}
	}); n != 0 {
		t.Errorf("%v allocations per normal path, want 0", n)
	}
}

// A request whose header holds only canonical names is left as it is by
// the header policy, without allocating (the gateway's hot path), with
// key headers and the forwarding headers protected.
func TestHeaderPolicyAllocs(t *testing.T) {
	cfg, err := config.Parse("t.yaml", []byte(`
limits: [{name: l, quota: 1, window: 1m}]
rules:
  - {name: users, quotas: [{limit: l, key: principal, header: X-User}]}
  - {name: keys, quotas: [{limit: l, key: header, header: X-Api-Key}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	ip, err := clientip.New(clientip.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := newHeaderPolicy(cfg, ip)
	r, _ := http.NewRequest("GET", "http://gateway.test/api/v1/orders/42", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	for _, name := range []string{"Accept", "User-Agent", "X-Api-Key", "X-Forwarded-For", "Content-Type", "Accept-Encoding"} {
		r.Header.Set(name, "v")
	}
	if n := testing.AllocsPerRun(100, func() {
		if bad := h.apply(r); bad != nil {
			t.Fatal(bad.reason)
		}
	}); n != 0 {
		t.Errorf("%v allocations per request, want 0", n)
	}
	if len(r.Header) != 6 {
		t.Errorf("the policy dropped canonical headers: %v", r.Header)
	}
}
