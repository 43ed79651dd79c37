package pace

import (
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// backoffBound is min(maxDelay, base·2^(n−1)), computed without overflow.
func backoffBound(base, maxDelay time.Duration, n int) time.Duration {
	if f := float64(base) * math.Exp2(float64(n-1)); f < float64(maxDelay) {
		return time.Duration(f)
	}
	return maxDelay
}

// TestBackoffFullJitter: retry n waits in [0, min(MaxDelay, BaseDelay·2^(n−1))].
func TestBackoffFullJitter(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		// Every valid RetryOptions: 0 < BaseDelay ≤ MaxDelay, up to the
		// largest Duration.
		base := time.Duration(rapid.Int64Range(1, math.MaxInt64).Draw(t, "base"))
		maxDelay := time.Duration(rapid.Int64Range(int64(base), math.MaxInt64).Draw(t, "maxDelay"))
		n := rapid.IntRange(1, 200).Draw(t, "n")
		bound := backoffBound(base, maxDelay, n)
		if d := backoff(base, maxDelay, n); d < 0 || d > bound {
			t.Fatalf("backoff(%v, %v, %d) = %v, want in [0, %v]", base, maxDelay, n, d, bound)
		}
	})
}

// TestBackoffSpread: the waits cover their whole range (full jitter, not a
// fixed or shrunk wait), however large the shift.
func TestBackoffSpread(t *testing.T) {
	t.Parallel()
	tests := []struct {
		base, maxDelay time.Duration
		n              int
	}{
		{100 * time.Millisecond, 20 * time.Second, 1},
		{100 * time.Millisecond, 20 * time.Second, 3},
		{100 * time.Millisecond, 20 * time.Second, 9},  // capped
		{100 * time.Millisecond, 20 * time.Second, 63}, // the shift leaves int64
		{time.Second, time.Second, 1000},
		// base·2^24 overflows int64 and wraps to 2^24 ns (16.8 ms): the
		// wait must still be up to maxDelay.
		{1<<40 + 1, time.Hour, 25},
		{3, 1 << 62, 62},
		{math.MaxInt64, math.MaxInt64, 1}, // the largest valid options
		{1, math.MaxInt64, 100},
	}
	for _, tc := range tests {
		bound := backoffBound(tc.base, tc.maxDelay, tc.n)
		lo, hi := bound, time.Duration(0)
		for range 1000 {
			d := backoff(tc.base, tc.maxDelay, tc.n)
			lo, hi = min(lo, d), max(hi, d)
		}
		// The chance that 1000 uniform draws all miss the lowest or
		// highest tenth is 2 × 0.9^1000, about 1e−46.
		if lo > bound/10 || hi < bound-bound/10 || hi > bound {
			t.Errorf("backoff(%v, %v, %d): 1000 draws in [%v, %v], want spread over [0, %v]", tc.base, tc.maxDelay, tc.n, lo, hi, bound)
		}
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	withRA := func(code int, ra string) *http.Response {
		return &http.Response{StatusCode: code, Header: http.Header{"Retry-After": {ra}}}
	}
	tests := []struct {
		name string
		resp *http.Response
		err  error
		want kind
	}{
		{"200", &http.Response{StatusCode: 200}, nil, succeeded},
		{"304", &http.Response{StatusCode: 304}, nil, succeeded},
		{"404", &http.Response{StatusCode: 404}, nil, succeeded},
		{"429", &http.Response{StatusCode: 429}, nil, throttled},
		{"429 with Retry-After", withRA(429, "3"), nil, throttled},
		{"500", &http.Response{StatusCode: 500}, nil, failed},
		{"500 with Retry-After", withRA(500, "3"), nil, failed},
		{"501", &http.Response{StatusCode: 501}, nil, succeeded},
		{"502", &http.Response{StatusCode: 502}, nil, failed},
		{"503", &http.Response{StatusCode: 503}, nil, failed},
		{"503 with Retry-After", withRA(503, "3"), nil, throttled},
		{"503 with an empty Retry-After", withRA(503, ""), nil, failed},
		{"504", &http.Response{StatusCode: 504}, nil, failed},
		{"505", &http.Response{StatusCode: 505}, nil, succeeded},
		{"round-trip error", nil, errors.New("connection reset"), failed},
	}
	for _, tc := range tests {
		if got := classify(tc.resp, tc.err); got != tc.want {
			t.Errorf("%s: classify = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRetryAfterField(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const maxWait = 10 * time.Minute
	tests := []struct {
		name   string
		values []string
		wait   time.Duration
		capped bool
		ok     bool
	}{
		{"absent", nil, 0, false, false},
		{"delta-seconds", []string{"5"}, 5 * time.Second, false, true},
		{"leading zeros and spaces", []string{" 007 "}, 7 * time.Second, false, true},
		{"IMF-fixdate", []string{now.Add(7 * time.Second).Format(http.TimeFormat)}, 7 * time.Second, false, true},
		{"RFC 850 date", []string{"Sunday, 01-Mar-26 12:00:09 GMT"}, 9 * time.Second, false, true},
		{"asctime date", []string{"Sun Mar  1 12:00:11 2026"}, 11 * time.Second, false, true},
		{"the maximum", []string{"600"}, maxWait, false, true},
		{"just above the maximum", []string{"601"}, maxWait, true, true},
		{"1e9 seconds", []string{"1000000000"}, maxWait, true, true},
		{"beyond int64", []string{"99999999999999999999999999"}, maxWait, true, true},
		{"a date next year", []string{now.AddDate(1, 0, 0).Format(http.TimeFormat)}, maxWait, true, true},
		{"zero", []string{"0"}, 0, false, false},
		{"now", []string{now.Format(http.TimeFormat)}, 0, false, false},
		{"past date", []string{now.Add(-time.Hour).Format(http.TimeFormat)}, 0, false, false},
		{"empty", []string{""}, 0, false, false},
		{"word", []string{"soon"}, 0, false, false},
		{"negative", []string{"-1"}, 0, false, false},
		{"fraction", []string{"1.5"}, 0, false, false},
		{"signed", []string{"+5"}, 0, false, false},
		{"two values", []string{"5", "7"}, 0, false, false},
	}
	for _, tc := range tests {
		h := http.Header{}
		for _, v := range tc.values {
			h.Add("Retry-After", v)
		}
		wait, capped, ok := retryAfter(h, now, maxWait)
		if wait != tc.wait || capped != tc.capped || ok != tc.ok {
			t.Errorf("%s: retryAfter = (%v, %v, %v), want (%v, %v, %v)", tc.name, wait, capped, ok, tc.wait, tc.capped, tc.ok)
		}
	}
}

func TestIdempotent(t *testing.T) {
	t.Parallel()
	rewindable := func(method string) *http.Request {
		r, _ := http.NewRequest(method, "http://x.test/", http.NoBody)
		return r
	}
	tests := []struct {
		name string
		req  func() *http.Request
		want bool
	}{
		{"GET", func() *http.Request { return rewindable("GET") }, true},
		{"empty method", func() *http.Request { r := rewindable("GET"); r.Method = ""; return r }, true},
		{"HEAD", func() *http.Request { return rewindable("HEAD") }, true},
		{"OPTIONS", func() *http.Request { return rewindable("OPTIONS") }, true},
		{"PUT", func() *http.Request { return rewindable("PUT") }, true},
		{"DELETE", func() *http.Request { return rewindable("DELETE") }, true},
		{"POST", func() *http.Request { return rewindable("POST") }, false},
		{"PATCH", func() *http.Request { return rewindable("PATCH") }, false},
		{"CONNECT", func() *http.Request { return rewindable("CONNECT") }, false},
		{"POST with a key", func() *http.Request { r := rewindable("POST"); r.Header.Set("Idempotency-Key", "k"); return r }, true},
		{"POST with an empty key", func() *http.Request { r := rewindable("POST"); r.Header.Set("Idempotency-Key", ""); return r }, false},
		{"PUT with a rewindable body", func() *http.Request {
			r, _ := http.NewRequest("PUT", "http://x.test/", strings.NewReader("body"))
			return r
		}, true},
		{"PUT with a body that cannot be rewound", func() *http.Request {
			r := rewindable("PUT")
			r.Body, r.GetBody = nopBody{}, nil
			return r
		}, false},
		{"POST with a key and a body that cannot be rewound", func() *http.Request {
			r := rewindable("POST")
			r.Header.Set("Idempotency-Key", "k")
			r.Body, r.GetBody = nopBody{}, nil
			return r
		}, false},
	}
	for _, tc := range tests {
		if got := idempotent(tc.req(), "Idempotency-Key"); got != tc.want {
			t.Errorf("%s: idempotent = %v, want %v", tc.name, got, tc.want)
		}
	}
}

type nopBody struct{}

func (nopBody) Read([]byte) (int, error) { return 0, nil }
func (nopBody) Close() error             { return nil }

// TestBudget plays a budget of 10 % plus 0.1 retry per second (one per ten
// seconds) along a timeline.
func TestBudget(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	b := newBudget(0.1, 0.1)
	for range 100 {
		b.request(t0)
	}
	steps := []struct {
		at   time.Duration
		want bool
	}{
		// 100 requests: 10 % of them plus the floor of 1.
		{0, true}, {0, true}, {0, true}, {0, true}, {0, true}, {0, true},
		{0, true}, {0, true}, {0, true}, {0, true}, {0, true},
		{0, false},
		{9 * time.Second, false}, // the first second still counts
		// Ten seconds on, its requests and retries are forgotten: only the
		// floor is left.
		{10 * time.Second, true},
		{10 * time.Second, false},
		{30 * time.Second, true},
		{30*time.Second + 999*time.Millisecond, false},
	}
	for i, s := range steps {
		if got := b.retry(t0.Add(s.at)); got != s.want {
			t.Fatalf("step %d at %v: retry = %v, want %v", i, s.at, got, s.want)
		}
	}
}

// TestRetryOptionsDefaults: the zero RetryOptions is the documented defaults.
func TestRetryOptionsDefaults(t *testing.T) {
	t.Parallel()
	got, err := RetryOptions{IdempotencyKey: "x-request-id"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	want := RetryOptions{
		MaxAttempts: DefaultMaxAttempts, BaseDelay: DefaultBaseDelay, MaxDelay: DefaultMaxDelay,
		Deadline: DefaultDeadline, MaxRetryAfter: DefaultMaxRetryAfter, Budget: DefaultBudget,
		MinRetries: DefaultMinRetries, IdempotencyKey: "X-Request-Id",
	}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
