package admin_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
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
		{"on, lower-case scheme", on, "bearer " + token, 401, badBody, admin.Challenge, true},
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

func TestReadToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) admin.Source {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return admin.Source{File: p}
	}
	for _, c := range []struct {
		name, content, want string
	}{
		{"exact", "sixteen-chars-ok", "sixteen-chars-ok"},
		{"trimmed", "  \tan-admin-token-of-some-length\r\n\n", "an-admin-token-of-some-length"},
	} {
		if got, err := admin.ReadToken(write(c.name, c.content)); err != nil || got != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
	for _, c := range []struct{ name, content string }{
		{"short", "fifteen-chars-x\n"},
		{"empty", ""},
		{"blank", " \n\t\n"},
		{"two words", "an-admin token-of-some-length\n"},
		{"two lines", "an-admin-token\nof-some-length\n"},
	} {
		src := write(c.name, c.content)
		_, err := admin.ReadToken(src)
		if !errors.Is(err, admin.ErrShortToken) || !strings.Contains(err.Error(), src.File) || !strings.Contains(err.Error(), "at least 16 characters") {
			t.Errorf("%s: %v; want ErrShortToken naming the file and the rule", c.name, err)
		}
		if err != nil && strings.TrimSpace(c.content) != "" && strings.Contains(err.Error(), strings.Fields(c.content)[0]) {
			t.Errorf("%s: %v: the error shows the secret", c.name, err)
		}
	}
	missing := admin.Source{File: filepath.Join(dir, "missing")}
	if _, err := admin.ReadToken(missing); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "admin token") {
		t.Errorf("a missing file: %v; want an admin token error wrapping os.ErrNotExist", err)
	}
	if got, err := admin.ReadToken(admin.Source{}); got != "" || err != nil {
		t.Errorf("the zero Source: %q, %v; want no token and no error", got, err)
	}
}
