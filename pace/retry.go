package pace

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/sluicehq/sluice/ratelimitheader"
)

// The defaults of RetryOptions.
const (
	DefaultMaxAttempts     = 4
	DefaultBaseDelay       = 100 * time.Millisecond
	DefaultMaxDelay        = 20 * time.Second
	DefaultDeadline        = 15 * time.Minute
	DefaultMaxRetryAfter   = 10 * time.Minute
	DefaultBudget          = 0.1
	DefaultMinRetries      = 10
	DefaultIdempotencyName = "Idempotency-Key"
)

// budgetSpan is the span over which the retry budget counts.
const budgetSpan = 10 * time.Second

// RetryOptions configure how a Transport retries.
//
// An answer is one of three kinds. A success (below 500, except 429) is
// returned. A throttled answer — 429, or 503 with a Retry-After that names a
// future instant — waits at
// least what Retry-After says (capped at MaxRetryAfter) and is sent again
// without spending an attempt; a Retry-After that cannot be read (garbage, a
// date in the past) leaves the exponential backoff. A failure — another 5xx,
// or an error of the round trip such as a timeout — spends an attempt and waits
// the backoff: full jitter, a random duration in [0, min(MaxDelay,
// BaseDelay×2^(n−1))] before the n-th retry. Every retry goes through the
// Pacer, so it spends capacity like a first try.
//
// Retrying stops, and the last answer (or error) is returned, when the
// attempts are spent, when the next try would start after Deadline, when the
// retry budget is empty, or when the request cannot be sent twice safely: its
// method is not idempotent (POST, PATCH, CONNECT) and it carries no
// idempotency key, or its body cannot be read again (Request.GetBody is nil).
type RetryOptions struct {
	// MaxAttempts bounds the tries that may fail (the first included);
	// throttled answers do not count. Default DefaultMaxAttempts; 1 retries
	// only throttled answers.
	MaxAttempts int
	// BaseDelay and MaxDelay shape the backoff. Defaults DefaultBaseDelay
	// and DefaultMaxDelay.
	BaseDelay, MaxDelay time.Duration
	// Deadline bounds a request's waits and retries, from its first try:
	// no try starts after it, and no wait for the Pacer lasts beyond it. A
	// try in flight is bounded by the request's context and the Base's own
	// timeouts, not by Deadline. Default DefaultDeadline.
	Deadline time.Duration
	// MaxRetryAfter caps the wait a Retry-After imposes: a longer one is
	// waited for MaxRetryAfter only, and counted (Stats.RetryAfterCapped).
	// It caps as well the hold of a RateLimit or X-RateLimit-* field that
	// says nothing is left until a reset. Default DefaultMaxRetryAfter.
	MaxRetryAfter time.Duration
	// Budget is the share of requests that may be retries, over the last
	// ten seconds, on top of MinRetries per second: 0.1 means at most one
	// retry per ten requests. It stops retry storms: when a target fails
	// everything, retries stop multiplying the load. Default DefaultBudget.
	Budget float64
	// MinRetries is the retries per second the budget always allows (so
	// a client sending little can still retry). Default DefaultMinRetries;
	// a zero Budget or MinRetries means its default, so the smallest
	// budget is a tiny one (say 1e-9), and no retries at all is a plain
	// http.Client.
	MinRetries float64
	// IdempotencyKey is the header that makes a request with a method that is
	// not idempotent safe to retry. Default DefaultIdempotencyName.
	IdempotencyKey string
	// Holds says whom a Retry-After holds. Default HoldTarget.
	Holds HoldScope
}

// HoldScope says whom a Retry-After holds.
type HoldScope int

const (
	// HoldTarget, the default: every request through the Pacer waits until
	// the instant a Retry-After names — RFC 6585's "how long to wait before
	// making a new request": a target that said it is full gets nothing
	// before then.
	HoldTarget HoldScope = iota
	// HoldRequest: only the throttled request waits its Retry-After out;
	// the others go on at the rate the Pacer lowered on the throttle. For
	// targets known to round a short wait up to whole seconds, where
	// holding every request costs throughput (docs/BENCHMARKS.md).
	HoldRequest
)

func (o RetryOptions) withDefaults() (RetryOptions, error) {
	bad := func(field string, v any, why string) error {
		return fmt.Errorf("%w: Retry.%s %v %s", ErrInvalidOptions, field, v, why)
	}
	switch {
	case o.MaxAttempts < 0:
		return o, bad("MaxAttempts", o.MaxAttempts, "is negative")
	case o.BaseDelay < 0:
		return o, bad("BaseDelay", o.BaseDelay, "is negative")
	case o.MaxDelay < 0:
		return o, bad("MaxDelay", o.MaxDelay, "is negative")
	case o.Deadline < 0:
		return o, bad("Deadline", o.Deadline, "is negative")
	case o.MaxRetryAfter < 0:
		return o, bad("MaxRetryAfter", o.MaxRetryAfter, "is negative")
	case math.IsNaN(o.Budget) || o.Budget < 0 || o.Budget > 1:
		return o, bad("Budget", o.Budget, "is not a share between 0 and 1")
	case math.IsNaN(o.MinRetries) || math.IsInf(o.MinRetries, 0) || o.MinRetries < 0:
		return o, bad("MinRetries", o.MinRetries, "is not a rate of 0 or more per second")
	case o.Holds != HoldTarget && o.Holds != HoldRequest:
		return o, bad("Holds", int(o.Holds), "is not HoldTarget or HoldRequest")
	case o.IdempotencyKey != "" && !httpguts.ValidHeaderFieldName(o.IdempotencyKey):
		return o, bad("IdempotencyKey", fmt.Sprintf("%q", o.IdempotencyKey), "is not a header name")
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.BaseDelay == 0 {
		o.BaseDelay = DefaultBaseDelay
	}
	if o.MaxDelay == 0 {
		o.MaxDelay = max(DefaultMaxDelay, o.BaseDelay)
	}
	if o.MaxDelay < o.BaseDelay {
		return o, bad("MaxDelay", o.MaxDelay, fmt.Sprintf("is below BaseDelay %v", o.BaseDelay))
	}
	if o.Deadline == 0 {
		o.Deadline = DefaultDeadline
	}
	if o.MaxRetryAfter == 0 {
		o.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if o.Budget == 0 {
		o.Budget = DefaultBudget
	}
	if o.MinRetries == 0 {
		o.MinRetries = DefaultMinRetries
	}
	if o.IdempotencyKey == "" {
		o.IdempotencyKey = DefaultIdempotencyName
	}
	o.IdempotencyKey = http.CanonicalHeaderKey(o.IdempotencyKey)
	return o, nil
}

// backoff is the full-jitter wait before retry n (1 for the first retry):
// uniform in [0, min(maxDelay, base×2^(n−1))], both ends included.
func backoff(base, maxDelay time.Duration, n int) time.Duration {
	d := maxDelay
	// base×2^(n−1) < maxDelay without overflow: the shift wraps around
	// (to a short wait) when base has a high bit set.
	if n >= 1 && n-1 < 63 && base > 0 && base <= (maxDelay-1)>>(n-1) {
		d = base << (n - 1)
	}
	if d <= 0 {
		return 0
	}
	if d < math.MaxInt64 {
		d++ // include the bound; rand.N(MaxInt64+1) would panic
	}
	return rand.N(d)
}

// kind is what an answer means for the retry loop.
type kind int

const (
	succeeded kind = iota
	throttled
	failed
)

// classify sorts an answer (or the round trip's error).
func classify(resp *http.Response, err error) kind {
	switch {
	case err != nil:
		return failed
	case resp.StatusCode == http.StatusTooManyRequests:
		return throttled
	case resp.StatusCode == http.StatusServiceUnavailable:
		// Throttled only when it says until when: a 503 whose Retry-After
		// is absent, unreadable or past is a failing target, for the
		// attempts and the breaker.
		if _, _, ok := retryAfter(resp.Header, time.Now(), math.MaxInt64); ok {
			return throttled
		}
		return failed
	case resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented && resp.StatusCode != http.StatusHTTPVersionNotSupported:
		return failed
	}
	return succeeded
}

// retryAfter reads an answer's Retry-After at now: the wait (at most
// maxWait), whether it was capped, and false when there is none or it cannot
// be read, or names a past instant (the backoff then applies).
func retryAfter(h http.Header, now time.Time, maxWait time.Duration) (wait time.Duration, capped, ok bool) {
	v := h.Values("Retry-After")
	if len(v) != 1 {
		return 0, false, false // absent, or ambiguous
	}
	d, err := ratelimitheader.ParseRetryAfter(v[0], now)
	if err != nil || d <= 0 {
		return 0, false, false
	}
	if d > maxWait {
		return maxWait, true, true
	}
	return d, false, true
}

// idempotent reports whether req may be sent twice: an idempotent method, or
// an idempotency key; and a body that can be read again.
func idempotent(req *http.Request, keyHeader string) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return req.Header.Get(keyHeader) != ""
}

// budget counts requests and retries over the last budgetSpan, in one-second
// buckets, and allows a retry while retries ≤ share × requests + min × span.
type budget struct {
	mu       sync.Mutex
	share    float64
	floor    float64 // retries always allowed over the span
	requests [10]float64
	retries  [10]float64
	last     int64 // second of the latest count
}

func newBudget(share, perSecond float64) *budget {
	return &budget{share: share, floor: perSecond * budgetSpan.Seconds()}
}

func (b *budget) advance(t time.Time) int {
	s := t.Unix()
	if s > b.last {
		for j := b.last + 1; j <= s && j <= b.last+int64(len(b.requests)); j++ {
			b.requests[j%10], b.retries[j%10] = 0, 0
		}
		b.last = s
	}
	return int(b.last % 10)
}

// request counts a first try.
func (b *budget) request(t time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.requests[b.advance(t)]++
}

// retry takes a retry from the budget, or reports false when it is spent.
func (b *budget) retry(t time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := b.advance(t)
	var req, ret float64
	for j := range b.requests {
		req += b.requests[j]
		ret += b.retries[j]
	}
	if ret+1 > b.share*req+b.floor {
		return false
	}
	b.retries[i]++
	return true
}
