package pace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/ratelimitheader"
)

// TransportOptions configure a Transport. The zero value is valid: it sends
// through http.DefaultTransport with a Pacer that only learns, the default
// retries and the default breaker.
type TransportOptions struct {
	// Base sends the requests. Default http.DefaultTransport.
	Base http.RoundTripper
	// Pacer paces every try, retries included. Default: New(Options{}),
	// a Pacer with no limit of its own that learns the target's. Share one
	// Pacer between the Transports of one target.
	Pacer *Pacer
	// Cost is what a request spends on the Pacer's limits. Default 1 per
	// request.
	Cost func(*http.Request) float64
	// Retry configures the retries; see RetryOptions.
	Retry RetryOptions
	// Breaker configures the circuit breaker; see BreakerOptions.
	Breaker BreakerOptions
}

// Transport is an http.RoundTripper that makes any http.Client a good citizen
// of a rate-limited target: each try waits for the Pacer, the target's answers
// teach the Pacer its limit, throttled and failed tries are retried as
// RetryOptions say, and a circuit breaker stops sending to a target that
// fails: the breaker counts a 5xx (but 501 and 505) or a round-trip error as a
// failure, and any other answer, a 429 or a 4xx included, as a success (the
// target is up).
//
// A response's body holds the Pacer's concurrency slot (MaxInFlight) until it
// is read to the end or closed, as an http.Client's caller must do anyway.
// While a request waits to retry, its last answer is kept in memory (up to 64
// KiB of body, read under the request's context) and its connection and slot
// are given back.
// Errors: ErrOpen (wrapped) when the breaker is open, the Pacer's errors for a
// bad cost, the request context's error, or the Base's. A Transport is safe for
// concurrent use.
type Transport struct {
	base    http.RoundTripper
	pacer   *Pacer
	cost    func(*http.Request) float64
	retry   RetryOptions
	breaker *Breaker
	budget  *budget

	stats transportCounters
}

type transportCounters struct {
	requests, tries, retries, throttled, failures atomic.Uint64
	capped, budgetSpent, gaveUp                   atomic.Uint64
}

// NewTransport validates o and returns a Transport.
func NewTransport(o TransportOptions) (*Transport, error) {
	r, err := o.Retry.withDefaults()
	if err != nil {
		return nil, err
	}
	b, err := NewBreaker(o.Breaker)
	if err != nil {
		return nil, err
	}
	t := &Transport{base: o.Base, pacer: o.Pacer, cost: o.Cost, retry: r, breaker: b, budget: newBudget(r.Budget, r.MinRetries)}
	if t.base == nil {
		t.base = http.DefaultTransport
	}
	if t.pacer == nil {
		if t.pacer, err = New(Options{}); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// Pacer returns the Transport's Pacer.
func (t *Transport) Pacer() *Pacer { return t.pacer }

// CloseIdleConnections closes the Base's idle connections, when the Base has
// a CloseIdleConnections method (as *http.Transport does), so that
// http.Client.CloseIdleConnections works through a Transport.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip sends req, paced, and retries it as the Transport's RetryOptions
// say. It returns the last answer when it stops retrying one (a 429 when the
// budget is spent, a 500 when the attempts are), or the last error.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		closeBody(req)
		return nil, err
	}
	cost := 1.0
	if t.cost != nil {
		cost = t.cost(req)
	}
	start := time.Now()
	deadline := start.Add(t.retry.Deadline)
	canRetry := idempotent(req, t.retry.IdempotencyKey)
	t.stats.requests.Add(1)
	t.budget.request(start)

	var (
		last     *http.Response // the previous answer, kept to return when retrying stops
		lastErr  error
		failures int
		throttle int
		notAfter time.Time // the earliest next try
		sentOnce bool      // Base has had req (and closed its body)
	)
	giveUp := func(err error) (*http.Response, error) {
		t.stats.gaveUp.Add(1)
		if !sentOnce {
			closeBody(req) // never sent: the body is still ours to close
		}
		if last != nil && ctx.Err() == nil {
			return last, nil
		}
		discard(last)
		if err == nil {
			err = lastErr
		}
		return nil, err
	}
	for try := 0; ; try++ {
		if try > 0 {
			if err := sleepUntil(ctx, notAfter); err != nil {
				return giveUp(err)
			}
		}
		// An open breaker refuses at once, without queueing for the Pacer.
		if t.breaker.State() == BreakerOpen {
			done, err := t.breaker.Allow()
			if err != nil {
				return giveUp(err)
			}
			done(Ignored) // it turned half-open meanwhile: ask again below
		}
		waitCtx, cancel := context.WithDeadline(ctx, deadline)
		// A retry goes ahead of the first tries: its request has waited.
		permit, err := t.pacer.wait(waitCtx, cost, try > 0)
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil && !callerFirst(ctx, deadline) {
				err = fmt.Errorf("pace: no capacity before the retry deadline (%v): %w", t.retry.Deadline, err)
			}
			return giveUp(err)
		}
		// Ask the breaker when the try is about to go, not before its wait
		// in the Pacer's queue: the breaker may have opened meanwhile.
		done, err := t.breaker.Allow()
		if err != nil {
			permit.Cancel() // unused: its capacity goes to the work behind
			return giveUp(err)
		}
		r := req
		if try > 0 {
			discard(last)
			last, lastErr = nil, nil
			if r, err = rewind(req); err != nil {
				permit.Cancel()
				done(Ignored)
				t.stats.gaveUp.Add(1)
				return nil, err
			}
			t.stats.retries.Add(1)
		}
		sent := time.Now()
		sentOnce = true
		t.stats.tries.Add(1)
		resp, err := t.base.RoundTrip(r)
		now := time.Now()
		k := classify(resp, err)
		canceled := err != nil && ctx.Err() != nil
		fb := feedbackOf(resp, sent, now, k == throttled, t.retry.MaxRetryAfter)
		var wait time.Duration
		var hasWait bool
		if k == throttled {
			var capped bool
			wait, capped, hasWait = retryAfter(resp.Header, now, t.retry.MaxRetryAfter)
			if capped {
				t.stats.capped.Add(1)
			}
			if hasWait && t.retry.Holds == HoldTarget {
				fb.Hold = now.Add(wait) // in the same step: no grant slips in before it
			}
		}
		t.pacer.Feedback(fb)
		switch {
		case canceled:
			done(Ignored)
		case k == failed:
			done(Failure)
		default:
			done(Success) // any answer but a 5xx, a 429 included: the target is up
		}
		if resp != nil {
			holdBody(resp, permit)
		} else {
			permit.Done()
		}
		last, lastErr = resp, err
		switch k {
		case succeeded:
			return resp, nil
		case throttled:
			t.stats.throttled.Add(1)
			throttle++
			if hasWait {
				notAfter = now.Add(wait + jitter(t.retry.BaseDelay))
			} else {
				notAfter = now.Add(backoff(t.retry.BaseDelay, t.retry.MaxDelay, throttle))
			}
		case failed:
			if canceled {
				return giveUp(ctx.Err())
			}
			t.stats.failures.Add(1)
			failures++
			if failures >= t.retry.MaxAttempts {
				return giveUp(nil)
			}
			notAfter = now.Add(backoff(t.retry.BaseDelay, t.retry.MaxDelay, failures))
		}
		if !canRetry || notAfter.After(deadline) {
			return giveUp(nil)
		}
		if !t.budget.retry(now) {
			t.stats.budgetSpent.Add(1)
			return giveUp(nil)
		}
		// Waiting to retry: keep the answer (to return it if retrying
		// stops) but not its connection nor its concurrency slot.
		last, lastErr = keep(last, lastErr)
	}
}

// callerFirst reports whether ctx's own deadline comes before deadline (so a
// deadline error is the caller's, not the retry Deadline's).
func callerFirst(ctx context.Context, deadline time.Time) bool {
	d, ok := ctx.Deadline()
	return ok && d.Before(deadline)
}

// maxKept is the largest answer body kept in memory while waiting to retry.
const maxKept = 64 << 10

// keep reads resp's body into memory and closes it — giving back its
// connection and the Pacer's concurrency slot — so that resp can be returned
// later. A body over maxKept is not kept: the answer becomes an error that
// says what it was.
func keep(resp *http.Response, err error) (*http.Response, error) {
	if resp == nil {
		return nil, err
	}
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, maxKept+1))
	_ = resp.Body.Close()
	if rerr != nil || len(body) > maxKept {
		return nil, fmt.Errorf("pace: the last answer was %s (its body not kept: over %d bytes or unreadable)", resp.Status, maxKept)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	return resp, nil
}

// jitter is a random wait in [0, d), spreading the retries of clients told
// the same Retry-After.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return backoff(d, d, 1)
}

// feedbackOf is what resp says of the target's limit. A reset (RateLimit's t,
// X-RateLimit-Reset) is cut to maxWait, as a Retry-After is: a target that
// says nothing is left for years would otherwise hold the Pacer for years.
func feedbackOf(resp *http.Response, sent, received time.Time, throttled bool, maxWait time.Duration) Feedback {
	f := Feedback{Sent: sent, Received: received, Throttled: throttled}
	if resp == nil {
		return f
	}
	h := resp.Header
	if v := h.Values("RateLimit-Policy"); len(v) > 0 {
		f.Policies, _ = ratelimitheader.ParsePolicies(v)
	}
	if v := h.Values("RateLimit"); len(v) > 0 {
		f.Limits, _ = ratelimitheader.ParseLimits(v)
		for i := range f.Limits {
			f.Limits[i].Reset = min(f.Limits[i].Reset, maxWait)
		}
	}
	f.Legacy, f.HasLegacy = ratelimitheader.ParseLegacy(h, received)
	f.Legacy.Reset = min(f.Legacy.Reset, maxWait)
	return f
}

// sleepUntil waits until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// rewind is req ready to be sent again: a clone with a fresh body.
func rewind(req *http.Request) (*http.Request, error) {
	r := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("pace: read the request body again: %w", err)
		}
		r.Body = body
	}
	return r, nil
}

// closeBody closes a request's body, as a RoundTripper must even on error.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// discard reads a little of an answer that will not be returned, so that its
// connection can be reused, and closes it.
func discard(resp *http.Response) {
	if resp == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
	_ = resp.Body.Close()
}

// holdBody makes resp's body give the permit back when it is read to the end
// or closed.
func holdBody(resp *http.Response, permit *Reservation) {
	if resp.Body == nil || resp.Body == http.NoBody || resp.StatusCode == http.StatusSwitchingProtocols {
		permit.Done()
		return
	}
	resp.Body = &permitBody{ReadCloser: resp.Body, permit: permit}
}

type permitBody struct {
	io.ReadCloser
	permit *Reservation
	once   sync.Once
}

func (b *permitBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.once.Do(b.permit.Done)
	}
	return n, err
}

func (b *permitBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.permit.Done)
	return err
}

// TransportStats are a Transport's counters, its Pacer's and its breaker's.
type TransportStats struct {
	// Requests counts RoundTrip calls; Tries the requests sent to Base
	// (first tries and retries); Retries the tries after the first.
	Requests, Tries, Retries uint64
	// Throttled counts throttled answers (429, 503 with Retry-After);
	// Failures failed tries (5xx, round-trip errors).
	Throttled, Failures uint64
	// RetryAfterCapped counts Retry-After waits cut to MaxRetryAfter.
	RetryAfterCapped uint64
	// BudgetSpent counts retries refused by the retry budget; GaveUp the
	// requests that stopped retrying and returned their last answer or
	// error (budget, attempts, deadline, breaker, a request that cannot be
	// retried, a context that ended).
	BudgetSpent, GaveUp uint64
	Pacer               Stats
	Breaker             BreakerStats
}

// Stats returns the Transport's counters now.
func (t *Transport) Stats() TransportStats {
	return TransportStats{
		Requests:         t.stats.requests.Load(),
		Tries:            t.stats.tries.Load(),
		Retries:          t.stats.retries.Load(),
		Throttled:        t.stats.throttled.Load(),
		Failures:         t.stats.failures.Load(),
		RetryAfterCapped: t.stats.capped.Load(),
		BudgetSpent:      t.stats.budgetSpent.Load(),
		GaveUp:           t.stats.gaveUp.Load(),
		Pacer:            t.pacer.Stats(),
		Breaker:          t.breaker.Stats(),
	}
}
