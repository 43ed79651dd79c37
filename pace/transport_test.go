package pace_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/pace"
)

// TestMain checks that no test of package pace_test leaves a goroutine
// behind: synctest bubbles cannot, so this watches the tests on the real
// network.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// A reply is one answer of a scriptedTarget.
type reply struct {
	status int
	header map[string]string
}

// arrival is one try as a scriptedTarget saw it.
type arrival struct {
	at     time.Duration // since the target was created
	method string
	path   string
	key    string // the Idempotency-Key header
	body   string
}

// scriptedTarget answers its n-th try with replies[n], and every try after the
// last reply with the last reply; it records every try it sees.
type scriptedTarget struct {
	start time.Time

	mu       sync.Mutex
	replies  []reply
	arrivals []arrival
}

func newScriptedTarget(replies ...reply) *scriptedTarget {
	return &scriptedTarget{start: time.Now(), replies: replies}
}

func (s *scriptedTarget) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.arrivals)
	s.arrivals = append(s.arrivals, arrival{
		at:     time.Since(s.start),
		method: r.Method,
		path:   r.URL.Path,
		key:    r.Header.Get("Idempotency-Key"),
		body:   string(body),
	})
	rep := s.replies[min(n, len(s.replies)-1)]
	s.mu.Unlock()
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(rep.status)
	_, _ = io.WriteString(w, "answer "+strconv.Itoa(n))
}

// then makes every try from now on answered with r.
func (s *scriptedTarget) then(r reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replies = append(s.replies[:0:0], r)
}

// seen returns the tries so far.
func (s *scriptedTarget) seen() []arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]arrival(nil), s.arrivals...)
}

// times is n replies r.
func times(n int, r reply) []reply {
	rs := make([]reply, n)
	for i := range rs {
		rs[i] = r
	}
	return rs
}

var (
	ok200  = reply{status: http.StatusOK}
	err500 = reply{status: http.StatusInternalServerError}
)

// bodyInProcess is a RoundTripper that serves requests with a handler in the
// caller's goroutine, as inProcess does, but hands the handler the request
// body (read to the end and closed, as a real transport does) so that the
// target sees what was sent.
type bodyInProcess struct{ h http.Handler }

func (p bodyInProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		body, err = io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
	}
	in := req.Clone(req.Context())
	in.Body = io.NopCloser(bytes.NewReader(body))
	rec := httptest.NewRecorder()
	p.h.ServeHTTP(rec, in)
	return rec.Result(), nil
}

// newTestTransport is a Transport to h, served in process. Without a Pacer
// of o's own, it gets one that starts unlimited (Adaptive.Initial +Inf):
// these tests are about the Transport's retries, holds and breaker, and the
// slow start of a Pacer told nothing (tested on its own) would space their
// tries.
func newTestTransport(t *testing.T, h http.Handler, o pace.TransportOptions) *pace.Transport {
	t.Helper()
	o.Base = bodyInProcess{h}
	if o.Pacer == nil {
		p, err := pace.New(pace.Options{Adaptive: pace.AdaptiveOptions{Initial: math.Inf(1)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		o.Pacer = p
	}
	tr, err := pace.NewTransport(o)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// roundTrip sends req through rt and returns the status (0 on error) and the
// error; it reads and closes the answer's body.
func roundTrip(rt http.RoundTripper, req *http.Request) (int, error) {
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

func get(t *testing.T, ctx context.Context) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://target.test/api", nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// never is a breaker that does not open in these tests.
var never = pace.BreakerOptions{Failures: 1 << 30}

func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	const jitter = pace.DefaultBaseDelay // the spread added to a Retry-After wait
	s := time.Second
	tests := []struct {
		name          string
		status        int
		retryAfter    string // "date+7s" and "date-10s": an HTTP-date from now
		maxRetryAfter time.Duration
		// The retry must reach the target in [from, to] after the first try.
		from, to time.Duration
		hold     time.Duration // the Pacer's hold after the first try; 0: none
		capped   uint64
	}{
		{name: "delta-seconds", status: 429, retryAfter: "5", from: 5 * s, to: 5*s + jitter, hold: 5 * s},
		{name: "HTTP-date", status: 429, retryAfter: "date+7s", from: 7 * s, to: 7*s + jitter, hold: 7 * s},
		{name: "503 delta-seconds", status: 503, retryAfter: "2", from: 2 * s, to: 2*s + jitter, hold: 2 * s},
		// A Retry-After that cannot be used leaves the first backoff:
		// [0, BaseDelay·2⁰].
		{name: "past date", status: 429, retryAfter: "date-10s", to: pace.DefaultBaseDelay},
		{name: "now", status: 429, retryAfter: "0", to: pace.DefaultBaseDelay},
		{name: "garbage word", status: 429, retryAfter: "soon", to: pace.DefaultBaseDelay},
		{name: "negative", status: 429, retryAfter: "-1", to: pace.DefaultBaseDelay},
		{name: "fraction", status: 429, retryAfter: "1.5", to: pace.DefaultBaseDelay},
		{name: "empty", status: 429, retryAfter: "", to: pace.DefaultBaseDelay},
		{
			name: "1e9 seconds, MaxRetryAfter 3s", status: 429, retryAfter: "1000000000", maxRetryAfter: 3 * s,
			from: 3 * s, to: 3*s + jitter, hold: 3 * s, capped: 1,
		},
		{
			name: "1e9 seconds, default MaxRetryAfter", status: 429, retryAfter: "1000000000",
			from: pace.DefaultMaxRetryAfter, to: pace.DefaultMaxRetryAfter + jitter, hold: pace.DefaultMaxRetryAfter, capped: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				t0 := time.Now()
				ra := tc.retryAfter
				switch ra {
				case "date+7s":
					ra = t0.Add(7 * s).UTC().Format(http.TimeFormat)
				case "date-10s":
					ra = t0.Add(-10 * s).UTC().Format(http.TimeFormat)
				}
				tg := newScriptedTarget(reply{status: tc.status, header: map[string]string{"Retry-After": ra}}, ok200)
				// MaxAttempts 1: the retry happens only because a
				// throttled answer spends no attempt.
				tr := newTestTransport(t, tg, pace.TransportOptions{Retry: pace.RetryOptions{MaxAttempts: 1, MaxRetryAfter: tc.maxRetryAfter}})
				status, err := roundTrip(tr, get(t, t.Context()))
				if err != nil || status != http.StatusOK {
					t.Fatalf("got (%d, %v), want 200", status, err)
				}
				seen := tg.seen()
				if len(seen) != 2 || seen[0].at != 0 {
					t.Fatalf("tries at %v, want 2, the first at 0", seen)
				}
				if at := seen[1].at; at < tc.from || at > tc.to {
					t.Errorf("retry at %v, want in [%v, %v]", at, tc.from, tc.to)
				}
				st := tr.Stats()
				if st.RetryAfterCapped != tc.capped {
					t.Errorf("RetryAfterCapped %d, want %d", st.RetryAfterCapped, tc.capped)
				}
				if st.Throttled != 1 || st.Failures != 0 || st.Retries != 1 {
					t.Errorf("Throttled %d, Failures %d, Retries %d, want 1, 0, 1", st.Throttled, st.Failures, st.Retries)
				}
				var wantHold time.Time
				if tc.hold > 0 {
					wantHold = t0.Add(tc.hold)
				}
				if !st.Pacer.HoldUntil.Equal(wantHold) {
					t.Errorf("Pacer held until %v, want %v", st.Pacer.HoldUntil.Sub(t0), tc.hold)
				}
			})
		})
	}
}

// TestRetryAfterHoldsEveryRequest shows that Retry-After holds the Pacer, not
// just the request that got it: a second request, sent while the first
// waits, reaches the target no earlier than the stated instant.
func TestRetryAfterHoldsEveryRequest(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		a, b, _ := aThenB(t, pace.HoldTarget)
		const s = time.Second
		if len(a) != 2 || len(b) != 1 || a[0] != 0 {
			t.Fatalf("tries of /a at %v and of /b at %v, want /a at 0 then after 5 s, /b once", a, b)
		}
		// /b was queued behind the hold: it goes at the stated instant.
		if b[0] != 5*s {
			t.Errorf("/b reached the target at %v, want at 5s", b[0])
		}
		// /a waits its own jitter on top (under BaseDelay), and the
		// adaptive rate the 429 started may space it after /b.
		if a[1] < 5*s || a[1] > 5*s+500*time.Millisecond {
			t.Errorf("/a retried at %v, want in [5s, 5.5s]", a[1])
		}
	})
}

// TestHoldRequestHoldsOnlyTheThrottled: with HoldRequest, the second request
// is not held by the first one's Retry-After; the first still waits it out.
func TestHoldRequestHoldsOnlyTheThrottled(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		a, b, tr := aThenB(t, pace.HoldRequest)
		const s = time.Second
		if len(a) != 2 || len(b) != 1 || b[0] != s || a[1] < 5*s || a[1] > 5*s+pace.DefaultBaseDelay {
			t.Errorf("/a at %v, /b at %v; want /b at 1s (not held), /a again in [5s, 5.1s]", a, b)
		}
		if h := tr.Stats().Pacer.HoldUntil; !h.IsZero() {
			t.Errorf("the pacer is held until %v", h)
		}
	})
}

// aThenB sends /a, which a target answers 429 with Retry-After 5 then 200,
// and a second later /b, through one Transport whose Retry-After holds as
// holds says, and returns when each reached the target.
func aThenB(t *testing.T, holds pace.HoldScope) (a, b []time.Duration, tr *pace.Transport) {
	t.Helper()
	tg := newScriptedTarget(reply{status: 429, header: map[string]string{"Retry-After": "5"}}, ok200)
	tr = newTestTransport(t, tg, pace.TransportOptions{Retry: pace.RetryOptions{Holds: holds}})
	var wg sync.WaitGroup
	for _, path := range []string{"/a", "/b"} {
		wg.Go(func() {
			if path == "/b" {
				time.Sleep(time.Second) // while /a waits out its Retry-After
			}
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://target.test"+path, nil)
			if status, err := roundTrip(tr, req); err != nil || status != 200 {
				t.Errorf("%s: got (%d, %v), want 200", path, status, err)
			}
		})
	}
	wg.Wait()
	for _, x := range tg.seen() {
		if x.path == "/a" {
			a = append(a, x.at)
		} else {
			b = append(b, x.at)
		}
	}
	return a, b, tr
}

// TestThrottledSpendsNoAttempt: throttled answers (429, 503 with Retry-After)
// are retried whatever MaxAttempts says; failures (5xx, 503 without
// Retry-After) spend one attempt each.
func TestThrottledSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	throttle429 := reply{status: 429, header: map[string]string{"Retry-After": "1"}}
	throttle503 := reply{status: 503, header: map[string]string{"Retry-After": "1"}}
	tests := []struct {
		name          string
		replies       []reply
		maxAttempts   int
		status, tries int
		throttled     uint64
		failures      uint64
	}{
		{"429 five times", append(times(5, throttle429), ok200), 2, 200, 6, 5, 0},
		{"503 with Retry-After five times", append(times(5, throttle503), ok200), 2, 200, 6, 5, 0},
		{"500 five times", append(times(5, err500), ok200), 2, 500, 2, 0, 2},
		{"503 without Retry-After five times", append(times(5, reply{status: 503}), ok200), 2, 503, 2, 0, 2},
		{"503 without Retry-After, one attempt", []reply{{status: 503}, ok200}, 1, 503, 1, 0, 1},
		{"503 with an unreadable Retry-After is a failure", append(times(5, reply{status: 503, header: map[string]string{"Retry-After": "soon"}}), ok200), 2, 503, 2, 0, 2},
		{"503 with a past Retry-After is a failure", append(times(5, reply{status: 503, header: map[string]string{"Retry-After": "0"}}), ok200), 2, 503, 2, 0, 2},
		{"throttled then failed", []reply{throttle429, throttle429, err500, throttle429, err500, ok200}, 2, 500, 5, 3, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				tg := newScriptedTarget(tc.replies...)
				tr := newTestTransport(t, tg, pace.TransportOptions{Retry: pace.RetryOptions{MaxAttempts: tc.maxAttempts}})
				status, err := roundTrip(tr, get(t, t.Context()))
				if err != nil || status != tc.status {
					t.Fatalf("got (%d, %v), want %d", status, err, tc.status)
				}
				seen := tg.seen()
				if len(seen) != tc.tries {
					t.Errorf("%d tries, want %d", len(seen), tc.tries)
				}
				// A throttled try waits its Retry-After (the floor) before
				// the next one.
				for i := 1; i < len(seen); i++ {
					if h := tc.replies[i-1].header; h != nil && h["Retry-After"] == "1" && seen[i].at-seen[i-1].at < time.Second {
						t.Errorf("try %d came %v after a Retry-After of 1 s", i, seen[i].at-seen[i-1].at)
					}
				}
				st := tr.Stats()
				if st.Throttled != tc.throttled || st.Failures != tc.failures {
					t.Errorf("Throttled %d, Failures %d, want %d, %d", st.Throttled, st.Failures, tc.throttled, tc.failures)
				}
			})
		})
	}
}

// TestRetryDeadline: a target that always fails is retried until the next
// try would start after Deadline, and not after.
func TestRetryDeadline(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const (
			deadline = time.Second
			maxDelay = 200 * time.Millisecond
		)
		tg := newScriptedTarget(err500)
		tr := newTestTransport(t, tg, pace.TransportOptions{
			Retry: pace.RetryOptions{
				MaxAttempts: 1000, BaseDelay: 100 * time.Millisecond, MaxDelay: maxDelay, Deadline: deadline,
			},
			Breaker: never,
		})
		t0 := time.Now()
		status, err := roundTrip(tr, get(t, t.Context()))
		elapsed := time.Since(t0)
		if err != nil || status != 500 {
			t.Fatalf("got (%d, %v), want the last 500", status, err)
		}
		seen := tg.seen()
		// Each wait is at most maxDelay: it gives up only when the last
		// try came less than maxDelay before the deadline, so at least
		// deadline/maxDelay tries.
		if len(seen) < int(deadline/maxDelay) {
			t.Errorf("%d tries, want at least %d", len(seen), deadline/maxDelay)
		}
		last := seen[len(seen)-1].at
		if last > deadline {
			t.Errorf("last try at %v, after the deadline %v", last, deadline)
		}
		if last <= deadline-maxDelay {
			t.Errorf("last try at %v: the next, at most %v later, would still have started before the deadline %v", last, maxDelay, deadline)
		}
		if elapsed != last {
			t.Errorf("returned at %v, want at the last try %v (no wait for a try that will not happen)", elapsed, last)
		}
		if st := tr.Stats(); st.GaveUp != 1 || st.Tries != uint64(len(seen)) {
			t.Errorf("GaveUp %d, Tries %d, want 1, %d", st.GaveUp, st.Tries, len(seen))
		}
	})
}

// TestRetryStopsWithTheContext: the request's own context ends the retries
// at once, with its error.
func TestRetryStopsWithTheContext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		replies []reply
		end     func(context.Context) (context.Context, context.CancelFunc)
		at      time.Duration
		want    error
	}{
		{
			name:    "timeout while backing off",
			replies: []reply{err500},
			end: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(ctx, 500*time.Millisecond)
			},
			at: 500 * time.Millisecond, want: context.DeadlineExceeded,
		},
		{
			name:    "cancel during a Retry-After",
			replies: []reply{{status: 429, header: map[string]string{"Retry-After": "60"}}, ok200},
			end: func(ctx context.Context) (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(ctx)
				time.AfterFunc(2*time.Second, cancel)
				return ctx, cancel
			},
			at: 2 * time.Second, want: context.Canceled,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				tg := newScriptedTarget(tc.replies...)
				tr := newTestTransport(t, tg, pace.TransportOptions{
					Retry:   pace.RetryOptions{MaxAttempts: 1000, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond},
					Breaker: never,
				})
				ctx, cancel := tc.end(t.Context())
				defer cancel()
				t0 := time.Now()
				_, err := roundTrip(tr, get(t, ctx))
				if !errors.Is(err, tc.want) {
					t.Errorf("error %v, want %v", err, tc.want)
				}
				if got := time.Since(t0); got != tc.at {
					t.Errorf("returned at %v, want %v", got, tc.at)
				}
			})
		})
	}
}

// TestRetryBudget: when the target fails everything, retries stay within
// Budget × requests + MinRetries × 10 s.
func TestRetryBudget(t *testing.T) {
	t.Parallel()
	const requests = 100
	tests := []struct {
		name   string
		budget float64
		// The bound, Budget × 100 + 0.1/s × 10 s; every retry asked of a
		// full window is granted up to it, so it is exact.
		retries uint64
	}{
		{"budget 10 %", 0.1, 11},
		{"budget 100 % (control)", 1, 101},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				tg := newScriptedTarget(err500)
				tr := newTestTransport(t, tg, pace.TransportOptions{
					Retry:   pace.RetryOptions{MaxAttempts: 4, Budget: tc.budget, MinRetries: 0.1},
					Breaker: never,
				})
				var wg sync.WaitGroup
				for range requests {
					wg.Go(func() {
						if status, err := roundTrip(tr, get(t, t.Context())); err != nil || status != 500 {
							t.Errorf("got (%d, %v), want the last 500", status, err)
						}
					})
				}
				wg.Wait()
				st := tr.Stats()
				if st.Retries != tc.retries {
					t.Errorf("%d retries of %d requests, want %d", st.Retries, requests, tc.retries)
				}
				if got := uint64(len(tg.seen())); got != requests+tc.retries {
					t.Errorf("target saw %d tries, want %d", got, requests+tc.retries)
				}
				// Without the budget, each request would retry 3 times.
				if st.BudgetSpent == 0 || st.BudgetSpent > requests {
					t.Errorf("BudgetSpent %d, want in [1, %d]", st.BudgetSpent, requests)
				}
			})
		})
	}
}

// closeCounter is a request body that counts its Close calls.
type closeCounter struct {
	io.Reader
	closed atomic.Int32
}

func (c *closeCounter) Close() error {
	c.closed.Add(1)
	return nil
}

// TestIdempotency: a request is retried only when sending it twice is safe.
func TestIdempotency(t *testing.T) {
	t.Parallel()
	const payload = `{"record": 7}`
	tests := []struct {
		name    string
		method  string
		body    func() io.Reader
		header  map[string]string
		keyName string // RetryOptions.IdempotencyKey
		first   reply
		tries   int
	}{
		{name: "GET", method: "GET", first: err500, tries: 2},
		{name: "PUT with a rewindable body", method: "PUT", body: func() io.Reader { return strings.NewReader(payload) }, first: err500, tries: 2},
		{name: "DELETE", method: "DELETE", first: err500, tries: 2},
		{name: "POST without a key", method: "POST", body: func() io.Reader { return bytes.NewReader([]byte(payload)) }, first: err500, tries: 1},
		{name: "POST without a key, throttled", method: "POST", body: func() io.Reader { return bytes.NewReader([]byte(payload)) }, first: reply{status: 429, header: map[string]string{"Retry-After": "1"}}, tries: 1},
		{name: "PATCH without a key", method: "PATCH", body: func() io.Reader { return bytes.NewReader([]byte(payload)) }, first: err500, tries: 1},
		{
			name: "POST with a key", method: "POST", body: func() io.Reader { return bytes.NewReader([]byte(payload)) },
			header: map[string]string{"Idempotency-Key": "k-123"}, first: err500, tries: 2,
		},
		{
			name: "POST with a key, throttled", method: "POST", body: func() io.Reader { return bytes.NewReader([]byte(payload)) },
			header: map[string]string{"Idempotency-Key": "k-123"}, first: reply{status: 429, header: map[string]string{"Retry-After": "1"}}, tries: 2,
		},
		{
			name: "POST with a key of another name", method: "POST", body: func() io.Reader { return bytes.NewReader([]byte(payload)) },
			header: map[string]string{"X-Request-Id": "k-123"}, keyName: "x-request-id", first: err500, tries: 2,
		},
		{
			name: "POST with the default key when another is configured", method: "POST", body: func() io.Reader { return bytes.NewReader([]byte(payload)) },
			header: map[string]string{"Idempotency-Key": "k-123"}, keyName: "X-Request-Id", first: err500, tries: 1,
		},
		{
			name: "PUT whose body cannot be rewound", method: "PUT", body: func() io.Reader { return io.NopCloser(strings.NewReader(payload)) },
			first: err500, tries: 1,
		},
		{
			name: "POST with a key whose body cannot be rewound", method: "POST", body: func() io.Reader { return io.NopCloser(strings.NewReader(payload)) },
			header: map[string]string{"Idempotency-Key": "k-123"}, first: err500, tries: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				tg := newScriptedTarget(tc.first, ok200)
				tr := newTestTransport(t, tg, pace.TransportOptions{Retry: pace.RetryOptions{IdempotencyKey: tc.keyName}})
				var body io.Reader
				want := ""
				if tc.body != nil {
					body, want = tc.body(), payload
				}
				req, err := http.NewRequestWithContext(t.Context(), tc.method, "http://target.test/records", body)
				if err != nil {
					t.Fatal(err)
				}
				for k, v := range tc.header {
					req.Header.Set(k, v)
				}
				wantStatus := tc.first.status
				if tc.tries == 2 {
					wantStatus = 200
				}
				if status, err := roundTrip(tr, req); err != nil || status != wantStatus {
					t.Fatalf("got (%d, %v), want %d", status, err, wantStatus)
				}
				seen := tg.seen()
				if len(seen) != tc.tries {
					t.Fatalf("%d tries, want %d", len(seen), tc.tries)
				}
				for i, a := range seen {
					if a.method != tc.method || a.body != want || a.key != tc.header["Idempotency-Key"] {
						t.Errorf("try %d: %s, key %q, body %q; want %s, key %q, body %q",
							i, a.method, a.key, a.body, tc.method, tc.header["Idempotency-Key"], want)
					}
				}
			})
		})
	}
}

// TestBreakerThroughTransport: a target that fails opens the breaker; while
// it is open, requests fail with ErrOpen without reaching the target; after
// OpenFor a probe goes through; when the target recovers, it closes.
func TestBreakerThroughTransport(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tg := newScriptedTarget(err500)
		tr := newTestTransport(t, tg, pace.TransportOptions{
			Retry:   pace.RetryOptions{MaxAttempts: 1},
			Breaker: pace.BreakerOptions{Failures: 3, OpenFor: 5 * time.Second},
		})
		client := &http.Client{Transport: tr}
		t0 := time.Now()
		// do sends a GET at `at` and checks what comes back.
		do := func(at time.Duration, wantStatus int, wantOpen bool, wantTries int, wantState pace.BreakerState) {
			t.Helper()
			time.Sleep(time.Until(t0.Add(at)))
			resp, err := client.Get("http://target.test/api")
			switch {
			case wantOpen:
				if !errors.Is(err, pace.ErrOpen) {
					t.Errorf("at %v: error %v, want one wrapping ErrOpen", at, err)
				}
			case err != nil:
				t.Errorf("at %v: %v", at, err)
			default:
				if resp.StatusCode != wantStatus {
					t.Errorf("at %v: status %d, want %d", at, resp.StatusCode, wantStatus)
				}
			}
			if err == nil {
				_ = resp.Body.Close()
			}
			if got := len(tg.seen()); got != wantTries {
				t.Errorf("at %v: the target saw %d tries, want %d", at, got, wantTries)
			}
			if got := tr.Stats().Breaker.State; got != wantState {
				t.Errorf("at %v: breaker %v, want %v", at, got, wantState)
			}
		}
		s := time.Second
		do(0, 500, false, 1, pace.BreakerClosed)
		do(0, 500, false, 2, pace.BreakerClosed)
		do(0, 500, false, 3, pace.BreakerOpen)
		do(0, 0, true, 3, pace.BreakerOpen)
		do(5*s-time.Millisecond, 0, true, 3, pace.BreakerOpen)
		do(5*s, 500, false, 4, pace.BreakerOpen) // the probe fails: open again
		do(5*s, 0, true, 4, pace.BreakerOpen)
		tg.then(ok200)
		do(10*s-time.Millisecond, 0, true, 4, pace.BreakerOpen)
		do(10*s, 200, false, 5, pace.BreakerClosed) // the probe succeeds
		do(10*s, 200, false, 6, pace.BreakerClosed)
		st := tr.Stats().Breaker
		if st.Opens != 2 || st.Rejected != 4 {
			t.Errorf("breaker opened %d times and rejected %d, want 2 and 4", st.Opens, st.Rejected)
		}
	})
}

// TestBreakerIgnoresThrottling: 429s are the target answering, not failing:
// more of them than Failures do not open the breaker.
func TestBreakerIgnoresThrottling(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tg := newScriptedTarget(append(times(6, reply{status: 429, header: map[string]string{"Retry-After": "1"}}), ok200)...)
		tr := newTestTransport(t, tg, pace.TransportOptions{
			Retry:   pace.RetryOptions{MaxAttempts: 1},
			Breaker: pace.BreakerOptions{Failures: 3, OpenFor: 5 * time.Second},
		})
		if status, err := roundTrip(tr, get(t, t.Context())); err != nil || status != 200 {
			t.Fatalf("got (%d, %v), want 200", status, err)
		}
		if n := len(tg.seen()); n != 7 {
			t.Errorf("the target saw %d tries, want 7", n)
		}
		st := tr.Stats().Breaker
		if st.State != pace.BreakerClosed || st.Opens != 0 || st.Rejected != 0 || st.ConsecutiveFailures != 0 {
			t.Errorf("breaker %+v, want closed, never opened", st)
		}
	})
}

// TestBreakerStopsQueuedRequests: requests already waiting in the Pacer's
// queue when the breaker opens are not sent to the failing target.
func TestBreakerStopsQueuedRequests(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p, err := pace.New(pace.Options{Limits: []sluice.Limit{{Name: "api", Quota: 1, Window: time.Second}}})
		if err != nil {
			t.Fatal(err)
		}
		tg := newScriptedTarget(err500)
		tr := newTestTransport(t, tg, pace.TransportOptions{
			Pacer:   p,
			Retry:   pace.RetryOptions{MaxAttempts: 1},
			Breaker: pace.BreakerOptions{Failures: 3, OpenFor: time.Minute},
		})
		var wg sync.WaitGroup
		var open atomic.Int32
		for range 10 {
			wg.Go(func() {
				_, err := roundTrip(tr, get(t, t.Context()))
				if errors.Is(err, pace.ErrOpen) {
					open.Add(1)
				} else if err != nil {
					t.Errorf("error %v, want none or ErrOpen", err)
				}
			})
		}
		wg.Wait()
		// One per second: 0 s, 1 s and 2 s fail and open the breaker;
		// the seven still queued must not reach the target.
		if n := len(tg.seen()); n != 3 {
			t.Errorf("the target saw %d tries, want 3", n)
		}
		if open.Load() != 7 {
			t.Errorf("%d requests failed with ErrOpen, want 7", open.Load())
		}
	})
}

// TestExtremeRetryOptions: the largest valid durations work, without a
// panic or an overflow.
func TestExtremeRetryOptions(t *testing.T) {
	t.Parallel()
	const largest = time.Duration(math.MaxInt64)
	tests := []struct {
		name    string
		o       pace.RetryOptions
		first   reply
		status  int
		retryAt time.Duration // of the second try; 0: none
	}{
		// The backoff, uniform up to 292 years, is beyond the deadline
		// (but with a chance of 6.5e−9).
		{"largest delays, a failure", pace.RetryOptions{BaseDelay: largest, MaxDelay: largest, Deadline: time.Minute}, err500, 500, 0},
		// The jitter after a Retry-After is up to BaseDelay.
		{
			"largest delays, a Retry-After", pace.RetryOptions{BaseDelay: largest, MaxDelay: largest, Deadline: time.Minute},
			reply{status: 429, header: map[string]string{"Retry-After": "1"}}, 429, 0,
		},
		{
			"largest deadline and MaxRetryAfter", pace.RetryOptions{Deadline: largest, MaxRetryAfter: largest, BaseDelay: time.Nanosecond},
			reply{status: 429, header: map[string]string{"Retry-After": "1000000000"}}, 200, 1e9 * time.Second,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				tg := newScriptedTarget(tc.first, ok200)
				tr := newTestTransport(t, tg, pace.TransportOptions{Retry: tc.o})
				if status, err := roundTrip(tr, get(t, t.Context())); err != nil || status != tc.status {
					t.Fatalf("got (%d, %v), want %d", status, err, tc.status)
				}
				seen := tg.seen()
				switch {
				case tc.retryAt == 0 && len(seen) != 1:
					t.Errorf("tries at %v, want one", seen)
				case tc.retryAt > 0 && (len(seen) != 2 || seen[1].at < tc.retryAt || seen[1].at > tc.retryAt+time.Nanosecond):
					t.Errorf("tries at %v, want the second at %v", seen, tc.retryAt)
				}
			})
		})
	}
}

func TestNewTransportRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		o     pace.TransportOptions
		field string // the error must name it
	}{
		{"negative MaxAttempts", pace.TransportOptions{Retry: pace.RetryOptions{MaxAttempts: -1}}, "MaxAttempts"},
		{"negative BaseDelay", pace.TransportOptions{Retry: pace.RetryOptions{BaseDelay: -time.Second}}, "BaseDelay"},
		{"negative MaxDelay", pace.TransportOptions{Retry: pace.RetryOptions{MaxDelay: -time.Second}}, "MaxDelay"},
		{"MaxDelay below BaseDelay", pace.TransportOptions{Retry: pace.RetryOptions{BaseDelay: time.Second, MaxDelay: time.Millisecond}}, "MaxDelay"},
		{"negative Deadline", pace.TransportOptions{Retry: pace.RetryOptions{Deadline: -1}}, "Deadline"},
		{"negative MaxRetryAfter", pace.TransportOptions{Retry: pace.RetryOptions{MaxRetryAfter: -1}}, "MaxRetryAfter"},
		{"Budget 2", pace.TransportOptions{Retry: pace.RetryOptions{Budget: 2}}, "Budget"},
		{"negative Budget", pace.TransportOptions{Retry: pace.RetryOptions{Budget: -0.1}}, "Budget"},
		{"NaN Budget", pace.TransportOptions{Retry: pace.RetryOptions{Budget: math.NaN()}}, "Budget"},
		{"infinite Budget", pace.TransportOptions{Retry: pace.RetryOptions{Budget: math.Inf(1)}}, "Budget"},
		{"NaN MinRetries", pace.TransportOptions{Retry: pace.RetryOptions{MinRetries: math.NaN()}}, "MinRetries"},
		{"infinite MinRetries", pace.TransportOptions{Retry: pace.RetryOptions{MinRetries: math.Inf(1)}}, "MinRetries"},
		{"negative MinRetries", pace.TransportOptions{Retry: pace.RetryOptions{MinRetries: -1}}, "MinRetries"},
		{"IdempotencyKey with a space", pace.TransportOptions{Retry: pace.RetryOptions{IdempotencyKey: "Idempotency Key"}}, "IdempotencyKey"},
		{"IdempotencyKey with a colon", pace.TransportOptions{Retry: pace.RetryOptions{IdempotencyKey: "Key:"}}, "IdempotencyKey"},
		{"IdempotencyKey not ASCII", pace.TransportOptions{Retry: pace.RetryOptions{IdempotencyKey: "Clé"}}, "IdempotencyKey"},
		{"unknown Holds", pace.TransportOptions{Retry: pace.RetryOptions{Holds: 7}}, "Holds"},
		{"IdempotencyKey with a newline", pace.TransportOptions{Retry: pace.RetryOptions{IdempotencyKey: "Key\r\nX"}}, "IdempotencyKey"},
		{"negative breaker Failures", pace.TransportOptions{Breaker: pace.BreakerOptions{Failures: -1}}, "Failures"},
		{"negative breaker OpenFor", pace.TransportOptions{Breaker: pace.BreakerOptions{OpenFor: -1}}, "OpenFor"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr, err := pace.NewTransport(tc.o)
			if !errors.Is(err, pace.ErrInvalidOptions) || tr != nil {
				t.Fatalf("got (%v, %v), want an error wrapping ErrInvalidOptions", tr, err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
		})
	}
}

func TestNewRefusesBadRates(t *testing.T) {
	t.Parallel()
	s := time.Second
	tests := []struct {
		name string
		o    pace.Options
		want string // in the error
	}{
		{"negative Ceiling", pace.Options{Adaptive: pace.AdaptiveOptions{Ceiling: -1}}, "Ceiling"},
		{"NaN Ceiling", pace.Options{Adaptive: pace.AdaptiveOptions{Ceiling: math.NaN()}}, "Ceiling"},
		{"infinite Ceiling", pace.Options{Adaptive: pace.AdaptiveOptions{Ceiling: math.Inf(1)}}, "Ceiling"},
		{"absurd Ceiling", pace.Options{Adaptive: pace.AdaptiveOptions{Ceiling: 1e12}}, "Ceiling"},
		{"NaN Initial", pace.Options{Adaptive: pace.AdaptiveOptions{Initial: math.NaN()}}, "Initial"},
		{"negative MinRate", pace.Options{Adaptive: pace.AdaptiveOptions{MinRate: -1}}, "MinRate"},
		{"MinRate above Ceiling", pace.Options{Adaptive: pace.AdaptiveOptions{MinRate: 10, Ceiling: 1}}, "MinRate"},
		{"Beta 1", pace.Options{Adaptive: pace.AdaptiveOptions{Beta: 1}}, "Beta"},
		{"NaN Beta", pace.Options{Adaptive: pace.AdaptiveOptions{Beta: math.NaN()}}, "Beta"},
		{"negative C", pace.Options{Adaptive: pace.AdaptiveOptions{C: -1}}, "C"},
		{"infinite C", pace.Options{Adaptive: pace.AdaptiveOptions{C: math.Inf(1)}}, "C"},
		{"negative Quota", pace.Options{Limits: []sluice.Limit{{Name: "a", Quota: -1, Window: s}}}, "Limits[0]"},
		{"NaN Quota", pace.Options{Limits: []sluice.Limit{{Name: "a", Quota: math.NaN(), Window: s}}}, "Limits[0]"},
		{"infinite Quota", pace.Options{Limits: []sluice.Limit{{Name: "a", Quota: math.Inf(1), Window: s}}}, "Limits[0]"},
		{"absurd Quota", pace.Options{Limits: []sluice.Limit{{Name: "a", Quota: 1e300, Window: s}}}, "Limits[0]"},
		{"zero Window", pace.Options{Limits: []sluice.Limit{{Name: "a", Quota: 10}}}, "Limits[0]"},
		{"negative Window", pace.Options{Limits: []sluice.Limit{{Name: "a", Quota: 10, Window: -s}}}, "Limits[0]"},
		{"negative Burst", pace.Options{Limits: []sluice.Limit{{Name: "a", Quota: 10, Window: s, Burst: -1}}}, "Limits[0]"},
		{"LeakyBucket", pace.Options{Limits: []sluice.Limit{{Name: "a", Quota: 10, Window: s, Algorithm: sluice.LeakyBucket}}}, "LeakyBucket"},
		{"Concurrency", pace.Options{Limits: []sluice.Limit{{Name: "a", Quota: 10, Window: s, Algorithm: sluice.Concurrency}}}, "MaxInFlight"},
		{"duplicate names", pace.Options{Limits: []sluice.Limit{{Name: "a", Quota: 10, Window: s}, {Name: "a", Quota: 100, Window: time.Minute}}}, `"a" is used twice`},
		{"negative Slice", pace.Options{Slice: -time.Millisecond}, "Slice"},
		{"negative MaxInFlight", pace.Options{MaxInFlight: -1}, "MaxInFlight"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := pace.New(tc.o)
			if !errors.Is(err, pace.ErrInvalidOptions) || p != nil {
				t.Fatalf("got (%v, %v), want an error wrapping ErrInvalidOptions", p, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %s", err, tc.want)
			}
		})
	}
}

// TestRefusedBeforeSending: a request that cannot be sent fails at once, the
// target sees nothing, and its body is closed.
func TestRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		cost func(*http.Request) float64
		want error
	}{
		{"context already canceled", canceled, nil, context.Canceled},
		{"NaN cost", context.Background(), func(*http.Request) float64 { return math.NaN() }, sluice.ErrInvalidCost},
		{"negative cost", context.Background(), func(*http.Request) float64 { return -1 }, sluice.ErrInvalidCost},
		{"zero cost", context.Background(), func(*http.Request) float64 { return 0 }, sluice.ErrInvalidCost},
		{"infinite cost", context.Background(), func(*http.Request) float64 { return math.Inf(1) }, sluice.ErrInvalidCost},
		{"cost above the limit", context.Background(), func(*http.Request) float64 { return 11 }, sluice.ErrCostExceedsLimit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				p, err := pace.New(pace.Options{Limits: []sluice.Limit{{Name: "api", Quota: 10, Window: time.Second}}})
				if err != nil {
					t.Fatal(err)
				}
				tg := newScriptedTarget(ok200)
				tr := newTestTransport(t, tg, pace.TransportOptions{Pacer: p, Cost: tc.cost})
				body := &closeCounter{Reader: strings.NewReader("payload")}
				req, err := http.NewRequestWithContext(tc.ctx, http.MethodPut, "http://target.test/records", body)
				if err != nil {
					t.Fatal(err)
				}
				t0 := time.Now()
				resp, err := tr.RoundTrip(req)
				if resp != nil || !errors.Is(err, tc.want) {
					t.Errorf("got (%v, %v), want an error wrapping %v", resp, err, tc.want)
				}
				if d := time.Since(t0); d != 0 {
					t.Errorf("returned after %v, want at once", d)
				}
				if n := len(tg.seen()); n != 0 {
					t.Errorf("the target saw %d tries, want none", n)
				}
				if n := body.closed.Load(); n != 1 {
					t.Errorf("body closed %d times, want once", n)
				}
				if st := tr.Stats(); st.Pacer.Granted != 0 || st.Breaker.ConsecutiveFailures != 0 {
					t.Errorf("granted %d, breaker failures %d, want 0 and 0", st.Pacer.Granted, st.Breaker.ConsecutiveFailures)
				}
			})
		})
	}
}

// TestMalformedRateLimitFields: whatever the target writes in its rate limit
// fields, the request comes back normally, and the next one is sent within
// MaxRetryAfter.
func TestMalformedRateLimitFields(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("a", 100<<10)
	hugeDigits := strings.Repeat("9", 100<<10)
	tests := []struct {
		name   string
		header map[string]string
	}{
		{"garbage RateLimit", map[string]string{"RateLimit": "!!!; ;=="}},
		{"garbage RateLimit-Policy", map[string]string{"RateLimit-Policy": "((((", "RateLimit": `"p";r=0;t=5`}},
		{"negative and zero members", map[string]string{"RateLimit-Policy": `"p";q=-1;w=0, "q";q=0;w=1`, "RateLimit": `"p";r=-5;t=-1`}},
		{"huge numbers", map[string]string{"RateLimit-Policy": `"p";q=999999999999999;w=1`, "RateLimit": `"p";r=999999999999999;t=999999999999999`}},
		{"decimal and string parameters", map[string]string{"RateLimit-Policy": `"p";q=1.5;w="1"`, "RateLimit": `"p";r=1.5;t=?1`}},
		{"garbage X-RateLimit", map[string]string{"X-RateLimit-Limit": "ten", "X-RateLimit-Remaining": "-5", "X-RateLimit-Reset": "1e99"}},
		{"X-RateLimit reset of 31 years", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "999999999"}},
		{"X-RateLimit reset in the year 2286", map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "9999999999"}},
		{"RateLimit reset of 31 years", map[string]string{"RateLimit": `"p";r=0;t=999999999`}},
		{"RateLimit reset at the integer limit", map[string]string{"RateLimit": `"p";r=0;t=999999999999999`}},
		{"100 KB RateLimit", map[string]string{"RateLimit": huge}},
		{"100 KB RateLimit-Policy", map[string]string{"RateLimit-Policy": huge, "RateLimit": huge}},
		{"100 KB X-RateLimit", map[string]string{"X-RateLimit-Limit": hugeDigits, "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": hugeDigits}},
		{"control characters", map[string]string{"RateLimit-Policy": "\x00\x01\xff", "RateLimit": "\x7f", "X-RateLimit-Remaining": "\x00"}},
	}
	const maxRetryAfter = time.Minute
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				tg := newScriptedTarget(reply{status: 200, header: tc.header}, ok200)
				tr := newTestTransport(t, tg, pace.TransportOptions{Retry: pace.RetryOptions{MaxRetryAfter: maxRetryAfter}})
				if status, err := roundTrip(tr, get(t, t.Context())); err != nil || status != 200 {
					t.Fatalf("first request: got (%d, %v), want 200", status, err)
				}
				if status, err := roundTrip(tr, get(t, t.Context())); err != nil || status != 200 {
					t.Fatalf("second request: got (%d, %v), want 200", status, err)
				}
				seen := tg.seen()
				if len(seen) != 2 || seen[1].at > maxRetryAfter {
					t.Errorf("tries %v, want 2, the second within %v", seen, maxRetryAfter)
				}
			})
		})
	}
}

// TestTransportOverNetwork sends through a real http.Client and a real
// loopback server: a failed try is retried with the same body and key, the
// target's RateLimit fields are learned, and a connection refused is a
// failure retried MaxAttempts times.
func TestTransportOverNetwork(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		bodies []string
		keys   []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		n := len(bodies)
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.Header().Set("RateLimit-Policy", `"api";q=100;w=1`)
		w.Header().Set("RateLimit", `"api";r=98;t=1`)
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	tr, err := pace.NewTransport(pace.TransportOptions{
		Base:  base,
		Retry: pace.RetryOptions{BaseDelay: 10 * time.Millisecond, MaxAttempts: 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	start := time.Now()

	req, err := http.NewRequest(http.MethodPost, srv.URL+"/records", bytes.NewReader([]byte("record 1")))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "r1")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || string(got) != "record 1" {
		t.Fatalf("got (%d, %q, %v), want 200 and the record echoed", resp.StatusCode, got, err)
	}
	mu.Lock()
	if len(bodies) != 2 || bodies[0] != "record 1" || bodies[1] != "record 1" || keys[0] != "r1" || keys[1] != "r1" {
		t.Errorf("the server saw bodies %q and keys %q, want the same record and key twice", bodies, keys)
	}
	mu.Unlock()
	st := tr.Stats()
	if st.Retries != 1 || st.Failures != 1 || st.Pacer.Learned == 0 || st.Pacer.Rate != 100 {
		t.Errorf("Retries %d, Failures %d, Learned %d, Rate %v; want 1, 1, ≥ 1, 100", st.Retries, st.Failures, st.Pacer.Learned, st.Pacer.Rate)
	}

	// Nobody listens any more: every try fails, MaxAttempts are made.
	closed := httptest.NewServer(http.NotFoundHandler())
	url := closed.URL
	closed.Close()
	before := tr.Stats().Tries
	if _, err := client.Get(url); err == nil {
		t.Error("GET to a closed port succeeded")
	}
	if n := tr.Stats().Tries - before; n != 3 {
		t.Errorf("%d tries to a closed port, want MaxAttempts 3", n)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v on loopback, want well under 2 s", d)
	}
}

// TestTransportClosesIdleConnections: http.Client.CloseIdleConnections
// reaches the Base through the Transport.
func TestTransportClosesIdleConnections(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	tr, err := pace.NewTransport(pace.TransportOptions{Base: base})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	reused := func() bool {
		t.Helper()
		var r bool
		ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { r = i.Reused },
		})
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return r
	}
	reused()
	if !reused() {
		t.Fatal("the second request did not reuse the connection: the test cannot tell")
	}
	client.CloseIdleConnections()
	if reused() {
		t.Error("a connection was reused after CloseIdleConnections")
	}
}

// FuzzFeedback sends a request to a target that answers with arbitrary rate
// limit fields and status (200, 429 or 503), then 200 to everything after.
// Whatever the fields say, nothing panics, every request ends within the
// retry Deadline, the Pacer's hold is at most MaxRetryAfter, and, unless the
// target stated a quota of its own (a learned limit, which may be as slow as
// the target says), the next request goes through within MaxRetryAfter and
// the adaptive rate's floor.
func FuzzFeedback(f *testing.F) {
	f.Add(`"api";q=100;w=1`, `"api";r=0;t=1`, "100", "0", "1", "", uint8(0))
	f.Add("", "", "", "", "", "5", uint8(1))
	f.Add("", "", "", "", "", "Wed, 21 Oct 2015 07:28:00 GMT", uint8(2))
	f.Add(`"p";q=1;w=315360000`, `"p";r=0;t=315360000`, "", "", "", "1000000000", uint8(1))
	f.Add("", `"x";r=0;t=999999999999999`, "", "0", "999999999", "soon", uint8(2))
	f.Add("((((", "!!!", "ten", "-5", "1e99", "-1", uint8(1))
	f.Add(`"a";q=0;w=0, "b";q=999999999999999;w=1`, `"a";r=1.5;t=?1`, "0", "0", "0", "0", uint8(2))
	const (
		deadline      = 10 * time.Minute
		maxRetryAfter = time.Minute
	)
	f.Fuzz(func(t *testing.T, policy, limit, xLimit, xRemaining, xReset, retryAfter string, code uint8) {
		status := []int{200, 429, 503}[int(code)%3]
		header := map[string]string{}
		for k, v := range map[string]string{
			"RateLimit-Policy": policy, "RateLimit": limit, "Retry-After": retryAfter,
			"X-RateLimit-Limit": xLimit, "X-RateLimit-Remaining": xRemaining, "X-RateLimit-Reset": xReset,
		} {
			if v != "" {
				header[k] = v
			}
		}
		synctest.Test(t, func(t *testing.T) {
			tg := newScriptedTarget(reply{status: status, header: header}, ok200)
			tr := newTestTransport(t, tg, pace.TransportOptions{
				Retry: pace.RetryOptions{MaxAttempts: 1, Deadline: deadline, MaxRetryAfter: maxRetryAfter},
			})
			t0 := time.Now()
			if _, err := roundTrip(tr, get(t, t.Context())); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("first request: %v", err)
			}
			if d := time.Since(t0); d > deadline {
				t.Errorf("first request took %v, more than the deadline %v", d, deadline)
			}
			st := tr.Stats().Pacer
			received := t0.Add(tg.seen()[0].at)
			if st.HoldUntil.After(received.Add(maxRetryAfter)) {
				t.Errorf("held until %v after the answer, more than MaxRetryAfter %v", st.HoldUntil.Sub(received), maxRetryAfter)
			}
			if math.IsNaN(st.Rate) || st.Rate <= 0 {
				t.Errorf("rate %v, want a positive rate", st.Rate)
			}
			t1 := time.Now()
			status2, err := roundTrip(tr, get(t, t.Context()))
			if d := time.Since(t1); d > deadline {
				t.Errorf("second request took %v, more than the deadline %v", d, deadline)
			}
			if st.Learned == 0 {
				// One per 2 s: the adaptive rate's floor (MinRate 0.5/s).
				bound := maxRetryAfter + 2*time.Second + pace.DefaultBaseDelay
				if err != nil || status2 != 200 || time.Since(t0) > bound {
					t.Errorf("second request: (%d, %v) %v after the first, want 200 within %v", status2, err, time.Since(t0), bound)
				}
			}
		})
	})
}

// TestRetriesUnderMaxInFlight: a request waiting to retry gives its
// concurrency slot back (a review found every retry stalled until the
// Deadline under MaxInFlight), and the answer it may return is kept.
func TestRetriesUnderMaxInFlight(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p, _ := pace.New(pace.Options{MaxInFlight: 1})
		defer p.Close()
		tg := newScriptedTarget(reply{status: 429, header: map[string]string{"Retry-After": "1"}}, ok200)
		tr := newTestTransport(t, tg, pace.TransportOptions{Pacer: p, Retry: pace.RetryOptions{Deadline: time.Hour}})
		start := time.Now()
		status, err := roundTrip(tr, get(t, t.Context()))
		if err != nil || status != 200 || time.Since(start) > time.Second+pace.DefaultBaseDelay {
			t.Errorf("got (%d, %v) after %v; want 200 after about 1 s", status, err, time.Since(start))
		}
	})
	synctest.Test(t, func(t *testing.T) {
		p, _ := pace.New(pace.Options{MaxInFlight: 4})
		defer p.Close()
		tg := newScriptedTarget(append(times(4, err500), ok200)...)
		tr := newTestTransport(t, tg, pace.TransportOptions{Pacer: p, Retry: pace.RetryOptions{Deadline: time.Minute, MaxAttempts: 10}})
		start := time.Now()
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if status, err := roundTrip(tr, get(t, t.Context())); err != nil || status != 200 {
					t.Errorf("got (%d, %v), want 200", status, err)
				}
			})
		}
		wg.Wait()
		if took := time.Since(start); took >= time.Minute {
			t.Errorf("four retrying requests under MaxInFlight 4 took %v: stalled until the Deadline", took)
		}
		if s := p.Stats(); s.InFlight != 0 {
			t.Errorf("%d slots still held", s.InFlight)
		}
	})
	// The answer returned when retrying stops is whole, though its body was
	// read while waiting.
	synctest.Test(t, func(t *testing.T) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "try later")
		})
		tr := newTestTransport(t, h, pace.TransportOptions{Retry: pace.RetryOptions{MaxAttempts: 1, Deadline: time.Second, BaseDelay: 2 * time.Second}})
		resp, err := tr.RoundTrip(get(t, t.Context()))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 500 || string(body) != "try later" {
			t.Errorf("got %d %q, want 500 \"try later\"", resp.StatusCode, body)
		}
	})
}

// TestCallersDeadlineIsNamed: when the caller's own deadline is the one the
// wait outlasts, the error does not blame the retry Deadline.
func TestCallersDeadlineIsNamed(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		p, _ := pace.New(pace.Options{Limits: []sluice.Limit{{Name: "api", Quota: 1, Window: time.Hour}}})
		defer p.Close()
		tr := newTestTransport(t, newScriptedTarget(ok200), pace.TransportOptions{Pacer: p})
		if status, err := roundTrip(tr, get(t, t.Context())); err != nil || status != 200 {
			t.Fatalf("first: (%d, %v)", status, err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		_, err := roundTrip(tr, get(t, ctx))
		if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "retry deadline") {
			t.Errorf("got %v; want the caller's deadline, not the retry Deadline", err)
		}
	})
}

// TestEmptyBodyFreesItsSlot: an answer with no body (HEAD, 204) gives its
// concurrency slot back at once, closed or not.
func TestEmptyBodyFreesItsSlot(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	p, _ := pace.New(pace.Options{MaxInFlight: 1})
	defer p.Close()
	base := http.DefaultTransport.(*http.Transport).Clone()
	defer base.CloseIdleConnections()
	tr, err := pace.NewTransport(pace.TransportOptions{Base: base, Pacer: p})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var open []*http.Response
	for i := range 3 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodHead, srv.URL, nil)
		resp, err := client.Do(req) // not closed until the end
		if err != nil {
			t.Fatalf("HEAD %d: %v", i, err)
		}
		open = append(open, resp)
	}
	if s := p.Stats(); s.InFlight != 0 {
		t.Errorf("%d slots held by empty bodies", s.InFlight)
	}
	for _, resp := range open {
		_ = resp.Body.Close()
	}
}
