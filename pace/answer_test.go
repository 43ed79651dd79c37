package pace_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pace"
)

func TestReadAnswer(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	header := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
	cases := []struct {
		name                string
		status              int
		h                   http.Header
		err                 error
		throttled, failed   bool
		retryAfter          time.Duration
		capped, hold, limit bool
	}{
		{name: "200", status: 200},
		{name: "404", status: 404},
		{name: "429 bare", status: 429, throttled: true},
		{name: "429 retry-after", status: 429, h: header("Retry-After", "3"), throttled: true, retryAfter: 3 * time.Second, hold: true},
		{name: "429 capped", status: 429, h: header("Retry-After", "3600"), throttled: true, retryAfter: time.Minute, capped: true, hold: true},
		{name: "503 retry-after", status: 503, h: header("Retry-After", "2"), throttled: true, retryAfter: 2 * time.Second, hold: true},
		{name: "503 bare", status: 503, failed: true},
		{name: "500", status: 500, failed: true},
		{name: "501", status: 501},
		{name: "round trip error", err: errors.New("reset"), failed: true},
		{name: "policy", status: 200, h: header("RateLimit-Policy", `"d";q=50;w=1`), limit: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var resp *http.Response
			if c.err == nil {
				resp = &http.Response{StatusCode: c.status, Header: c.h}
				if resp.Header == nil {
					resp.Header = http.Header{}
				}
			}
			a := pace.ReadAnswer(resp, c.err, now.Add(-time.Second), now, time.Minute)
			if a.Throttled != c.throttled || a.Failed != c.failed || a.RetryAfter != c.retryAfter || a.Capped != c.capped {
				t.Fatalf("got throttled %v failed %v retry-after %v capped %v; want %v %v %v %v",
					a.Throttled, a.Failed, a.RetryAfter, a.Capped, c.throttled, c.failed, c.retryAfter, c.capped)
			}
			if a.Feedback.Throttled != c.throttled {
				t.Fatalf("feedback throttled %v, want %v", a.Feedback.Throttled, c.throttled)
			}
			if got := !a.Feedback.Hold.IsZero(); got != c.hold {
				t.Fatalf("hold %v, want %v", a.Feedback.Hold, c.hold)
			}
			if c.hold && !a.Feedback.Hold.Equal(now.Add(c.retryAfter)) {
				t.Fatalf("hold at %v, want %v", a.Feedback.Hold, now.Add(c.retryAfter))
			}
			if got := len(a.Feedback.Policies) > 0; got != c.limit {
				t.Fatalf("policies %v, want some: %v", a.Feedback.Policies, c.limit)
			}
		})
	}
}

func TestBackoffBounds(t *testing.T) {
	for n := 1; n <= 70; n++ {
		for range 50 {
			d := pace.Backoff(100*time.Millisecond, 5*time.Second, n)
			limit := 5 * time.Second
			if n <= 6 {
				limit = min(limit, 100*time.Millisecond<<(n-1))
			}
			if d < 0 || d > limit {
				t.Fatalf("retry %d: %v outside [0, %v]", n, d, limit)
			}
		}
	}
}
