package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// headerUpstream is a real upstream that records the header of every
// request that reaches it, as a CGI or WSGI server would name them
// (HTTP_X_USER for both X-User and X_User).
type headerUpstream struct {
	*upstream
	mu   sync.Mutex
	seen [][]string
}

func newHeaderUpstream(t *testing.T) *headerUpstream {
	u := &headerUpstream{}
	u.upstream = newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		var env []string
		for name, vs := range r.Header {
			for _, v := range vs {
				env = append(env, "HTTP_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_"))+"="+v)
			}
		}
		u.mu.Lock()
		u.seen = append(u.seen, env)
		u.mu.Unlock()
	})
	return u
}

// last is the CGI environment of the last request that reached it.
func (u *headerUpstream) last() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.seen) == 0 {
		return nil
	}
	return u.seen[len(u.seen)-1]
}

func hasVar(env []string, name string) (string, bool) {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

const headerRules = `
listen: 127.0.0.1:0
admin: {listen: 127.0.0.1:0}
client_ip: {trusted_proxies: [%s]}
request: {headers_with_underscores: %s}
limits:
  - {name: per-user, quota: 100, window: 1m}
  - {name: per-key, quota: 100, window: 1m}
  - {name: per-ip, quota: 100, window: 1m}
rules:
  - name: users
    quotas: [{limit: per-user, key: principal, header: X-User}]
  - name: keys
    quotas: [{limit: per-key, key: header, header: X-Api-Key}]
  - name: anonymous
    quotas: [{limit: per-ip, key: ip}]
`

// No spelling of a key header that the rules did not read reaches the
// upstream: X_User (HTTP_X_USER to a WSGI upstream, as X-User is) is
// dropped from every peer, and X-User itself from an untrusted one.
func TestUnderscoreSpellingOfAKeyHeaderIsDropped(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		trusted  string
		header   [][2]string
		wantUser string // HTTP_X_USER the upstream sees; "" none
		wantKey  string // HTTP_X_API_KEY
	}{
		{"192.0.2.0/24", [][2]string{{"X_User", "admin"}}, "", ""},
		{"192.0.2.0/24", [][2]string{{"x_user", "admin"}, {"X-User", "admin"}}, "", ""},
		{"192.0.2.0/24", [][2]string{{"X_Api_Key", "someone-elses"}}, "", ""},
		{"192.0.2.0/24", [][2]string{{"X-Api-Key", "mine"}, {"X_API_KEY", "someone-elses"}}, "", "mine"},
		{"127.0.0.0/8", [][2]string{{"X-User", "alice"}, {"X_User", "admin"}}, "alice", ""},
		{"127.0.0.0/8", [][2]string{{"X_User", "admin"}}, "", ""},
	} {
		up := newHeaderUpstream(t)
		g, _ := start(t, fmt.Sprintf(headerRules, c.trusted, "allow"), up.URL)
		var header []string
		for _, h := range c.header {
			header = append(header, h[0], h[1])
		}
		if code, body := rawRequest(t, g.Addr(), "GET", "/", header...); code != 200 {
			t.Fatalf("%v: %d %q", c.header, code, body)
		}
		env := up.last()
		user, _ := hasVar(env, "HTTP_X_USER")
		key, _ := hasVar(env, "HTTP_X_API_KEY")
		if user != c.wantUser || key != c.wantKey {
			t.Errorf("trusting %s, sending %v: the upstream read HTTP_X_USER %q, HTTP_X_API_KEY %q; want %q, %q (all: %v)",
				c.trusted, c.header, user, key, c.wantUser, c.wantKey, env)
		}
	}
}

// request.headers_with_underscores: allow passes any other header with an
// underscore, drop removes it, reject refuses the request with 400 and
// counts it.
func TestHeadersWithUnderscores(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		action string
		code   int
		passed bool
	}{
		{"allow", 200, true},
		{"drop", 200, false},
		{"reject", 400, false},
	} {
		up := newHeaderUpstream(t)
		g, _ := start(t, fmt.Sprintf(headerRules, "192.0.2.0/24", c.action), up.URL)
		before := up.hits.Load()
		code, body := rawRequest(t, g.Addr(), "GET", "/", "X_Tenant", "t1", "X-Other", "kept")
		if code != c.code {
			t.Errorf("%s: %d %q, want %d", c.action, code, body, c.code)
			continue
		}
		if c.code == 400 {
			if up.hits.Load() != before || !strings.Contains(body, `"error":"bad_request"`) || !strings.Contains(body, "underscore") {
				t.Errorf("%s: %q, and the upstream saw it: %v", c.action, body, up.hits.Load() != before)
			}
			_, m := get(t, "http://"+g.AdminAddr()+"/metrics")
			if n := metricValue(t, m, `sluice_requests_refused_total{reason="header_underscore"}`); n != 1 {
				t.Errorf("%s: refusals counted %d, want 1", c.action, n)
			}
			continue
		}
		env := up.last()
		_, tenant := hasVar(env, "HTTP_X_TENANT")
		other, _ := hasVar(env, "HTTP_X_OTHER")
		if tenant != c.passed || other != "kept" {
			t.Errorf("%s: the upstream read %v", c.action, env)
		}
	}
}
