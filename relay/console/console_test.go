package console_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/html"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/relay"
	"github.com/sluicehq/sluice/relay/console"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

func TestLogin(t *testing.T) {
	t.Parallel()
	r := newRelay(t, options("http://127.0.0.1:1"), false)
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	srv := serve(t, r, console.Options{Token: token, SessionLife: time.Hour, Now: clock})

	t.Run("no token is the login page", func(t *testing.T) {
		for _, path := range []string{"/", "/console/fragment", "/console/queues/jobs/dead"} {
			resp, body := get(t, srv, path, nil)
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `action="/console/login"`) || resp.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("GET %s: %d %q, want 401 and the login form", path, resp.StatusCode, body)
			}
			if strings.Contains(body, "data-field") {
				t.Errorf("GET %s without a token shows figures", path)
			}
		}
	})
	t.Run("a wrong token is 401", func(t *testing.T) {
		resp, body := get(t, srv, "/?token=not-the-token-at-all", nil)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "not the relay") || len(resp.Cookies()) != 0 {
			t.Errorf("wrong ?token=: %d, cookies %v", resp.StatusCode, resp.Cookies())
		}
		resp, _ = post(t, srv, "/console/login", url.Values{"token": {token + "x"}}, nil, sameSite(srv))
		if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
			t.Errorf("wrong login form: %d, cookies %v", resp.StatusCode, resp.Cookies())
		}
		for _, auth := range []string{"Bearer not-the-token-at-all", "Basic " + token, "Bearer " + token[:len(token)-1]} {
			req, _ := http.NewRequest("GET", srv.URL+"/", nil)
			req.Header.Set("Authorization", auth)
			resp, body := do(t, req)
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `"error"`) {
				t.Errorf("Authorization %q: %d %s, want the admin check's 401", auth, resp.StatusCode, body)
			}
		}
	})
	t.Run("?token= sets the cookie and leaves the URL", func(t *testing.T) {
		resp, _ := get(t, srv, "/?token="+token, nil)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
			t.Fatalf("status %d Location %q, want 303 to /", resp.StatusCode, resp.Header.Get("Location"))
		}
		set := resp.Header.Get("Set-Cookie")
		for _, want := range []string{"sluice_console=", "Path=/", "HttpOnly", "SameSite=Strict", "Max-Age=3600"} {
			if !strings.Contains(set, want) {
				t.Errorf("Set-Cookie %q lacks %s", set, want)
			}
		}
		if strings.Contains(set, token) {
			t.Errorf("the cookie holds the token: %q", set)
		}
		ck := resp.Cookies()[0]
		// The value is a session ID: 32 random bytes, base64url, a new
		// one each login.
		if raw, err := base64.RawURLEncoding.DecodeString(ck.Value); err != nil || len(raw) != 32 {
			t.Errorf("cookie value %q: %d bytes (%v), want 32 in base64url", ck.Value, len(raw), err)
		}
		if again := login(t, srv); again.Value == ck.Value {
			t.Errorf("two logins got the same session %q", ck.Value)
		}
		// A browser that logs in again gets a new session, and its old
		// one ends.
		resp, _ = get(t, srv, "/?token="+token, ck)
		if len(resp.Cookies()) != 1 || resp.Cookies()[0].Value == ck.Value {
			t.Fatalf("a second login of the same browser: cookies %v, want a new one", resp.Cookies())
		}
		if resp, _ := get(t, srv, "/", ck); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("the session before a new login: %d, want 401", resp.StatusCode)
		}
		ck = resp.Cookies()[0]
		if resp, body := get(t, srv, "/", ck); resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="queue-jobs"`) {
			t.Errorf("with the cookie: %d", resp.StatusCode)
		}
	})
	t.Run("the login form sets the cookie", func(t *testing.T) {
		resp, _ := post(t, srv, "/console/login", url.Values{"token": {token}}, nil, sameSite(srv))
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" || len(resp.Cookies()) != 1 {
			t.Fatalf("status %d Location %q cookies %v", resp.StatusCode, resp.Header.Get("Location"), resp.Cookies())
		}
		if resp, _ := get(t, srv, "/console/fragment", resp.Cookies()[0]); resp.StatusCode != http.StatusOK {
			t.Errorf("fragment with the cookie: %d", resp.StatusCode)
		}
	})
	t.Run("the bearer token opens the page", func(t *testing.T) {
		req, _ := http.NewRequest("GET", srv.URL+"/console/fragment", nil)
		req.Header.Set("Authorization", "bearer "+token)
		if resp, _ := do(t, req); resp.StatusCode != http.StatusOK {
			t.Errorf("bearer: %d", resp.StatusCode)
		}
	})
	t.Run("forged and expired cookies are refused", func(t *testing.T) {
		ck := login(t, srv)
		flipped := []byte(ck.Value)
		flipped[0] ^= 1 // 'A' ↔ 'B', '-' ↔ ',': another ID or none
		// The cookie an earlier console minted: an expiry and its HMAC
		// under the token.
		exp := fmt.Sprint(now.Add(100 * time.Hour).Unix())
		m := hmac.New(sha256.New, []byte(token))
		m.Write([]byte("sluice relay console session\x00" + exp))
		signed := exp + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
		forged := []string{
			"", "x", token, ck.Value + "x", ck.Value[1:], ck.Value + "=", string(flipped), signed,
			base64.RawURLEncoding.EncodeToString(make([]byte, 32)),
			base64.RawStdEncoding.EncodeToString(make([]byte, 32)),
		}
		for _, v := range forged {
			if resp, _ := get(t, srv, "/", &http.Cookie{Name: "sluice_console", Value: v}); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("cookie %q: %d, want 401", v, resp.StatusCode)
			}
		}
		mu.Lock()
		now = now.Add(time.Hour)
		mu.Unlock()
		if resp, _ := get(t, srv, "/", ck); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("an expired session: %d, want 401", resp.StatusCode)
		}
		// Another token's session is not this one's.
		other := serve(t, r, console.Options{Token: token + "-rotated", Now: clock})
		if resp, _ := get(t, other, "/", login(t, srv)); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("a session of the old token: %d, want 401", resp.StatusCode)
		}
	})
	t.Run("logout ends the session, wherever its cookie went", func(t *testing.T) {
		ck, other := login(t, srv), login(t, srv)
		resp, _ := post(t, srv, "/console/logout", nil, ck, sameSite(srv))
		if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 || resp.Cookies()[0].MaxAge >= 0 {
			t.Errorf("logout: %d %v", resp.StatusCode, resp.Cookies())
		}
		// The old cookie, replayed (by another web service of the same
		// host, which the browser sent it to, say): refused everywhere.
		for _, path := range []string{"/", "/console/fragment", "/console/queues/jobs/dead"} {
			if resp, body := get(t, srv, path, ck); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `action="/console/login"`) {
				t.Errorf("GET %s with the cookie after logout: %d, want 401 and the login form", path, resp.StatusCode)
			}
		}
		if resp, _ := post(t, srv, "/console/pause", url.Values{"queue": {"jobs"}}, ck, sameSite(srv)); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST /console/pause with the cookie after logout: %d, want 401", resp.StatusCode)
		}
		if s, _ := r.Stats(context.Background(), "jobs"); s.Paused {
			t.Error("a pause with an ended session paused")
		}
		// Another browser's session lives on.
		if resp, _ := get(t, srv, "/", other); resp.StatusCode != http.StatusOK {
			t.Errorf("another session after this one's logout: %d, want 200", resp.StatusCode)
		}
		// A second logout, and one without a session, are harmless.
		for _, c := range []*http.Cookie{ck, nil} {
			if resp, _ := post(t, srv, "/console/logout", nil, c, sameSite(srv)); resp.StatusCode != http.StatusSeeOther {
				t.Errorf("logout again (%v): %d, want 303", c, resp.StatusCode)
			}
		}
	})
}

// TestSessionsAreBounded: the console keeps MaxSessions sessions; a login
// beyond them ends the oldest.
func TestSessionsAreBounded(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	srv := serve(t, newRelay(t, options("http://127.0.0.1:1"), false), console.Options{Token: token, MaxSessions: 3, Now: clock})
	var cks []*http.Cookie
	for range 5 {
		cks = append(cks, login(t, srv))
		mu.Lock()
		now = now.Add(time.Minute)
		mu.Unlock()
	}
	for i, ck := range cks {
		want := http.StatusOK
		if i < 2 {
			want = http.StatusUnauthorized
		}
		if resp, _ := get(t, srv, "/console/fragment", ck); resp.StatusCode != want {
			t.Errorf("session %d of 5 (at most 3 kept): %d, want %d", i+1, resp.StatusCode, want)
		}
	}
	// After the default life of 8 hours every session has ended, and
	// new ones take their places.
	mu.Lock()
	now = now.Add(8 * time.Hour)
	mu.Unlock()
	for i, ck := range cks {
		if resp, _ := get(t, srv, "/console/fragment", ck); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("session %d after its 8 hours: %d, want 401", i+1, resp.StatusCode)
		}
	}
	fresh := []*http.Cookie{login(t, srv), login(t, srv), login(t, srv)}
	for i, ck := range fresh {
		if resp, _ := get(t, srv, "/console/fragment", ck); resp.StatusCode != http.StatusOK {
			t.Errorf("a new session %d among 3, the old ones expired: %d, want 200", i+1, resp.StatusCode)
		}
	}
}

func TestWithoutATokenTheConsoleIsOff(t *testing.T) {
	t.Parallel()
	srv := serve(t, newRelay(t, options("http://127.0.0.1:1"), false), console.Options{})
	for _, path := range []string{"/", "/?token=", "/console/fragment", "/console/static/console.css"} {
		if resp, body := get(t, srv, path, nil); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "no token") {
			t.Errorf("GET %s: %d %q, want 403", path, resp.StatusCode, body)
		}
	}
}

func TestRoutesAndHeaders(t *testing.T) {
	t.Parallel()
	srv := serve(t, newRelay(t, options("http://127.0.0.1:1"), false), console.Options{Token: token})
	ck := login(t, srv)
	cases := []struct {
		method, path string
		status       int
		contentType  string
	}{
		{"GET", "/", 200, "text/html; charset=utf-8"},
		{"GET", "/console/fragment", 200, "text/html; charset=utf-8"},
		{"GET", "/console/queues/jobs/dead", 200, "text/html; charset=utf-8"},
		{"GET", "/console/queues/nope/dead", 404, "text/html; charset=utf-8"},
		{"GET", "/console/static/console.css", 200, "text/css; charset=utf-8"},
		{"GET", "/console/static/console.js", 200, "text/javascript; charset=utf-8"},
		{"GET", "/console/static/nope.js", 404, ""},
		{"GET", "/console/static/", 404, ""},
		{"GET", "/index.html", 404, "text/html; charset=utf-8"},
		{"GET", "/console/", 404, "text/html; charset=utf-8"},
		{"GET", "/v1/queues", 404, "text/html; charset=utf-8"},
		{"GET", "/console/replay", 404, "text/html; charset=utf-8"},
		{"POST", "/console/static/console.js", 404, "text/html; charset=utf-8"},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		req.AddCookie(ck)
		resp, _ := do(t, req)
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.status)
		}
		if c.contentType != "" && resp.Header.Get("Content-Type") != c.contentType {
			t.Errorf("%s %s: Content-Type %q, want %q", c.method, c.path, resp.Header.Get("Content-Type"), c.contentType)
		}
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("%s %s: Content-Security-Policy %q", c.method, c.path, csp)
		}
		if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %s: headers %v", c.method, c.path, resp.Header)
		}
	}
	resp, body := get(t, srv, "/", ck)
	if resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("the page's Cache-Control %q, want no-store", resp.Header.Get("Cache-Control"))
	}
	// No inline script, style or handler: the policy allows none.
	if inline := regexp.MustCompile(`<script>|<style|\sstyle=|\son[a-z]+=`).FindString(body); inline != "" {
		t.Errorf("the page has inline %q", inline)
	}
}

// TestNumbersAreTheAPIs compares every figure of the page with the API's
// GET /v1/queues/{queue}, on a relay that does not deliver (so no figure
// moves between the two reads).
func TestNumbersAreTheAPIs(t *testing.T) {
	t.Parallel()
	r := newRelay(t, options("http://127.0.0.1:1"), false)
	later := time.Now().Add(time.Hour)
	enqueue(t, r, relay.Request{URL: "/a"}, relay.Request{URL: "/b"}, relay.Request{URL: "/c", Cost: 2},
		relay.Request{URL: "/d", NotBefore: later}, relay.Request{URL: "/e", NotBefore: later})
	if err := r.Pause("jobs"); err != nil {
		t.Fatal(err)
	}
	srv := serve(t, r, console.Options{Token: token})
	_, page := get(t, srv, "/", login(t, srv))
	got := pageFields(t, page, "queue-jobs")
	want := apiView(t, r, "jobs")
	for _, field := range []string{"depth", "ready", "scheduled", "in_flight", "dead", "effective_rate", "limit", "limit_source",
		"share", "throttled", "failed", "mean_wait_seconds", "eta_seconds", "paused"} {
		if _, ok := got[field]; !ok {
			t.Errorf("the page does not show %s", field)
		}
	}
	for field, value := range got {
		if string(want[field]) != value {
			t.Errorf("%s: page %s, API %s", field, value, want[field])
		}
	}
	if got["depth"] != "5" || got["scheduled"] != "2" || got["paused"] != "true" || got["limit"] != "50" {
		t.Errorf("figures %v: not the five tasks enqueued on a paused queue at 50/s", got)
	}
	if !strings.Contains(page, `id="target-api-limit" data-value="50"`) || !strings.Contains(page, "per-second 50 per 1s") {
		t.Errorf("the target's limit is not shown:\n%s", page)
	}
	// The ETA is written for people: 5 (cost 6) at 50/s.
	if want := fmt.Sprintf(`data-field="eta_seconds" data-value="%s">`, want["eta_seconds"]); !strings.Contains(page, want) {
		t.Errorf("no %s in the page", want)
	}
}

// TestReplayNeedsTheConsolesOrigin: a POST from another site changes
// nothing (403); the page's own replays, pauses and resumes work.
func TestReplayNeedsTheConsolesOrigin(t *testing.T) {
	t.Parallel()
	var gone goneUntil
	tg := newTarget(t, gone.ServeHTTP)
	r := newRelay(t, options(tg.URL), true)
	ids := enqueue(t, r, relay.Request{URL: "/x"})
	waitState(t, r, ids[0], queue.Dead, 10*time.Second)
	gone.set()
	srv := serve(t, r, console.Options{Token: token})
	ck := login(t, srv)
	form := url.Values{"id": {ids[0]}}

	for _, hdr := range []map[string]string{
		{"Origin": "https://evil.example"},
		{"Origin": "null"},
		{"Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "same-site", "Origin": "http://admin." + strings.TrimPrefix(srv.URL, "http://")},
		{"Referer": "https://evil.example/page"},
		{},                                  // none: not a browser of today, nor a program with the token
		{"Authorization": "Basic " + token}, // a browser sends Basic credentials it remembers
	} {
		for _, path := range []string{"/console/replay", "/console/replay-all", "/console/pause", "/console/login", "/console/logout"} {
			form := url.Values{"id": {ids[0]}, "queue": {"jobs"}, "token": {token}}
			resp, _ := post(t, srv, path, form, ck, hdr)
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("POST %s with %v: %d, want 403", path, hdr, resp.StatusCode)
			}
		}
	}
	if info, _ := r.Task(context.Background(), ids[0]); info.State != queue.Dead {
		t.Fatalf("a refused replay replayed: %s", info.State)
	}
	if s, _ := r.Stats(context.Background(), "jobs"); s.Paused {
		t.Fatal("a refused pause paused")
	}
	if resp, _ := get(t, srv, "/", ck); resp.StatusCode != http.StatusOK {
		t.Fatalf("after a refused logout the session is gone: %d", resp.StatusCode)
	}
	// Without the session, the page's origin is not enough.
	if resp, _ := post(t, srv, "/console/replay", form, nil, sameSite(srv)); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("replay without the session: %d, want 401", resp.StatusCode)
	}

	resp, _ := post(t, srv, "/console/replay", form, ck, sameSite(srv))
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/?") || !strings.HasSuffix(resp.Header.Get("Location"), "#queue-jobs") {
		t.Fatalf("replay: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	waitState(t, r, ids[0], queue.Succeeded, 10*time.Second)
	if _, page := get(t, srv, resp.Header.Get("Location"), ck); !strings.Contains(page, "Task "+ids[0]+" replayed") {
		t.Errorf("no notice of the replay")
	}
	// A replay of a task that is not dead is the relay's conflict.
	if resp, body := post(t, srv, "/console/replay", form, ck, sameSite(srv)); resp.StatusCode != http.StatusConflict || !strings.Contains(body, "not dead") {
		t.Errorf("a second replay: %d %q, want 409", resp.StatusCode, body)
	}
	// A browser without Origin or Sec-Fetch-Site but with the page's
	// Referer is let through, as is a missing form field refused.
	if resp, _ := post(t, srv, "/console/pause", url.Values{"queue": {"jobs"}}, ck, map[string]string{"Referer": srv.URL + "/"}); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("pause: %d", resp.StatusCode)
	}
	if s, _ := r.Stats(context.Background(), "jobs"); !s.Paused {
		t.Error("pause did not pause")
	}
	if _, page := get(t, srv, "/", ck); !strings.Contains(page, `data-action="resume"`) {
		t.Error("a paused queue has no resume button")
	}
	if resp, _ := post(t, srv, "/console/resume", url.Values{"queue": {"jobs"}}, ck, sameSite(srv)); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("resume: %d", resp.StatusCode)
	}
	if s, _ := r.Stats(context.Background(), "jobs"); s.Paused {
		t.Error("resume did not resume")
	}
	// A program sends the bearer token and no browser's header: let
	// through, and the token checked.
	for _, c := range []struct {
		path, auth string
		status     int
		paused     bool
	}{
		{"/console/pause", "Bearer " + token, http.StatusSeeOther, true},
		{"/console/resume", "Bearer " + token + "x", http.StatusUnauthorized, true},
		{"/console/resume", "bearer " + token, http.StatusSeeOther, false},
	} {
		resp, _ := post(t, srv, c.path, url.Values{"queue": {"jobs"}}, nil, map[string]string{"Authorization": c.auth})
		if resp.StatusCode != c.status {
			t.Errorf("POST %s with Authorization %q and no browser header: %d, want %d", c.path, c.auth, resp.StatusCode, c.status)
		}
		if s, _ := r.Stats(context.Background(), "jobs"); s.Paused != c.paused {
			t.Errorf("after POST %s with Authorization %q: paused %v, want %v", c.path, c.auth, s.Paused, c.paused)
		}
	}
	for path, form := range map[string]url.Values{"/console/replay": {}, "/console/pause": {"queue": {"nope"}}} {
		resp, _ := post(t, srv, path, form, ck, sameSite(srv))
		if want := map[string]int{"/console/replay": 400, "/console/pause": 404}[path]; resp.StatusCode != want {
			t.Errorf("POST %s %v: %d, want %d", path, form, resp.StatusCode, want)
		}
	}
}

// TestEscapesWhatClientsAndTargetsWrite: a dead letter's reason comes
// from the target's status line, its key and URL from the client.
func TestEscapesWhatClientsAndTargetsWrite(t *testing.T) {
	t.Parallel()
	const reason = `<script>alert("reason")</script>`
	tg := newTarget(t, func(w http.ResponseWriter, _ *http.Request) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 404 " + reason + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		_ = buf.Flush()
	})
	r := newRelay(t, options(tg.URL), true)
	const key = `"><img/src=x/onerror=alert(1)>`
	ids := enqueue(t, r, relay.Request{URL: `/x?q=<script>alert("url")</script>`, Key: key})
	info := waitState(t, r, ids[0], queue.Dead, 10*time.Second)
	if !strings.Contains(info.Outcome, reason) {
		t.Fatalf("outcome %q: the hostile reason did not survive the trip", info.Outcome)
	}
	srv := serve(t, r, console.Options{Token: token})
	ck := login(t, srv)
	for _, path := range []string{"/", "/console/fragment", "/console/queues/jobs/dead"} {
		_, page := get(t, srv, path, ck)
		for _, raw := range []string{reason, key, `<script>alert("url")`, "<img"} {
			if strings.Contains(page, raw) {
				t.Errorf("GET %s: the page holds %q unescaped", path, raw)
			}
		}
		if !strings.Contains(page, "&lt;script&gt;alert(&#34;reason&#34;)&lt;/script&gt;") {
			t.Errorf("GET %s: the escaped reason is not shown", path)
		}
		if countAttr(t, page, "data-replay") != 1 {
			t.Errorf("GET %s: %d replay buttons, want 1", path, countAttr(t, page, "data-replay"))
		}
	}
}

// TestDeadLettersAreBounded: the page shows 20 per queue and links to the
// rest; replay-all replays them all.
func TestDeadLettersAreBounded(t *testing.T) {
	t.Parallel()
	var gone goneUntil
	tg := newTarget(t, gone.ServeHTTP)
	r := newRelay(t, options(tg.URL), true)
	reqs := make([]relay.Request, 25)
	for i := range reqs {
		reqs[i] = relay.Request{URL: fmt.Sprintf("/item/%d", i)}
	}
	ids := enqueue(t, r, reqs...)
	for _, id := range ids {
		waitState(t, r, id, queue.Dead, 10*time.Second)
	}
	srv := serve(t, r, console.Options{Token: token})
	ck := login(t, srv)
	var page string
	for end := time.Now().Add(5 * time.Second); ; { // the backend's counts are up to a second old
		_, page = get(t, srv, "/", ck)
		if pageFields(t, page, "queue-jobs")["dead"] == "25" || time.Now().After(end) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := countAttr(t, page, "data-replay"); n != 20 {
		t.Errorf("%d dead letters on the page, want 20", n)
	}
	doc := byIDIn(t, page, "dead-jobs")
	more := ""
	for n := range doc.Descendants() {
		if class, _ := attr(n, "class"); class == "more" {
			more, _ = attr(n, "href")
		}
	}
	if !strings.HasPrefix(more, "/console/queues/jobs/dead?after=") {
		t.Fatalf("no link to more dead letters: %q", more)
	}
	_, rest := get(t, srv, more, ck)
	if n := countAttr(t, rest, "data-replay"); n != 5 {
		t.Errorf("%d dead letters on the second page, want 5", n)
	}
	var shown []string
	for _, p := range []string{page, rest} {
		for n := range byIDIn(t, p, "dead-jobs").Descendants() {
			if id, ok := attr(n, "data-replay"); ok {
				shown = append(shown, id)
			}
		}
	}
	slices.Sort(shown)
	want := slices.Clone(ids)
	slices.Sort(want)
	if !slices.Equal(shown, want) {
		t.Errorf("the two pages show %v, want %v", shown, want)
	}

	// The target is well again (so that no replayed task dies again
	// while ReplayAll is still listing them).
	gone.set()
	resp, _ := post(t, srv, "/console/replay-all", url.Values{"queue": {"jobs"}}, ck, sameSite(srv))
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("replay all: %d", resp.StatusCode)
	}
	for _, id := range ids {
		waitState(t, r, id, queue.Succeeded, 10*time.Second)
	}
	if _, page := get(t, srv, resp.Header.Get("Location"), ck); !strings.Contains(page, "25 dead letters of jobs replayed.") {
		t.Errorf("no notice of the 25 replayed (Location %q)", resp.Header.Get("Location"))
	}
}

func byIDIn(t *testing.T, page, id string) *html.Node {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	n := byID(doc, id)
	if n == nil {
		t.Fatalf("no #%s in the page", id)
	}
	return n
}
