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
	// Share, when set, is this process's share of a limit several
	// processes spend together (lease.SpendFrom over a lease.Holder): every
	// try first waits for Cost from it, then for the Pacer, and carries the
	// share's fence in the Sluice-Lease-Epoch header. A 409 answer to a
	// fenced try whose body names stale_lease_epoch (httplimit.Fence's
	// refusal) means the target saw a newer holder of that partition: the
	// Share is told (Stale) and the request is tried again at once under
	// another fence, spending no attempt (still bounded by the Deadline and
	// the retry budget). Other answers — the target's own 409s, its other
	// fence refusals (400, 403, 428) — are returned as they are.
	Share Share
}

// Share is one process's share of a limit a fleet spends together; see
// TransportOptions.Share. lease.Budget implements it. Implementations are
// safe for concurrent use.
type Share interface {
	// Wait blocks until cost may be spent from the share, or ctx ends, and
	// returns the fence to send ("" for none).
	Wait(ctx context.Context, cost float64) (fence string, err error)
	// Stale tells the share that a target refused fence as stale.
	Stale(fence string)
}

// fenceHeader carries a Share's fence (lease.FenceHeader).
const fenceHeader = "Sluice-Lease-Epoch"

// staleFence reports whether a 409 is a fencing target's refusal of a
// stale epoch (httplimit.Fence's body names stale_lease_epoch) rather than
// the target's own conflict, which is the caller's answer. It reads the
// body's first bytes and puts them back.
func staleFence(resp *http.Response) bool {
	if resp.Body == nil || resp.Body == http.NoBody {
		return false
	}
	head := make([]byte, 256)
	n, _ := io.ReadFull(resp.Body, head)
	head = head[:n]
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	return bytes.Contains(head, []byte(`"stale_lease_epoch"`))
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
	share   Share

	stats transportCounters
}

type transportCounters struct {
	requests, tries, retries, throttled, failures atomic.Uint64
	capped, budgetSpent, gaveUp, fenced           atomic.Uint64
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
	t := &Transport{base: o.Base, pacer: o.Pacer, cost: o.Cost, retry: r, breaker: b, budget: newBudget(r.Budget, r.MinRetries), share: o.Share}
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
	if err := req.Context().Err(); err != nil {
		closeBody(req)
		return nil, err
	}
	a := t.newAttempt(req)
	// Each try is the same steps: wait out the previous answer's delay,
	// get a turn from the breaker and the Pacer, send the request (a fresh
	// copy for a retry), learn from the answer, and decide whether to try
	// again.
	for {
		if a.sent > 0 {
			if err := sleepUntil(a.ctx, a.notAfter); err != nil {
				return a.giveUp(err)
			}
		}
		tn, err := a.admit()
		if err != nil {
			return a.giveUp(err)
		}
		r, err := a.request()
		if err != nil {
			tn.permit.Cancel()
			tn.done(Ignored)
			return a.giveUp(err)
		}
		ans := a.send(r)
		a.learn(tn, ans)
		a.last, a.lastErr = ans.resp, ans.err
		if ans.kind == succeeded && !ans.fenced {
			return ans.resp, nil
		}
		if ok, err := a.retry(ans); !ok {
			return a.giveUp(err)
		}
		// Waiting to retry: keep the answer (to return it if retrying
		// stops) but not its connection nor its concurrency slot.
		a.last, a.lastErr = keep(a.last, a.lastErr)
	}
}

// attempt is one RoundTrip: the request, its limits (deadline, whether it may
// be sent twice), and what its tries so far have left. It is used by the
// goroutine of its RoundTrip only.
type attempt struct {
	t        *Transport
	req      *http.Request
	ctx      context.Context
	cost     float64   // what each try spends on the Pacer
	deadline time.Time // no try starts after it, no wait lasts beyond it
	canRetry bool      // req may be sent twice (idempotent, body readable again)

	sent      int            // tries sent to Base; once one is, req's body is Base's to close
	failures  int            // failed tries, which spend attempts
	throttles int            // throttled answers, which lengthen their backoff but spend no attempt
	fence     string         // the try's fence from the Share ("" without one)
	notAfter  time.Time      // the earliest next try
	last      *http.Response // the previous answer, kept to return when retrying stops
	lastErr   error          // the previous try's error
}

// newAttempt starts a RoundTrip of req: its cost, its Deadline from now, and
// a request counted for the retry budget.
func (t *Transport) newAttempt(req *http.Request) *attempt {
	cost := 1.0
	if t.cost != nil {
		cost = t.cost(req)
	}
	start := time.Now()
	t.stats.requests.Add(1)
	t.budget.request(start)
	return &attempt{
		t:        t,
		req:      req,
		ctx:      req.Context(),
		cost:     cost,
		deadline: start.Add(t.retry.Deadline),
		canRetry: idempotent(req, t.retry.IdempotencyKey),
	}
}

// turn is a try's leave to go: its grant from the Pacer, to give back when
// the try is over, and its call to the breaker, to report the result to.
type turn struct {
	permit *Reservation
	done   func(Result)
}

// admit waits for the try's turn. An open breaker refuses at once, without
// queueing for the Pacer; otherwise the try waits for the Pacer (until the
// retry Deadline at most), and then asks the breaker, as the try is about to
// go: the breaker may have opened during the wait.
func (a *attempt) admit() (turn, error) {
	t := a.t
	if t.breaker.State() == BreakerOpen {
		done, err := t.breaker.Allow()
		if err != nil {
			return turn{}, err
		}
		done(Ignored) // it turned half-open meanwhile: ask again below
	}
	waitCtx, cancel := context.WithDeadline(a.ctx, a.deadline)
	defer cancel()
	if t.share != nil {
		// The fleet's share first: waiting for it holds no Pacer slot.
		fence, err := t.share.Wait(waitCtx, a.cost)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && a.ctx.Err() == nil && !callerFirst(a.ctx, a.deadline) {
				err = fmt.Errorf("pace: no share of the fleet's limit before the retry deadline (%v): %w", t.retry.Deadline, err)
			}
			return turn{}, err
		}
		a.fence = fence
	}
	// A retry goes ahead of the first tries: its request has waited.
	permit, err := t.pacer.wait(waitCtx, a.cost, a.sent > 0)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && a.ctx.Err() == nil && !callerFirst(a.ctx, a.deadline) {
			err = fmt.Errorf("pace: no capacity before the retry deadline (%v): %w", t.retry.Deadline, err)
		}
		return turn{}, err
	}
	done, err := t.breaker.Allow()
	if err != nil {
		permit.Cancel() // unused: its capacity goes to the work behind
		return turn{}, err
	}
	return turn{permit: permit, done: done}, nil
}

// request is what the try sends: req itself the first time; for a retry, a
// clone with a fresh body, once the previous answer is let go. A try with a
// fence carries it in a clone's header (req is the caller's, never changed).
func (a *attempt) request() (*http.Request, error) {
	r := a.req
	if a.sent > 0 {
		discard(a.last)
		a.last, a.lastErr = nil, nil
		var err error
		if r, err = rewind(a.req); err != nil {
			return nil, err
		}
		a.t.stats.retries.Add(1)
	} else if a.fence != "" {
		r = a.req.Clone(a.ctx) // the same body: it is the first try
	}
	if a.fence != "" {
		r.Header.Set(fenceHeader, a.fence)
	}
	return r, nil
}

// answer is what a try brought back and what it means.
type answer struct {
	resp           *http.Response
	err            error
	sent, received time.Time
	kind           kind
	canceled       bool          // the round trip failed because the request's context ended
	fenced         bool          // a 409 to a try sent with a fence: the Share's partition moved on
	wait           time.Duration // a throttled answer's Retry-After, when hasWait
	hasWait        bool
}

// send sends r to Base and classifies the answer: a success, throttled (with
// its Retry-After, cut to MaxRetryAfter) or failed.
func (a *attempt) send(r *http.Request) answer {
	t := a.t
	ans := answer{sent: time.Now()}
	a.sent++
	t.stats.tries.Add(1)
	ans.resp, ans.err = t.base.RoundTrip(r)
	ans.received = time.Now()
	ans.kind = classify(ans.resp, ans.err)
	ans.canceled = ans.err != nil && a.ctx.Err() != nil
	ans.fenced = a.fence != "" && ans.resp != nil && ans.resp.StatusCode == http.StatusConflict && staleFence(ans.resp)
	if ans.kind == throttled {
		var capped bool
		ans.wait, capped, ans.hasWait = retryAfter(ans.resp.Header, ans.received, t.retry.MaxRetryAfter)
		if capped {
			t.stats.capped.Add(1)
		}
	}
	return ans
}

// learn tells the Pacer what the answer says of the target's limit — and a
// Retry-After's hold on every request when Holds is HoldTarget — and tells
// the breaker whether the target is up: any answer but a 5xx is, a 429
// included; a canceled try says nothing. The try's Pacer slot is given back
// now, or when the answer's body is read to the end or closed.
func (a *attempt) learn(tn turn, ans answer) {
	t := a.t
	fb := feedbackOf(ans.resp, ans.sent, ans.received, ans.kind == throttled, t.retry.MaxRetryAfter)
	if ans.hasWait && t.retry.Holds == HoldTarget {
		fb.Hold = ans.received.Add(ans.wait) // in the same step: no grant slips in before it
	}
	t.pacer.Feedback(fb)
	switch {
	case ans.canceled:
		tn.done(Ignored)
	case ans.kind == failed:
		tn.done(Failure)
	default:
		tn.done(Success)
	}
	if ans.resp != nil {
		holdBody(ans.resp, tn.permit)
	} else {
		tn.permit.Done()
	}
}

// retry decides whether an answer that is not a success is tried again, and
// sets notAfter to when: after its Retry-After (plus a jitter), or after the
// backoff of its kind. It reports false, with the error to give up with (nil
// for the last answer or error), when retrying stops: the request's context
// ended, the attempts are spent, the request cannot be sent twice, the next
// try would start after the Deadline, or the retry budget is spent.
func (a *attempt) retry(ans answer) (bool, error) {
	t := a.t
	switch {
	case ans.fenced:
		// Not the request's failure: its partition has a newer holder.
		// The next try waits for the Share again, under another fence.
		t.share.Stale(a.fence)
		t.stats.fenced.Add(1)
		a.notAfter = ans.received
	case ans.kind == throttled:
		t.stats.throttled.Add(1)
		a.throttles++
		if ans.hasWait {
			a.notAfter = ans.received.Add(ans.wait + jitter(t.retry.BaseDelay))
		} else {
			a.notAfter = ans.received.Add(backoff(t.retry.BaseDelay, t.retry.MaxDelay, a.throttles))
		}
	case ans.kind == failed:
		if ans.canceled {
			return false, a.ctx.Err()
		}
		t.stats.failures.Add(1)
		a.failures++
		if a.failures >= t.retry.MaxAttempts {
			return false, nil
		}
		a.notAfter = ans.received.Add(backoff(t.retry.BaseDelay, t.retry.MaxDelay, a.failures))
	}
	if !a.canRetry || a.notAfter.After(a.deadline) {
		return false, nil
	}
	if !t.budget.retry(ans.received) {
		t.stats.budgetSpent.Add(1)
		return false, nil
	}
	return true, nil
}

// giveUp ends the RoundTrip: it returns the last answer, when there is one
// and the request's context has not ended, or else err (the last error when
// err is nil). A request never sent has its body closed, as a RoundTripper
// must.
func (a *attempt) giveUp(err error) (*http.Response, error) {
	a.t.stats.gaveUp.Add(1)
	if a.sent == 0 {
		closeBody(a.req) // never sent: the body is still ours to close
	}
	if a.last != nil && a.ctx.Err() == nil {
		return a.last, nil
	}
	discard(a.last)
	if err == nil {
		err = a.lastErr
	}
	return nil, err
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
	// Fenced counts 409 answers to fenced tries (TransportOptions.Share).
	Fenced  uint64
	Pacer   Stats
	Breaker BreakerStats
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
		Fenced:           t.stats.fenced.Load(),
		Pacer:            t.pacer.Stats(),
		Breaker:          t.breaker.Stats(),
	}
}
