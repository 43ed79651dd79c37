package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// headerUpstream is a real upstream that records the header of every
// request that reaches it, as lighttpd's CGI, FastCGI and SCGI name them
// (every byte that is not an ASCII letter or digit mapped to "_", letters
// upper-cased: HTTP_X_USER for X-User, X_User and X.User alike), which is
// also what a WSGI or nginx FastCGI upstream reads for a name with "-"
// and "_".
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
				env = append(env, "HTTP_"+cgiName(name)+"="+v)
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

// cgiName is lighttpd's CGI view of a header name.
func cgiName(name string) string {
	b := []byte(strings.ToUpper(name))
	for i, c := range b {
		if !('A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

// values is every value of the variable in env, in order: what a WSGI
// server joins with ", " into one.
func values(env []string, name string) []string {
	var vs []string
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, name+"="); ok {
			vs = append(vs, v)
		}
	}
	return vs
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
// underscore or another byte outside A-Za-z0-9- in its name (X_Tenant,
// X.Region: lighttpd reads both as dashes), drop removes it, reject
// refuses the request with 400 and counts it.
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
		code, body := rawRequest(t, g.Addr(), "GET", "/", "X_Tenant", "t1", "X.Region", "eu", "X-Other", "kept")
		if code != c.code {
			t.Errorf("%s: %d %q, want %d", c.action, code, body, c.code)
			continue
		}
		if c.code == 400 {
			if up.hits.Load() != before || !strings.Contains(body, `"error":"bad_request"`) || !strings.Contains(body, "underscore") {
				t.Errorf("%s: %q, and the upstream saw it: %v", c.action, body, up.hits.Load() != before)
			}
			if code, body := rawRequest(t, g.Addr(), "GET", "/", "X.Region", "eu"); code != 400 || up.hits.Load() != before {
				t.Errorf("%s, X.Region alone: %d %q, and the upstream saw it: %v", c.action, code, body, up.hits.Load() != before)
			}
			_, m := get(t, "http://"+g.AdminAddr()+"/metrics")
			if n := metricValue(t, m, `sluice_requests_refused_total{reason="header_underscore"}`); n != 2 {
				t.Errorf("%s: refusals counted %d, want 2", c.action, n)
			}
			continue
		}
		env := up.last()
		_, tenant := hasVar(env, "HTTP_X_TENANT")
		_, region := hasVar(env, "HTTP_X_REGION")
		other, _ := hasVar(env, "HTTP_X_OTHER")
		if tenant != c.passed || region != c.passed || other != "kept" {
			t.Errorf("%s: the upstream read %v", c.action, env)
		}
	}
}

// The forwarding headers the gateway writes itself (X-Forwarded-For,
// -Proto, -Host, Forwarded) reach the upstream only as the gateway wrote
// them: another spelling (X_Forwarded_For, X.Forwarded.Host, …), which a
// WSGI or CGI upstream merges with the gateway's into one
// HTTP_X_FORWARDED_FOR, is dropped from every peer, trusted or not, with
// headers_with_underscores at its default (allow). A trusted proxy's
// X-Forwarded-For is still kept, and an untrusted peer's is not.
func TestForwardingHeaderSpellingsAreDropped(t *testing.T) {
	t.Parallel()
	spoof := []string{
		"X_Forwarded_For", "6.6.6.6", "x_forwarded_for", "6.6.6.7", "X.Forwarded.For", "6.6.6.8",
		"X_Forwarded_Proto", "https", "X~Forwarded~Proto", "https",
		"X_Forwarded_Host", "evil.example", "X-Forwarded_Host", "evil.example",
		"Forwarded", "for=6.6.6.6;proto=https;host=evil.example",
	}
	for _, c := range []struct {
		trusted string
		header  []string
		wantFor string // HTTP_X_FORWARDED_FOR, all values joined as WSGI does
	}{
		{"", spoof, "127.0.0.1"},
		{"192.0.2.0/24", append([]string{"X-Forwarded-For", "6.6.6.9"}, spoof...), "127.0.0.1"},
		{"127.0.0.0/8", append([]string{"X-Forwarded-For", "203.0.113.7"}, spoof...), "203.0.113.7, 127.0.0.1"},
	} {
		up := newHeaderUpstream(t)
		g, _ := start(t, fmt.Sprintf(headerRules, c.trusted, "allow"), up.URL)
		if code, body := rawRequest(t, g.Addr(), "GET", "/", c.header...); code != 200 {
			t.Fatalf("trusting [%s]: %d %q", c.trusted, code, body)
		}
		env := up.last()
		for name, want := range map[string]string{
			"HTTP_X_FORWARDED_FOR":   c.wantFor,
			"HTTP_X_FORWARDED_PROTO": "http",
			"HTTP_X_FORWARDED_HOST":  "gateway.test",
			"HTTP_FORWARDED":         "",
		} {
			if got := strings.Join(values(env, name), ", "); got != want {
				t.Errorf("trusting [%s]: the upstream read %s=%q, want %q (all: %v)", c.trusted, name, got, want, env)
			}
		}
	}
}

// Every spelling of a key header that lighttpd (every byte not a letter
// or digit mapped to "_") or nginx's FastCGI ("-" to "_") reads as the
// same HTTP_X_USER is dropped from every peer, whatever its punctuation;
// only the canonical X-User of a trusted peer passes.
func TestPunctuationSpellingsOfAKeyHeaderAreDropped(t *testing.T) {
	t.Parallel()
	var header []string
	for _, p := range ".~!*+|'#$%&^`_" {
		header = append(header, "X"+string(p)+"User", "admin", "X"+string(p)+"Api"+string(p)+"Key", "someone-elses")
	}
	for _, c := range []struct {
		trusted  string
		extra    []string
		wantUser string
		wantKey  string
	}{
		{"192.0.2.0/24", nil, "", ""},
		{"192.0.2.0/24", []string{"X-User", "admin", "X-Api-Key", "mine"}, "", "mine"},
		{"127.0.0.0/8", []string{"X-User", "alice"}, "alice", ""},
	} {
		up := newHeaderUpstream(t)
		g, _ := start(t, fmt.Sprintf(headerRules, c.trusted, "allow"), up.URL)
		if code, body := rawRequest(t, g.Addr(), "GET", "/", append(c.extra, header...)...); code != 200 {
			t.Fatalf("trusting %s: %d %q", c.trusted, code, body)
		}
		env := up.last()
		user := strings.Join(values(env, "HTTP_X_USER"), ", ")
		key := strings.Join(values(env, "HTTP_X_API_KEY"), ", ")
		if user != c.wantUser || key != c.wantKey {
			t.Errorf("trusting %s, sending %v: the upstream read HTTP_X_USER %q, HTTP_X_API_KEY %q; want %q, %q (all: %v)",
				c.trusted, c.extra, user, key, c.wantUser, c.wantKey, env)
		}
	}
}

// The headers a proxy in front writes to say who the client is or what it
// asked for (X-Real-IP, X-Forwarded-Port and -Prefix, X-Original-URL…)
// reach the upstream only from a trusted peer: an upstream that believes
// X-Original-URL routes by it (a path no rule matched), and one that
// believes X-Real-IP logs and limits by it. Any other spelling is dropped
// from every peer.
func TestProxyHeadersOnlyFromTrustedPeers(t *testing.T) {
	t.Parallel()
	sent := []string{
		"X-Real-IP", "6.6.6.6", "X-Client-IP", "6.6.6.6", "True-Client-IP", "6.6.6.6",
		"X-Forwarded-Port", "8443", "X-Forwarded-Prefix", "/admin", "X-Forwarded-Server", "evil",
		"X-Original-URL", "/admin/x", "X-Rewrite-URL", "/admin/x", "X_Original_URL", "/admin/y",
	}
	names := []string{"HTTP_X_REAL_IP", "HTTP_X_CLIENT_IP", "HTTP_TRUE_CLIENT_IP", "HTTP_X_FORWARDED_PORT",
		"HTTP_X_FORWARDED_PREFIX", "HTTP_X_FORWARDED_SERVER", "HTTP_X_ORIGINAL_URL", "HTTP_X_REWRITE_URL"}
	for _, c := range []struct {
		trusted string
		want    map[string]string
	}{
		{"", map[string]string{}},
		{"192.0.2.0/24", map[string]string{}},
		{"127.0.0.0/8", map[string]string{"HTTP_X_REAL_IP": "6.6.6.6", "HTTP_X_CLIENT_IP": "6.6.6.6", "HTTP_TRUE_CLIENT_IP": "6.6.6.6",
			"HTTP_X_FORWARDED_PORT": "8443", "HTTP_X_FORWARDED_PREFIX": "/admin", "HTTP_X_FORWARDED_SERVER": "evil",
			"HTTP_X_ORIGINAL_URL": "/admin/x", "HTTP_X_REWRITE_URL": "/admin/x"}},
	} {
		up := newHeaderUpstream(t)
		g, _ := start(t, fmt.Sprintf(headerRules, c.trusted, "allow"), up.URL)
		if code, body := rawRequest(t, g.Addr(), "GET", "/", sent...); code != 200 {
			t.Fatalf("trusting [%s]: %d %q", c.trusted, code, body)
		}
		env := up.last()
		for _, name := range names {
			if got := strings.Join(values(env, name), ", "); got != c.want[name] {
				t.Errorf("trusting [%s]: the upstream read %s=%q, want %q", c.trusted, name, got, c.want[name])
			}
		}
	}
}
