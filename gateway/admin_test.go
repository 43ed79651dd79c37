package gateway_test

import (
	"fmt"
	"testing"
)

const noToken = `
listen: 127.0.0.1:0
admin:
  listen: 127.0.0.1:0
limits:
  - {name: per-ip, quota: 2, window: 1m}
rules:
  - name: api
    match: {path: /api/}
    quotas:
      - {limit: per-ip, key: ip}
`

// The admin listener's answers without a token configured (403: off, and
// how to turn it on) and with one but a missing or wrong credential (401,
// WWW-Authenticate), both with a JSON body that says which — as sluice
// serve's. /healthz and /metrics need no token. ?n= is checked as serve's.
func TestAdminAuth(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, nil)
	off, _ := start(t, noToken, up.URL)
	on, _ := start(t, fmt.Sprintf(twoPerMinute, tokenFile(t)), up.URL)
	const (
		offBody  = `{"error":"admin endpoints are off: no admin token is configured (set admin.token_file)"}` + "\n"
		authBody = `{"error":"unauthorized: send Authorization: Bearer and the admin token"}` + "\n"
		nBody    = `{"error":"n \"0\": give ?n= once, a whole number from 1 to 1000 (tenants in each ranking; default 20)"}` + "\n"
	)
	for _, c := range []struct {
		admin, path, auth string
		code              int
		body, challenge   string
	}{
		{off.AdminAddr(), "/admin/tenants", "", 403, offBody, ""},
		{off.AdminAddr(), "/admin/tenants", "Bearer an-admin-token-of-some-length", 403, offBody, ""},
		{on.AdminAddr(), "/admin/tenants", "", 401, authBody, `Bearer realm="sluice admin"`},
		{on.AdminAddr(), "/admin/tenants", "Bearer wrong-token-of-some-length", 401, authBody, `Bearer realm="sluice admin"`},
		{on.AdminAddr(), "/admin/tenants?n=0", "Bearer an-admin-token-of-some-length", 400, nBody, ""},
		{off.AdminAddr(), "/healthz", "", 200, "ok\n", ""},
		{on.AdminAddr(), "/healthz", "", 200, "ok\n", ""},
	} {
		var header []string
		if c.auth != "" {
			header = []string{"Authorization", c.auth}
		}
		r, b := get(t, "http://"+c.admin+c.path, header...)
		if r.StatusCode != c.code || b != c.body || r.Header.Get("WWW-Authenticate") != c.challenge || (c.code != 200 && r.Header.Get("Content-Type") != "application/json") {
			t.Errorf("%s with %q: %d %q %v; want %d %q", c.path, c.auth, r.StatusCode, b, r.Header, c.code, c.body)
		}
	}
	for _, n := range []string{"1", "1000"} {
		if r, b := get(t, "http://"+on.AdminAddr()+"/admin/tenants?n="+n, "Authorization", "Bearer an-admin-token-of-some-length"); r.StatusCode != 200 {
			t.Errorf("?n=%s: %d %s", n, r.StatusCode, b)
		}
	}
}
