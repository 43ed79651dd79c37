package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	fleet "github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/queue"
)

// Answer is the kept answer of a succeeded task: what asynchronous
// request-reply returns.
type Answer struct {
	// Status is the answer's HTTP status.
	Status int `json:"status"`
	// Header holds the kept fields: Content-Type, Location and the
	// target's KeepHeaders.
	Header http.Header `json:"header,omitempty"`
	// Body is the answer's body, up to the target's KeepBody bytes.
	Body []byte `json:"body,omitempty"`
	// Truncated: the body was longer than what is kept.
	Truncated bool `json:"truncated,omitempty"`
}

// deliver sends one task whose capacity the Pacer granted, and records
// its outcome: the delivery state machine of docs/DESIGN.md.
func (t *target) deliver(l *lane, lease queue.Lease, res *pace.Reservation, fence string) {
	defer res.Done()
	pacer, breaker, client, cfg := t.current()
	done, err := breaker.Allow()
	if err != nil {
		// Not sent: no attempt spent; back when the breaker lets a probe by.
		at := time.Now().Add(min(cfg.Breaker.OpenFor/4+time.Second, 30*time.Second))
		t.finish(l, func(c context.Context) error {
			return l.q.Retry(c, lease.Receipt, queue.Retry{At: at, Reason: "not sent: " + err.Error(), Throttled: true})
		})
		return
	}
	var s stored
	if err := json.Unmarshal(lease.Payload, &s); err != nil {
		done(pace.Ignored)
		t.finish(l, func(c context.Context) error {
			return l.q.DeadLetter(c, lease.Receipt, "the stored request cannot be read: "+err.Error())
		})
		l.dead.Add(1)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	if !lease.Deadline.IsZero() {
		var cancelDeadline context.CancelFunc
		ctx, cancelDeadline = context.WithDeadline(ctx, lease.Deadline)
		defer cancelDeadline()
	}
	req, err := http.NewRequestWithContext(ctx, s.Method, t.origin.String()+s.Path, bytes.NewReader(s.Body))
	if err == nil && (req.URL.Host != t.origin.String()[len(t.origin.Scheme)+3:] || !strings.HasPrefix(s.Path, "/")) {
		err = errors.New("the stored path does not stay on the target's origin")
	}
	if err != nil {
		done(pace.Ignored)
		t.finish(l, func(c context.Context) error {
			return l.q.DeadLetter(c, lease.Receipt, "the stored request cannot be sent: "+err.Error())
		})
		l.dead.Add(1)
		return
	}
	req.Header = http.Header(s.Header).Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	key := lease.Key
	if key == "" {
		key = l.name + "." + lease.ID
	}
	req.Header.Set(idempotencyHeader, key)
	if fence != "" {
		req.Header.Set(fleet.FenceHeader, fence)
	}
	if lease.Attempt == 1 {
		ready := lease.Enqueued
		if !lease.NotBefore.IsZero() && lease.NotBefore.After(ready) {
			ready = lease.NotBefore
		}
		l.waitSum.Add(int64(time.Since(ready)))
		l.waitN.Add(1)
	}
	sent := time.Now()
	resp, err := client.Do(req)
	var body []byte
	truncated := false
	if err == nil {
		body, truncated, err = readKept(resp.Body, cfg.KeepBody)
		resp.Body.Close()
	}
	received := time.Now()
	l.delivered.Add(1)
	if fence != "" && err == nil && fenceRefusal(resp.StatusCode) {
		// A fenced target refused the lease the task was sent under (409:
		// a newer holder of this share; 400/403/428: the target does not
		// take this fence). Not the task's failure, and not an attempt:
		// the task goes again a second later; on 409 the Budget drops the
		// share.
		done(pace.Success)
		if resp.StatusCode == http.StatusConflict {
			cfg.Budget.Stale(fence)
		}
		t.summary.note(&t.summary.throttled, resp.Status+" (lease fence)")
		t.retry(l, lease, queue.Retry{At: received.Add(time.Second), Reason: resp.Status + ": the target refused the lease fence", Throttled: true}, cfg)
		return
	}
	ans := pace.ReadAnswer(resp, err, sent, received, cfg.Retry.MaxRetryAfter)
	pacer.Feedback(ans.Feedback)
	switch {
	case ans.Throttled:
		done(pace.Success) // the target is up
		l.throttled.Add(1)
		t.summary.note(&t.summary.throttled, resp.Status)
		at := received.Add(ans.RetryAfter)
		if ans.RetryAfter == 0 {
			at = received.Add(cfg.Slice)
		}
		t.retry(l, lease, queue.Retry{At: at, Reason: resp.Status, Throttled: true}, cfg)
	case ans.Failed:
		done(pace.Failure)
		reason := failureReason(resp, err, ctx, lease)
		l.failed.Add(1)
		t.summary.note(&t.summary.failed, reason)
		t.retry(l, lease, queue.Retry{At: received.Add(pace.Backoff(cfg.Retry.BaseDelay, cfg.Retry.MaxDelay, lease.Attempt)), Reason: reason}, cfg)
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		done(pace.Success)
		result := t.result(Answer{Status: resp.StatusCode, Header: keep(resp.Header, cfg.KeepHeaders), Body: body, Truncated: truncated})
		l.succeeded.Add(1)
		t.finish(l, func(c context.Context) error { return l.q.Ack(c, lease.Receipt, result) })
	case slices.Contains(cfg.Retry.RetryStatuses, resp.StatusCode):
		done(pace.Success)
		l.failed.Add(1)
		t.summary.note(&t.summary.failed, resp.Status)
		t.retry(l, lease, queue.Retry{At: received.Add(pace.Backoff(cfg.Retry.BaseDelay, cfg.Retry.MaxDelay, lease.Attempt)), Reason: resp.Status}, cfg)
	default:
		// Another 4xx, a 1xx, a 3xx not followed (it left the origin): the
		// same request would get the same answer.
		done(pace.Success)
		reason := resp.Status
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			reason += " (not followed: a redirect is followed only on the target's origin, 10 at most)"
		}
		l.dead.Add(1)
		t.summary.note(&t.summary.dead, reason)
		t.finish(l, func(c context.Context) error { return l.q.DeadLetter(c, lease.Receipt, reason) })
	}
}

// result encodes a kept answer within the backend's result bound: the
// body is cut (Truncated) until it fits, then the headers dropped — an
// Ack refused for its size would bring the task back again and again.
func (t *target) result(a Answer) []byte {
	encode := func() []byte {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(a)
		return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	}
	bound := t.resultBound()
	out := encode()
	for len(out) > bound && len(a.Body) > 0 {
		cut := min(len(a.Body), (len(out)-bound)*3/4+64)
		a.Body, a.Truncated = a.Body[:len(a.Body)-cut], true
		out = encode()
	}
	if len(out) > bound {
		a.Header = nil
		out = encode()
	}
	return out
}

// retry returns a task to its queue, or dead-letters it when its deadline
// passes before the instant of the retry.
func (t *target) retry(l *lane, lease queue.Lease, how queue.Retry, cfg Target) {
	if !lease.Deadline.IsZero() && !how.At.Before(lease.Deadline) {
		l.dead.Add(1)
		t.finish(l, func(c context.Context) error {
			return l.q.DeadLetter(c, lease.Receipt, queue.ReasonDeadline+" before the next attempt; last: "+how.Reason)
		})
		return
	}
	if !how.Throttled && lease.Attempt >= lease.MaxAttempts && lease.MaxAttempts > 0 {
		l.dead.Add(1)
	}
	t.finish(l, func(c context.Context) error { return l.q.Retry(c, lease.Receipt, how) })
}

// failureReason says why a delivery failed, without the task's URL (a
// reason is shown in the API and the logs).
func failureReason(resp *http.Response, err error, ctx context.Context, lease queue.Lease) string {
	switch {
	case err == nil:
		return resp.Status
	case errors.Is(ctx.Err(), context.DeadlineExceeded) && !lease.Deadline.IsZero() && !time.Now().Before(lease.Deadline):
		return queue.ReasonDeadline + " during the delivery"
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return "timed out"
	}
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			return "not delivered: " + inner.Error()
		}
	}
	return "not delivered: " + err.Error()
}

// readKept reads up to n bytes of an answer's body, and drains (a little
// of) the rest so the connection can be reused.
func readKept(r io.Reader, n int) ([]byte, bool, error) {
	if n < 0 {
		n = 0
	}
	body, err := io.ReadAll(io.LimitReader(r, int64(n)+1))
	if err != nil {
		return nil, false, err
	}
	if len(body) > n {
		_, _ = io.CopyN(io.Discard, r, 64<<10)
		return body[:n], true, nil
	}
	return body, false, nil
}

// Bounds of the kept header fields: a target's answer cannot make the
// kept result outgrow the backend's bound (the Ack would fail, and the
// task be delivered again and again).
const (
	maxKeptValue  = 1 << 10
	maxKeptValues = 8
	maxKeptBytes  = 4 << 10
)

// keep returns the answer's kept header fields, each value cut to
// maxKeptValue bytes, at most maxKeptValues per field and maxKeptBytes in
// all.
func keep(h http.Header, extra []string) http.Header {
	out := http.Header{}
	total := 0
	for _, name := range append(slices.Clone(keptHeaders), extra...) {
		for i, v := range h.Values(name) {
			if i == maxKeptValues || total >= maxKeptBytes {
				break
			}
			if len(v) > maxKeptValue {
				v = v[:maxKeptValue]
			}
			total += len(name) + len(v)
			key := http.CanonicalHeaderKey(name)
			out[key] = append(out[key], v)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// fenceRefusal reports a status a sluice target answers a fenced request
// it refuses with (httplimit.Fence): 409 stale epoch, 400 malformed, 403
// unknown group, 428 missing. A fleet task's such answer is retried, never
// dead-lettered, whether or not the body was kept.
func fenceRefusal(status int) bool {
	switch status {
	case http.StatusConflict, http.StatusBadRequest, http.StatusForbidden, http.StatusPreconditionRequired:
		return true
	}
	return false
}

func formatCost(c float64) string { return strconv.FormatFloat(c, 'g', -1, 64) }

// summaryCounts are what a target's periodic log line summarises.
type summaryCounts struct {
	mu                      sync.Mutex
	throttled, failed, dead counted
}

type counted struct {
	n    uint64
	last string
}

func (s *summaryCounts) note(c *counted, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.n++
	c.last = reason
}

// summarise logs, at most once per every, what went wrong with the
// target's deliveries since the last line: one line, never one per error.
func (t *target) summarise(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	flush := func() {
		t.summary.mu.Lock()
		th, fa, de := t.summary.throttled, t.summary.failed, t.summary.dead
		t.summary.throttled, t.summary.failed, t.summary.dead = counted{}, counted{}, counted{}
		t.summary.mu.Unlock()
		if th.n+fa.n+de.n == 0 {
			return
		}
		t.log.Warn("relay: deliveries refused or failed", "target", t.name, "interval", every.String(),
			"throttled", th.n, "last_throttle", th.last, "failed", fa.n, "last_failure", fa.last,
			"dead_lettered", de.n, "last_dead_letter", de.last)
	}
	for {
		select {
		case <-ctx.Done():
			flush()
			return
		case <-tick.C:
			flush()
		}
	}
}
