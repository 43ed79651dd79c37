package admin_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/internal/admin"
)

func TestHandler(t *testing.T) {
	t.Parallel()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "in\n") })
	const (
		token   = "an-admin-token-of-some-length"
		offBody = `{"error":"admin endpoints are off: no admin token is configured (set admin.token_file)"}` + "\n"
		defBody = `{"error":"admin endpoints are off: no admin token is configured (configure an admin token)"}` + "\n"
		badBody = `{"error":"unauthorized: send Authorization: Bearer and the admin token"}` + "\n"
	)
	off := admin.Handler(admin.Options{Enable: "set admin.token_file"}, ok)
	offDefault := admin.Handler(admin.Options{}, ok)
	on := admin.Handler(admin.Options{Token: token, Enable: "set admin.token_file"}, ok)
	for _, c := range []struct {
		name      string
		h         http.Handler
		auth      string
		code      int
		body      string
		challenge string
		json      bool
	}{
		{"off, no credential", off, "", 403, offBody, "", true},
		{"off, the token", off, "Bearer " + token, 403, offBody, "", true},
		{"off, default hint", offDefault, "", 403, defBody, "", true},
		{"on, no credential", on, "", 401, badBody, admin.Challenge, true},
		{"on, wrong token", on, "Bearer wrong-token-of-some-length", 401, badBody, admin.Challenge, true},
		{"on, a prefix of the token", on, "Bearer " + token[:20], 401, badBody, admin.Challenge, true},
		{"on, the token and more", on, "Bearer " + token + "x", 401, badBody, admin.Challenge, true},
		{"on, no Bearer scheme", on, token, 401, badBody, admin.Challenge, true},
		{"on, lower-case scheme (case-insensitive, RFC 9110)", on, "bearer " + token, 200, "in\n", "", false},
		{"on, upper-case scheme", on, "BEARER " + token, 200, "in\n", "", false},
		{"on, another scheme", on, "Basic " + token, 401, badBody, admin.Challenge, true},
		{"on, empty bearer", on, "Bearer ", 401, badBody, admin.Challenge, true},
		{"on, the token", on, "Bearer " + token, 200, "in\n", "", false},
	} {
		req := httptest.NewRequest("GET", "/admin/tenants", nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		rec := httptest.NewRecorder()
		c.h.ServeHTTP(rec, req)
		res := rec.Result()
		ct := res.Header.Get("Content-Type")
		if res.StatusCode != c.code || rec.Body.String() != c.body || res.Header.Get("WWW-Authenticate") != c.challenge ||
			res.Header.Get("Cache-Control") != "no-store" || (ct == "application/json") != c.json {
			t.Errorf("%s: %d %q %v; want %d %q", c.name, res.StatusCode, rec.Body.String(), res.Header, c.code, c.body)
		}
	}
}
