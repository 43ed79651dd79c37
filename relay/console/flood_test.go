package console_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/relay/console"
)

// TestFloodsAreLoggedOnceAMinute: an unauthenticated client that sends
// wrong tokens, or POSTs from another site, as fast as it can gets one
// log line a minute with the count, never a line each; a wrong token's
// answer waits a little, without holding other requests.
func TestFloodsAreLoggedOnceAMinute(t *testing.T) {
	t.Parallel()
	r := newRelay(t, options("http://127.0.0.1:1"), false)
	synctest.Test(t, func(t *testing.T) {
		var logged logLines
		h := console.New(r, console.Options{Token: token, Logger: slog.New(&logged)})
		serve := func(req *http.Request) int {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			return rec.Code
		}
		sameOrigin := map[string]string{"Sec-Fetch-Site": "same-origin"}
		wrong := func(i int) { // by ?token= and by the form, in turn
			req := httptest.NewRequest("GET", fmt.Sprintf("/?token=guess-%d", i), nil)
			if i%2 == 1 {
				req = formRequest("/console/login", url.Values{"token": {fmt.Sprintf("guess-%d", i)}}, sameOrigin)
			}
			if code := serve(req); code != http.StatusUnauthorized {
				t.Errorf("wrong token %d: %d, want 401", i, code)
			}
		}
		start := time.Now()

		// 300 wrong tokens at once: each answer waits, none for another.
		var wg sync.WaitGroup
		for i := range 300 {
			wg.Go(func() { wrong(i) })
		}
		synctest.Wait() // the 300 are waiting
		if code := serve(formRequest("/console/login", url.Values{"token": {token}}, sameOrigin)); code != http.StatusSeeOther {
			t.Errorf("the right token among the wrong ones: %d, want 303", code)
		}
		if code := serve(httptest.NewRequest("GET", "/console/static/console.css", nil)); code != http.StatusOK {
			t.Errorf("the style sheet among the wrong tokens: %d, want 200", code)
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("the right token and the style sheet were answered after %v, want at once", waited)
		}
		wg.Wait()
		if waited := time.Since(start); waited <= 0 || waited >= time.Second {
			t.Errorf("300 wrong tokens at once were answered after %v, want a little while, side by side", waited)
		}
		synctest.Wait()
		if got := logged.all(); len(got) != 0 {
			t.Fatalf("within the minute the console logged %d lines, want none yet; the first: %v", len(got), got[:min(3, len(got))])
		}
		time.Sleep(time.Until(start.Add(time.Minute)))
		synctest.Wait()
		if got := logged.all(); len(got) != 1 || got[0].msg != "relay console: 300 failed logins in the last minute" || got[0].count != 300 {
			t.Fatalf("after a minute the console logged %v, want one line of 300 failed logins", got)
		}

		// Then for five minutes a wrong token every 5 s and a login from
		// another site every 10 s.
		next := time.Now()
		for i := range 60 {
			wrong(i)
			if i%2 == 0 {
				if code := serve(formRequest("/console/login", url.Values{"token": {token}}, map[string]string{"Origin": "https://evil.example"})); code != http.StatusForbidden {
					t.Errorf("a login from another site: %d, want 403", code)
				}
			}
			next = next.Add(5 * time.Second)
			time.Sleep(time.Until(next))
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()

		lines := logged.all()
		sums := map[string]int{}
		lastAt := map[string]time.Time{}
		for _, l := range lines {
			what, ok := "", false
			for _, w := range []string{"failed logins", "cross-origin POSTs refused"} {
				if l.msg == fmt.Sprintf("relay console: %d %s in the last minute", l.count, w) {
					what, ok = w, true
				}
			}
			if !ok {
				t.Errorf("an unexpected line %q (count %d)", l.msg, l.count)
				continue
			}
			sums[what] += l.count
			if prev, ok := lastAt[what]; ok && l.at.Sub(prev) < time.Minute {
				t.Errorf("%q came %v after the line before of its kind, want a minute at least", l.msg, l.at.Sub(prev))
			}
			lastAt[what] = l.at
		}
		if sums["failed logins"] != 360 || sums["cross-origin POSTs refused"] != 30 {
			t.Errorf("the lines count %v, want 360 failed logins and 30 refused POSTs: %v", sums, lines)
		}
		// 7 minutes: the first flood's line, then at most 6 of each kind.
		if len(lines) > 1+6+6 {
			t.Errorf("%d lines for two floods of five minutes, want at most one a minute of each: %v", len(lines), lines)
		}
	})
}

// formRequest is a POST of form to path with the headers hdr, for a
// handler called directly.
func formRequest(path string, form url.Values, hdr map[string]string) *http.Request {
	req := httptest.NewRequestWithContext(context.Background(), "POST", path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return req
}

// logLine is one line a logLines logger received.
type logLine struct {
	at    time.Time
	msg   string
	count int // the attribute "count", 0 when absent
}

func (l logLine) String() string {
	return fmt.Sprintf("%s %q count=%d", l.at.Format(time.TimeOnly), l.msg, l.count)
}

// logLines is a slog.Handler that keeps every line; it is safe for
// concurrent use.
type logLines struct {
	mu    sync.Mutex
	lines []logLine
}

func (h *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (h *logLines) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logLines) WithGroup(string) slog.Handler            { return h }

func (h *logLines) Handle(_ context.Context, r slog.Record) error {
	l := logLine{at: r.Time, msg: r.Message}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "count" {
			l.count = int(a.Value.Int64())
		}
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, l)
	return nil
}

func (h *logLines) all() []logLine {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]logLine(nil), h.lines...)
}
