package httplimit

import (
	"net/http"
	"net/netip"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/ratelimitheader"
)

// keyOf is the store key of rule's quota j for r, and false when r has
// none (the rule does not apply). Keys start with their kind, so that an IP
// and a header value that look alike never share a state.
func (m *Middleware) keyOf(r *http.Request, rule *compiledRule, j int, req *request) (string, bool) {
	prefix := rule.core.Quotas[j].KeyPrefix
	switch rule.Quotas[j].Key.Kind {
	case Global:
		return prefix, true
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
		v := r.Header[rule.headers[j]]
		if len(v) == 0 || v[0] == "" {
			return "", false
		}
		return enforce.BoundedKey(prefix, v[0]), true
	case Principal:
		p, ok := m.principal(r)
		if !ok || p == "" {
			return "", false
		}
		return enforce.BoundedKey(prefix, p), true
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
func (m *Middleware) setFields(h http.Header, rule *compiledRule, ds []sluice.Decision, c *sluice.Decision, a *arena) {
	if m.version == ratelimitheader.Draft11 && !m.legacy {
		// The usual case: the rule's precompiled RateLimit members,
		// written in the arena.
		h["Ratelimit-Policy"] = rule.policyField[:1:1]
		if a == nil {
			a = new(arena)
		}
		h["Ratelimit"] = a.fieldValue(rule.core.AppendLimits(a.buf[:0], ds))
		return
	}
	ls := rule.core.Limits(ds)
	if m.version == ratelimitheader.Draft06 {
		_ = ratelimitheader.Set(h, ratelimitheader.Draft06, rule.core.Policies, ls) // rule names were checked at New
	} else {
		h["Ratelimit-Policy"] = rule.policyField[:1:1]
		v, _ := ratelimitheader.FormatLimits(ls) // rule names were checked at New
		h["Ratelimit"] = []string{v}
	}
	if m.legacy {
		i := decisive(ds, c)
		ratelimitheader.SetLegacy(h, ratelimitheader.Legacy{Limit: rule.core.Policies[i].Quota, Remaining: ls[i].Remaining, Reset: ls[i].Reset})
	}
}

// decisive is the index of the decision that c, the combined one, comes
// from: the rejecting one with the longest RetryAfter, or the allowed one
// with the least Remaining.
func decisive(ds []sluice.Decision, c *sluice.Decision) int {
	for i := range ds {
		if ds[i].Limit.Name == c.Limit.Name {
			return i
		}
	}
	return 0
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

// writeRejection writes the 429 of decision c, final when its cost can
// never fit.
func writeRejection(w http.ResponseWriter, c *sluice.Decision, never bool) {
	if never {
		writeRefusal(w, http.StatusTooManyRequests, finalBody, nil)
		return
	}
	writeRefusal(w, http.StatusTooManyRequests, retryableBody, []string{ratelimitheader.FormatRetryAfter(c.RetryAfter)})
}

// writeUnavailable refuses a request whose limiter failed, under
// sluice.FailClosed.
func writeUnavailable(w http.ResponseWriter) {
	writeRefusal(w, http.StatusServiceUnavailable, failedBody, oneSecond)
}

// writeInvalidCost refuses a request whose cost cannot be taken: 400, not
// retryable.
func writeInvalidCost(w http.ResponseWriter) {
	writeRefusal(w, http.StatusBadRequest, invalidBody, nil)
}

// writeRefusal writes a refused request's response: status, the JSON
// body, no caching, and Retry-After when retryAfter is not nil.
func writeRefusal(w http.ResponseWriter, status int, body []byte, retryAfter []string) {
	h := w.Header()
	h["Cache-Control"] = noStore
	h["Content-Type"] = jsonType
	if retryAfter != nil {
		h["Retry-After"] = retryAfter
	} else {
		delete(h, "Retry-After")
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
