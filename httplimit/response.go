package httplimit

import (
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/ratelimitheader"
)

// keyOf is the store key of q for r, and false when r has none (the rule
// does not apply). Keys start with their kind, so that an IP and a header
// value that look alike never share a state.
func (m *Middleware) keyOf(r *http.Request, q *compiledQuota, req *request) (string, bool) {
	switch q.Key.Kind {
	case Global:
		return q.prefix, true
	case IP:
		if req.ipKey == "" { // found once per request: its bytes are never written again
			p, err := m.ip.Client(r)
			if err != nil {
				return "", false
			}
			if req.arena == nil {
				req.arena = new(arena)
			}
			req.ipKey = req.arena.ipKey(p)
		}
		return req.ipKey, true
	case Header:
		v := r.Header[q.header]
		if len(v) == 0 || v[0] == "" {
			return "", false
		}
		return enforce.BoundedKey(q.prefix, v[0]), true
	case Principal:
		p, ok := m.principal(r)
		if !ok || p == "" {
			return "", false
		}
		return enforce.BoundedKey(q.prefix, p), true
	}
	return "", false
}

// arena holds the strings one request makes — its IP key and the value
// of its RateLimit field, with the one-element slice the header map takes
// — in one allocation instead of three. Each string is made from its bytes
// once they are final and they are never written again, which is what
// unsafe.String asks; the strings keep the arena alive.
type arena struct {
	field [1]string
	key   [enforce.IPKeyLen]byte
	buf   [arenaField]byte
}

// arenaField is room for a RateLimit value of two or three quotas; longer
// ones are allocated apart.
const arenaField = 108

// ipKey is the key of a client prefix (enforce.PutIPKey), in the arena;
// with a nil arena it allocates its own.
func (a *arena) ipKey(p netip.Prefix) string {
	if a == nil {
		var own [enforce.IPKeyLen]byte
		enforce.PutIPKey(&own, p)
		return string(own[:])
	}
	enforce.PutIPKey(&a.key, p)
	return unsafe.String(&a.key[0], enforce.IPKeyLen)
}

// fieldValue is the RateLimit value b, built in the arena's buffer when
// it fits, as the slice the header map takes.
func (a *arena) fieldValue(b []byte) []string {
	if a == nil || len(b) > len(a.buf) || len(b) == 0 || &b[0] != &a.buf[0] {
		return []string{string(b)}
	}
	a.field[0] = unsafe.String(&a.buf[0], len(b))
	return a.field[:1:1]
}

// setFields writes the rate-limit fields of a response about ds, the
// decisions of rule's quotas, combined into c. On a rejection, a rejecting
// limit's reset (t) is when the request would fit: the same instant as
// Retry-After, so Retry-After is never earlier than it.
func (m *Middleware) setFields(h http.Header, rule *compiledRule, ds []sluice.Decision, c sluice.Decision, a *arena) {
	if m.version == ratelimitheader.Draft11 && !m.legacy {
		// The usual case, formatted straight from the decisions (what
		// ratelimitheader.FormatLimits writes, byte for byte: a test
		// checks it).
		h["Ratelimit-Policy"] = rule.policyField[:1:1]
		if a == nil {
			a = new(arena)
		}
		b := a.buf[:0]
		for i := range ds {
			b = append(b, rule.quotas[i].field...)
			b = strconv.AppendInt(b, remainingOf(&ds[i]), 10)
			if t := resetOf(&ds[i]); t >= 0 {
				b = append(b, ";t="...)
				b = strconv.AppendInt(b, int64(t/time.Second), 10)
			}
		}
		h["Ratelimit"] = a.fieldValue(b)
		return
	}
	ls := make([]ratelimitheader.Limit, len(ds))
	for i := range ds {
		ls[i] = ratelimitheader.Limit{Name: rule.quotas[i].Limit.Name, Remaining: remainingOf(&ds[i]), Reset: resetOf(&ds[i])}
	}
	if m.version == ratelimitheader.Draft06 {
		_ = ratelimitheader.Set(h, ratelimitheader.Draft06, rule.policies, ls) // rule names were checked at New
	} else {
		h["Ratelimit-Policy"] = rule.policyField[:1:1]
		v, _ := ratelimitheader.FormatLimits(ls) // rule names were checked at New
		h["Ratelimit"] = []string{v}
	}
	if m.legacy {
		i := decisive(ds, c)
		ratelimitheader.SetLegacy(h, ratelimitheader.Legacy{Limit: rule.quotas[i].q, Remaining: ls[i].Remaining, Reset: ls[i].Reset})
	}
}

// remainingOf is a decision's r: whole units, rounded down.
func remainingOf(d *sluice.Decision) int64 { return int64(math.Floor(d.Remaining)) }

// resetOf is a decision's t, in whole seconds rounded up: when the key is
// full again, or, for a rejection, when the request would fit (NoReset
// when it never will).
func resetOf(d *sluice.Decision) time.Duration {
	if d.Allowed {
		return (d.ResetAfter + time.Second - 1) / time.Second * time.Second
	}
	return retryAfter(d.RetryAfter)
}

// decisive is the index of the decision that c, the combined one, comes
// from: the rejecting one with the longest RetryAfter, or the allowed one
// with the least Remaining.
func decisive(ds []sluice.Decision, c sluice.Decision) int {
	for i := range ds {
		if ds[i].Limit.Name == c.Limit.Name {
			return i
		}
	}
	return 0
}

// retryAfter is a rejection's wait as it is written: whole seconds rounded
// up, at least 1; NoReset when the cost can never fit.
func retryAfter(d time.Duration) time.Duration {
	if d == sluice.Never {
		return ratelimitheader.NoReset
	}
	return max(time.Second, (d+time.Second-1)/time.Second*time.Second)
}

var (
	retryableBody = []byte(`{"error":"rate_limited","retryable":true}`)
	finalBody     = []byte(`{"error":"rate_limited","retryable":false}`)
	failedBody    = []byte(`{"error":"rate_limiter_unavailable","retryable":true}`)
	invalidBody   = []byte(`{"error":"invalid_cost","retryable":false}`)
	jsonType      = []string{"application/json"}
	noStore       = []string{"no-store"}
	oneSecond     = []string{"1"}
)

// writeRejection writes the 429 of decision c.
func writeRejection(w http.ResponseWriter, c sluice.Decision) {
	h := w.Header()
	h["Cache-Control"] = noStore
	h["Content-Type"] = jsonType
	body := retryableBody
	if c.RetryAfter == sluice.Never {
		body = finalBody
		delete(h, "Retry-After")
	} else {
		h["Retry-After"] = []string{ratelimitheader.FormatRetryAfter(c.RetryAfter)}
	}
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(body)
}

// writeUnavailable refuses a request whose limiter failed, under
// enforce.FailClosed.
func writeUnavailable(w http.ResponseWriter) {
	h := w.Header()
	h["Cache-Control"] = noStore
	h["Content-Type"] = jsonType
	h["Retry-After"] = oneSecond
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(failedBody)
}

// writeInvalidCost refuses a request whose cost cannot be taken: 400, not
// retryable.
func writeInvalidCost(w http.ResponseWriter) {
	h := w.Header()
	h["Cache-Control"] = noStore
	h["Content-Type"] = jsonType
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(invalidBody)
}
