package relay

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/egress"
	fleet "github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/queue"
)

// Request is one piece of work for a queue: the HTTP request to deliver to
// the queue's target, and how the relay is to treat it.
type Request struct {
	// Method is the HTTP method; default POST.
	Method string
	// URL is a path with an optional query ("/v1/items?page=2") or an
	// absolute URL on the target's own origin; anything else is refused
	// (egress.Origin.Resolve). Required.
	URL string
	// Header holds the request's header fields. Names the transport owns
	// (Host, framing, hop-by-hop) or that route at a proxy
	// (X-Forwarded-*, Forwarded) are refused (egress.CheckHeader), and so
	// is Idempotency-Key: the relay sets it (see Key).
	Header http.Header
	// Body is sent as is; at most the queue's MaxBody bytes.
	Body []byte
	// Key is the idempotency key: within the queue's dedup window a
	// second request with the same Key is the first one (Accepted's
	// Duplicate), and every delivery of the task carries it as
	// Idempotency-Key. Empty: the task's ID is sent instead. At most
	// queue.MaxKey bytes.
	Key string
	// Cost is what the delivery spends of the target's limit, in the
	// limit's units; 0 means 1.
	Cost float64
	// Priority from 0 (the default) to queue.MaxPriority; higher first.
	Priority int
	// NotBefore is the earliest instant of delivery; zero means now.
	NotBefore time.Time
	// Deadline, if not zero, is the instant after which the request is
	// not delivered: it is dead-lettered instead. It must be in the
	// future and after NotBefore.
	Deadline time.Time
	// MaxAttempts is how many deliveries may fail (throttled ones not
	// counted) before the request is dead-lettered; 0 means the target's
	// retry policy.
	MaxAttempts int
}

// MaxAhead bounds how far ahead a request's NotBefore and Deadline may
// be: a year and a day.
const MaxAhead = 366 * 24 * time.Hour

// MaxRefBytes is the longest path a stored request keeps (egress.MaxRef).
const MaxRefBytes = egress.MaxRef

// MaxHeaderBytes bounds the header fields of one request (names and
// values), as a server bounds what it reads.
const MaxHeaderBytes = 64 << 10

// MaxHeaderFields bounds the number of header values of one request.
const MaxHeaderFields = 100

// idempotencyHeader is the field every delivery carries.
const idempotencyHeader = "Idempotency-Key"

// stored is a request as the queue keeps it: what delivery needs. The
// target is not kept: Path (the path and query, resolved and checked on
// the origin when the task was accepted) is sent to the target's origin
// as it is at delivery.
type stored struct {
	Method string              `json:"m"`
	Path   string              `json:"p"`
	Header map[string][]string `json:"h,omitempty"`
	Body   []byte              `json:"b,omitempty"`
}

// prepare checks request i for the queue and returns the task to
// enqueue. Every refusal is a *RequestError.
func (q *lane) prepare(i int, r Request, now time.Time) (queue.Task, error) {
	fail := func(kind error, field, format string, args ...any) (queue.Task, error) {
		return queue.Task{}, &RequestError{Index: i, Field: field, Reason: fmt.Sprintf(format, args...), Kind: kind}
	}
	method := r.Method
	if method == "" {
		method = http.MethodPost
	}
	if !validMethod(method) {
		return fail(ErrInvalid, "method", "%q is not an HTTP method (letters only, at most 32)", method)
	}
	if method == http.MethodConnect || method == http.MethodTrace {
		return fail(ErrForbidden, "method", "%s is not relayed", method)
	}
	if r.URL == "" {
		return fail(ErrInvalid, "url", "required: a path on the target (\"/v1/items\") or a URL on its origin %s", q.target.origin)
	}
	u, err := q.target.origin.Resolve(r.URL)
	if err != nil {
		return fail(ErrForbidden, "url", "%s", strings.TrimPrefix(err.Error(), "egress: refused: "))
	}
	header := map[string][]string{}
	size, fields := 0, 0
	for name, values := range r.Header {
		if err := egress.CheckHeader(name); err != nil {
			return fail(ErrForbidden, "header", "%s", strings.TrimPrefix(err.Error(), "egress: refused: "))
		}
		canon := http.CanonicalHeaderKey(name)
		if http.CanonicalHeaderKey(strings.ReplaceAll(name, "_", "-")) == idempotencyHeader {
			return fail(ErrInvalid, "header", "Idempotency-Key is set by the relay: give the task's key as \"key\"")
		}
		if http.CanonicalHeaderKey(strings.ReplaceAll(name, "_", "-")) == fleet.FenceHeader {
			return fail(ErrForbidden, "header", "%s is set by the relay from the lease it spends (a fleet target): a task cannot carry one", fleet.FenceHeader)
		}
		for _, v := range values {
			if !validHeaderValue(v) {
				return fail(ErrInvalid, "header", "the value of %s holds a control character", canon)
			}
			size += len(canon) + len(v)
			fields++
		}
		header[canon] = append(header[canon], values...)
	}
	if size > MaxHeaderBytes || fields > MaxHeaderFields {
		return fail(ErrTooLarge, "header", "%d header values of %d bytes: at most %d values and %d bytes", fields, size, MaxHeaderFields, MaxHeaderBytes)
	}
	if len(r.Body) > q.maxBody {
		return fail(ErrTooLarge, "body", "%d bytes: at most %d", len(r.Body), q.maxBody)
	}
	if len(r.Key) > queue.MaxKey {
		return fail(ErrInvalid, "key", "%d bytes: at most %d", len(r.Key), queue.MaxKey)
	}
	if !validKey(r.Key) {
		return fail(ErrInvalid, "key", "only printable ASCII without spaces may travel as Idempotency-Key")
	}
	if r.Cost < 0 || math.IsNaN(r.Cost) || math.IsInf(r.Cost, 0) {
		return fail(ErrInvalid, "cost", "%v: a positive finite number (0 means 1)", r.Cost)
	}
	if r.Priority < 0 || r.Priority > queue.MaxPriority {
		return fail(ErrInvalid, "priority", "%d: from 0 to %d", r.Priority, queue.MaxPriority)
	}
	if limit := now.Add(MaxAhead); r.NotBefore.After(limit) || r.Deadline.After(limit) {
		field, at := "not_before", r.NotBefore
		if r.Deadline.After(limit) {
			field, at = "deadline", r.Deadline
		}
		return fail(ErrInvalid, field, "%s is more than %v ahead (8784h: a year and a day)", at.UTC().Format(time.RFC3339), MaxAhead)
	}
	if (method == http.MethodHead || method == http.MethodGet) && len(r.Body) > 0 {
		return fail(ErrInvalid, "body", "a %s request carries no body", method)
	}
	if !r.Deadline.IsZero() {
		if !r.Deadline.After(now) {
			return fail(ErrInvalid, "deadline", "%s is in the past", r.Deadline.UTC().Format(time.RFC3339Nano))
		}
		if !r.NotBefore.IsZero() && !r.Deadline.After(r.NotBefore) {
			return fail(ErrInvalid, "deadline", "%s is not after not_before %s", r.Deadline.UTC().Format(time.RFC3339Nano), r.NotBefore.UTC().Format(time.RFC3339Nano))
		}
	}
	if r.MaxAttempts < 0 || r.MaxAttempts > q.maxAttempts {
		return fail(ErrInvalid, "max_attempts", "%d: from 0 (the target's default) to %d", r.MaxAttempts, q.maxAttempts)
	}
	if len(header) == 0 {
		header = nil
	}
	payload, err := json.Marshal(stored{Method: method, Path: u.RequestURI(), Header: header, Body: r.Body})
	if err != nil {
		return fail(ErrInvalid, "body", "cannot be stored: %v", err)
	}
	attempts := r.MaxAttempts
	if attempts == 0 {
		attempts = q.target.config().Retry.MaxAttempts
	}
	return queue.Task{
		Key:         r.Key,
		Payload:     payload,
		Cost:        r.Cost,
		Priority:    r.Priority,
		NotBefore:   r.NotBefore,
		Deadline:    r.Deadline,
		MaxAttempts: attempts,
	}, nil
}

func validMethod(m string) bool {
	if len(m) == 0 || len(m) > 32 {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func validKey(k string) bool {
	for i := 0; i < len(k); i++ {
		if k[i] <= 0x20 || k[i] >= 0x7f {
			return false
		}
	}
	return true
}
