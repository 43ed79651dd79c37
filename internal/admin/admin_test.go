package admin_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

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

// A refusal does not wait for the body: a client without the token that
// announces a body and sends none gets its 401 at once, and the connection
// is closed (it cannot hold a slot for the read timeout).
func TestRefusalDoesNotWaitForTheBody(t *testing.T) {
	srv := httptest.NewServer(admin.Handler(admin.Options{Token: "a-token-of-sixteen-chars"}, http.NotFoundHandler()))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "POST /admin/x HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer while the body is missing: %v", err)
	}
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
		t.Fatalf("status %d, close %v: want 401 and the connection closed", resp.StatusCode, resp.Close)
	}
}
