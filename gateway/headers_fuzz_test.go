package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/gateway/config"
)

// FuzzHeaderSpellings: whatever header names a request holds (any name
// net/http accepts), after the header policy no name reaches the upstream
// that lighttpd's CGI mapping (letters upper-cased, every other byte not
// a digit "_") makes the same as a protected name (the key headers and
// the forwarding headers) unless it is that name's canonical spelling;
// and with headers_with_underscores: drop, no name with a byte outside
// A-Za-z0-9- is left.
func FuzzHeaderSpellings(f *testing.F) {
	for _, s := range []string{"X_User", "X.Forwarded.For", "x-api-key", "X~Forwarded~Host", "FORWARDED", "X-User", "Accept"} {
		f.Add(s, s, false)
	}
	cfg, err := config.Parse("t.yaml", []byte(`
limits: [{name: l, quota: 1, window: 1m}]
rules:
  - {name: users, quotas: [{limit: l, key: principal, header: X-User}]}
  - {name: keys, quotas: [{limit: l, key: header, header: X-Api-Key}]}
`))
	if err != nil {
		f.Fatal(err)
	}
	ip, err := clientip.New(clientip.Options{})
	if err != nil {
		f.Fatal(err)
	}
	allow := newHeaderPolicy(cfg, ip)
	drop := allow
	drop.underscores = config.Drop
	protected := []string{"X-User", "X-Api-Key", "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Forwarded"}
	cgi := func(s string) string {
		return strings.Map(func(c rune) rune {
			switch {
			case 'a' <= c && c <= 'z':
				return c - 'a' + 'A'
			case 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
				return c
			}
			return '_'
		}, s)
	}
	f.Fuzz(func(t *testing.T, a, b string, dropping bool) {
		r, _ := http.NewRequest("GET", "http://gateway.test/", nil)
		r.RemoteAddr = "192.0.2.1:1234" // not trusted
		for _, name := range []string{a, b} {
			if name == "" || strings.ContainsFunc(name, func(c rune) bool { return c <= ' ' || c >= 0x7f || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", c) }) {
				continue // not a token: net/http refuses the request
			}
			r.Header[http.CanonicalHeaderKey(name)] = []string{"v"}
		}
		h := allow
		if dropping {
			h = drop
		}
		if bad := h.apply(r); bad != nil {
			t.Fatalf("refused %v: %s", r.Header, bad.reason)
		}
		for name := range r.Header {
			for _, p := range protected {
				if cgi(name) == cgi(p) && name != p {
					t.Errorf("%q reached the upstream, which reads it as %s", name, p)
				}
			}
			if name == "X-User" {
				t.Errorf("X-User from an untrusted peer reached the upstream")
			}
			if dropping && strings.ContainsFunc(name, func(c rune) bool { return c != '-' && cgi(string(c)) == "_" }) {
				t.Errorf("%q reached the upstream with headers_with_underscores: drop", name)
			}
		}
	})
}
