// Package httplimit enforces rate limits on an http.Handler: which requests
// are counted (rules matching method and path), whose (a key: client IP,
// API key header, authenticated principal, or one global key), what they
// cost (static, computed, or charged after the response), and several
// limits per request in declared order — decided by any sluice.Limiter
// (memstore in one process, redisstore for a fleet).
//
// A rejected request gets the exact rejection contract:
//
//	HTTP/1.1 429 Too Many Requests
//	Retry-After: 5
//	Cache-Control: no-store
//	Content-Type: application/json
//	RateLimit-Policy: "per-ip";q=100;w=60
//	RateLimit: "per-ip";r=0;t=5
//
//	{"error":"rate_limited","retryable":true}
//
// Retry-After is the wait in whole seconds, rounded up, at least 1, and
// never earlier than the rejecting limits' RateLimit t (which, on a
// rejection, is when the request would fit). When the cost can never fit
// (it exceeds the limit's capacity) there is no Retry-After and retryable
// is false. Allowed responses carry RateLimit-Policy and RateLimit too
// (draft-ietf-httpapi-ratelimit-headers-11, or -06 by option, and the
// legacy X-RateLimit-* fields when asked). No response ever carries a key,
// an identity or a partition key; every branch — a known or unknown API
// key, a key seen before or not — sends the same fields, the same bytes of
// body, and makes the same one call to the limiter.
//
// With Options.Fence, a request carrying a lease fencing token
// (Sluice-Lease-Epoch, package lease) is checked before any rule: one from
// a holder whose lease was taken over (a stale epoch) is refused with 409
// Conflict and spends nothing (see Fence).
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"net/http"
	"path"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/ratelimitheader"
)

// Options configures a Middleware. Limiter and Rules are required; every
// other zero field means its documented default.
type Options struct {
	// Limiter decides. A sluice.Charger when a quota has a Charge.
	Limiter sluice.Limiter
	// Rules, tried in order; the first that applies to a request decides
	// it (see Rule).
	Rules []Rule
	// ClientIP finds the client of a request for IP keys. Default: the
	// connection's peer, no proxy trusted (clientip.New(clientip.Options{})).
	ClientIP *clientip.Resolver
	// Principal returns the authenticated identity of a request, for
	// Principal keys, and false when there is none.
	Principal func(*http.Request) (string, bool)
	// Version is the format of the RateLimit fields. Default Draft11.
	Version ratelimitheader.Version
	// Legacy adds X-RateLimit-Limit, -Remaining and -Reset, about the
	// decisive limit (the rejecting one, or the one with least remaining).
	Legacy bool
	// Observer hears every decision (metrics, heaviest tenants). Optional.
	Observer enforce.Observer
	// TenantLabel names a request's tenant for the Observer (say, an
	// account ID from the authentication context). Default: a per-process
	// pseudonym of the first quota's key (never the key itself).
	TenantLabel func(*http.Request) string
	// Fence checks the lease fencing token (lease.FenceHeader) of every
	// request before any rule, and refuses a stale epoch with 409: see
	// Fence. The zero Fence checks nothing.
	Fence Fence
}

// Middleware enforces its rules. It is safe for concurrent use.
type Middleware struct {
	limiter   sluice.Limiter
	charger   sluice.Charger
	rules     []compiledRule
	ip        *clientip.Resolver
	principal func(*http.Request) (string, bool)
	version   ratelimitheader.Version
	legacy    bool
	observer  enforce.Observer
	label     func(*http.Request) string
	seed      maphash.Seed
	fence     Fence
	sleep     func(context.Context, time.Duration) bool // tests: instead of a timer
}

// New builds a Middleware, validating every rule, quota and limit: an error
// names the rule, the quota and what is wrong.
func New(opts Options) (*Middleware, error) {
	if opts.Limiter == nil {
		return nil, errors.New("httplimit: Options.Limiter is required")
	}
	if len(opts.Rules) == 0 {
		return nil, errors.New("httplimit: no rules: at least one is required")
	}
	if opts.Version != ratelimitheader.Draft11 && opts.Version != ratelimitheader.Draft06 {
		return nil, fmt.Errorf("httplimit: unknown Version %d", opts.Version)
	}
	if err := opts.Fence.validate(); err != nil {
		return nil, err
	}
	m := &Middleware{
		limiter: opts.Limiter, ip: opts.ClientIP, principal: opts.Principal,
		version: opts.Version, legacy: opts.Legacy, observer: opts.Observer, label: opts.TenantLabel,
		seed: maphash.MakeSeed(), fence: opts.Fence,
	}
	m.charger, _ = opts.Limiter.(sluice.Charger)
	if m.ip == nil {
		ip, err := clientip.New(clientip.Options{})
		if err != nil {
			return nil, err
		}
		m.ip = ip
	}
	for _, r := range opts.Rules {
		c, err := compileRule(r, m.charger != nil, m.principal != nil)
		if err != nil {
			return nil, fmt.Errorf("httplimit: %w", err)
		}
		for _, o := range m.rules {
			if o.Name == r.Name {
				return nil, fmt.Errorf("httplimit: two rules named %q", r.Name)
			}
		}
		m.rules = append(m.rules, c)
	}
	return m, nil
}

// Handler returns next wrapped by the middleware.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
}

// request is one request's decision in the making: its rule, the key and
// cost of each of the rule's quotas, and the strings it made.
type request struct {
	enforce.Request
	rule  *compiledRule
	arena *arena // made by the first key or field that needs one
	ipKey string // the client's key, found once
	// badCost: a CostFunc returned what cannot be a cost (negative, NaN,
	// infinite): the request is refused as invalid, nothing spent.
	badCost bool
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if m.fence.Fences != nil && !m.checkFence(w, r) {
		return // a stale or malformed fence: refused before any limit is spent
	}
	var req request
	if !m.match(r, &req) {
		next.ServeHTTP(w, r)
		return
	}
	rule := req.rule
	if req.badCost {
		if m.observer != nil {
			m.observe(r, &req, enforce.Invalid, 0, nil)
		}
		writeInvalidCost(w)
		return
	}
	var start time.Time
	if m.observer != nil {
		start = time.Now()
	}
	var v enforce.Verdict
	rule.core.Decide(r.Context(), m.limiter, &req.Request, &v)
	if m.observer != nil {
		m.observe(r, &req, v.Outcome, time.Since(start), v.Err)
	}
	switch v.Outcome {
	case enforce.Invalid:
		writeInvalidCost(w)
		return
	case enforce.Failed:
		if !v.Serve { // fail_closed
			writeUnavailable(w)
			return
		}
		// fail_open: the request runs, holding whatever slot the failed
		// limiter reported taking, given back when the handler returns.
		if v.Held {
			defer m.release(r, &req, v.Decisions())
		}
		next.ServeHTTP(w, r)
		return
	case enforce.Rejected:
		m.setFields(w.Header(), rule, v.Decisions(), v.Combined(), req.arena)
		writeRejection(w, v.Combined(), v.Never)
		return
	}
	if !rule.Shadow {
		m.setFields(w.Header(), rule, v.Decisions(), v.Combined(), req.arena)
		// A leaky bucket (nginx's burst without nodelay) admits a request
		// to be served later: it waits its turn here.
		if v.Combined().Delay > 0 && !m.wait(r, v.Combined().Delay) {
			m.release(r, &req, v.Decisions()) // the client went away while waiting
			return
		}
	}
	m.serveAllowed(w, r, next, &req, &v)
}

// wait holds r for d, and false when its client went away first.
func (m *Middleware) wait(r *http.Request, d time.Duration) bool {
	if m.sleep != nil {
		return m.sleep(r.Context(), d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// match finds the rule for r, and its keys and costs. Rules match the
// cleaned path ("/x/../api/" is "/api/"), as the upstream will read it.
func (m *Middleware) match(r *http.Request, req *request) bool {
	urlPath := cleanPath(r.URL.Path)
rules:
	for i := range m.rules {
		rule := &m.rules[i]
		if !rule.methods.match(r.Method) || !rule.path.match(urlPath) {
			continue
		}
		for j := range rule.Quotas {
			q := &rule.Quotas[j]
			k, ok := m.keyOf(r, rule, j, req)
			if !ok {
				continue rules
			}
			cost := q.Cost
			if q.CostFunc != nil {
				if c := q.CostFunc(r); c != 0 {
					cost = c
					if !(c > 0) || math.IsInf(c, 0) {
						req.badCost = true // negative, NaN, infinite: the request cannot be costed
					}
				}
			}
			if cost == 0 {
				cost = 1
			}
			req.Keys[j], req.Costs[j] = k, cost
		}
		req.rule = rule
		return true
	}
	return false
}

// isClean reports whether p, which starts with "/", has no "//" and no
// "/." (the only places a "." or ".." segment or an empty one can be).
func isClean(p string) bool {
	for i := 0; i < len(p)-1; i++ {
		if p[i] == '/' && (p[i+1] == '/' || p[i+1] == '.') {
			return false
		}
	}
	return true
}

// cleanPath is p with "." and ".." segments resolved and repeated slashes
// collapsed, keeping a trailing slash (as http.ServeMux cleans before it
// matches); p itself when it is already clean, without allocating.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] == '/' && isClean(p) {
		return p
	}
	c := path.Clean("/" + p)
	if p[len(p)-1] == '/' && c != "/" {
		c += "/"
	}
	return c
}

// serveAllowed runs next, then charges what the response used and releases
// the concurrency slots the request held. Both use a context that outlives
// a client that went away: a slot not released is held until its window
// ends.
func (m *Middleware) serveAllowed(w http.ResponseWriter, r *http.Request, next http.Handler, req *request, v *enforce.Verdict) {
	rule := req.rule
	if v.Held {
		defer m.release(r, req, v.Decisions()) // also when the handler panics
	}
	if !rule.charges {
		next.ServeHTTP(w, r)
		return
	}
	ctx := context.WithoutCancel(r.Context())
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	next.ServeHTTP(rec, r)
	for i := range rule.Quotas {
		q := &rule.Quotas[i]
		if q.Charge == nil {
			continue
		}
		if cost := q.Charge(r, rec.status, w.Header()); cost > 0 {
			_, _ = m.charger.Charge(ctx, req.Keys[i], q.Limit, cost) // the response is sent: nothing to tell the client
		}
	}
}

// release gives back the concurrency slots of ds (enforce.CompiledRule.Release).
func (m *Middleware) release(r *http.Request, req *request, ds []sluice.Decision) {
	req.rule.core.Release(r.Context(), m.limiter, &req.Request, ds)
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wrote && code >= 200 { // an informational 1xx is not the answer
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer (Flush,
// Hijack, deadlines).
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (m *Middleware) observe(r *http.Request, req *request, o enforce.Outcome, latency time.Duration, err error) {
	e := enforce.Event{Rule: req.rule.Name, Outcome: o, Latency: latency, Cost: req.Costs[0]}
	if o == enforce.Failed {
		e.Err = err
	}
	if m.label != nil {
		e.Tenant = m.label(r)
	} else {
		e.Tenant = enforce.Pseudonym(m.seed, req.rule.Quotas[0].Key.Kind.String(), req.Keys[0])
	}
	m.observer.Observe(e)
}
