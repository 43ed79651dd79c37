package httplimit_test

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/clientip"
	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/limittest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/ratelimitheader"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counting is a real store that counts the calls made to it.
type counting struct {
	*memstore.Store
	calls atomic.Int64
}

func (c *counting) Allow(ctx context.Context, key string, l sluice.Limit, cost float64) (sluice.Decision, error) {
	c.calls.Add(1)
	return c.Store.Allow(ctx, key, l, cost)
}

func (c *counting) AllowAll(ctx context.Context, reqs []sluice.Request, mode sluice.Mode, each []sluice.Decision) (sluice.Decision, error) {
	c.calls.Add(1)
	return c.Store.AllowAll(ctx, reqs, mode, each)
}

// fixture is a middleware over a memstore on a fake clock, in front of a
// handler that answers 200 "ok".
type fixture struct {
	t       *testing.T
	clock   *limittest.Clock
	store   *counting
	mw      *httplimit.Middleware
	handler http.Handler
	served  atomic.Int64
}

func newFixture(t *testing.T, opts httplimit.Options, next http.Handler) *fixture {
	t.Helper()
	f := &fixture{t: t, clock: limittest.NewClock(limittest.Epoch)}
	ms, err := memstore.New(memstore.Options{Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	f.store = &counting{Store: ms}
	if opts.Limiter == nil {
		opts.Limiter = f.store
	}
	if next == nil {
		next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	}
	mw, err := httplimit.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f.mw = mw
	f.handler = mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.served.Add(1)
		next.ServeHTTP(w, r)
	}))
	return f
}

// do sends a request from peer with the given headers and returns the
// response.
func (f *fixture) do(method, path, peer string, header ...string) *http.Response {
	f.t.Helper()
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = peer
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	f.handler.ServeHTTP(w, r)
	return w.Result()
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const peer = "203.0.113.7:4711"

var perIP = sluice.Limit{Name: "per-ip", Quota: 2, Window: time.Minute}

// The rejection contract, byte for byte: status, every field, the body;
// and the fields of the allowed responses before it.
func TestRejectionContract(t *testing.T) {
	t.Parallel()
	f := newFixture(t, httplimit.Options{Rules: []httplimit.Rule{{Name: "ip", Quotas: []httplimit.Quota{{Limit: perIP, Key: httplimit.Key{Kind: httplimit.IP}}}}}}, nil)
	for i, want := range []string{`"per-ip";r=1;t=30`, `"per-ip";r=0;t=60`} {
		r := f.do("GET", "/x", peer)
		if r.StatusCode != 200 || r.Header.Get("RateLimit") != want || r.Header.Get("RateLimit-Policy") != `"per-ip";q=2;w=60` || body(t, r) != "ok" {
			t.Fatalf("request %d: %d %v", i, r.StatusCode, r.Header)
		}
	}
	f.clock.Add(10 * time.Second) // a token every 30 s: the next in 20 s
	r := f.do("GET", "/x", peer)
	want := http.Header{
		"Retry-After":      {"20"},
		"Cache-Control":    {"no-store"},
		"Content-Type":     {"application/json"},
		"Ratelimit-Policy": {`"per-ip";q=2;w=60`},
		"Ratelimit":        {`"per-ip";r=0;t=20`},
	}
	if r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", r.StatusCode)
	}
	for k, v := range want {
		if !slices.Equal(r.Header[k], v) {
			t.Errorf("%s: %q, want %q", k, r.Header[k], v)
		}
	}
	if len(r.Header) != len(want) {
		t.Errorf("fields %v, want exactly %v", r.Header, want)
	}
	if b := body(t, r); b != `{"error":"rate_limited","retryable":true}` {
		t.Errorf("body %q", b)
	}
	if n := f.served.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2", n)
	}
}

// Retry-After rounds up, is at least 1, and is never earlier than the t of
// any rejecting limit; a cost that can never fit has no Retry-After and is
// not retryable.
func TestRetryAfterRounding(t *testing.T) {
	t.Parallel()
	fast := sluice.Limit{Name: "fast", Quota: 10, Window: time.Second, Burst: 1} // a token every 100 ms
	slow := sluice.Limit{Name: "slow", Quota: 1, Window: 90 * time.Second}
	f := newFixture(t, httplimit.Options{Rules: []httplimit.Rule{{Name: "both", Quotas: []httplimit.Quota{
		{Limit: fast, Key: httplimit.Key{Kind: httplimit.Global}},
		{Limit: slow, Key: httplimit.Key{Kind: httplimit.IP}},
	}}}}, nil)
	if r := f.do("GET", "/", peer); r.StatusCode != 200 {
		t.Fatalf("first: %d", r.StatusCode)
	}
	f.clock.Add(50 * time.Millisecond)
	r := f.do("GET", "/", peer) // fast waits 50 ms (→ 1 s), slow 89.95 s (→ 90 s)
	if r.StatusCode != 429 || r.Header.Get("Retry-After") != "90" {
		t.Fatalf("%d, Retry-After %q; want 429, 90", r.StatusCode, r.Header.Get("Retry-After"))
	}
	limits, _ := ratelimitheader.ParseLimits(r.Header["Ratelimit"])
	for _, l := range limits {
		if l.Reset > 90*time.Second {
			t.Errorf("%s: t %v beyond Retry-After 90 s", l.Name, l.Reset)
		}
	}
	if got := limits[0]; got.Name != "fast" || got.Reset != time.Second {
		t.Errorf("fast: %+v, want t=1 (50 ms rounded up)", got)
	}

	// A cost computed per request can exceed the capacity (a static one
	// is refused by New).
	never := newFixture(t, httplimit.Options{Rules: []httplimit.Rule{{Name: "big", Quotas: []httplimit.Quota{
		{Limit: perIP, Key: httplimit.Key{Kind: httplimit.IP}, CostFunc: func(*http.Request) float64 { return 3 }},
	}}}}, nil)
	r = never.do("GET", "/", peer)
	if r.StatusCode != 429 || r.Header.Get("Retry-After") != "" || body(t, r) != `{"error":"rate_limited","retryable":false}` {
		t.Fatalf("cost 3 of 2: %d, Retry-After %q", r.StatusCode, r.Header.Get("Retry-After"))
	}
	if rl := r.Header.Get("RateLimit"); rl != `"per-ip";r=2` {
		t.Errorf("RateLimit %q, want no t for a cost that never fits", rl)
	}
}

// Rules apply in order, the first whose match and keys fit: an API key
// rule for clients that send one, an IP rule for the anonymous, nothing
// for paths no rule covers.
func TestRuleOrderAndKeys(t *testing.T) {
	t.Parallel()
	perKey := sluice.Limit{Name: "per-key", Quota: 1, Window: time.Hour}
	anon := sluice.Limit{Name: "anon", Quota: 1, Window: time.Hour}
	writes := sluice.Limit{Name: "writes", Quota: 1, Window: time.Hour}
	f := newFixture(t, httplimit.Options{
		Principal: func(r *http.Request) (string, bool) {
			u := r.Header.Get("X-User") // an authentication layer's result
			return u, u != ""
		},
		Rules: []httplimit.Rule{
			{Name: "writes", Match: httplimit.Match{Methods: []string{"POST"}, Path: "/api/"}, Quotas: []httplimit.Quota{{Limit: writes, Key: httplimit.Key{Kind: httplimit.Principal}}}},
			{Name: "keyed", Match: httplimit.Match{Path: "/api/"}, Quotas: []httplimit.Quota{{Limit: perKey, Key: httplimit.Key{Kind: httplimit.Header, Header: "x-api-key"}}}},
			{Name: "anonymous", Match: httplimit.Match{Path: "/api/"}, Quotas: []httplimit.Quota{{Limit: anon, Key: httplimit.Key{Kind: httplimit.IP}}}},
		},
	}, nil)
	for i, c := range []struct {
		method, path, peer string
		header             []string
		status             int
		policy             string // the limit that applies, "" for none
	}{
		{"GET", "/api/a", peer, []string{"X-Api-Key", "k1"}, 200, "per-key"},
		{"GET", "/api/b", peer, []string{"X-Api-Key", "k1"}, 429, "per-key"},
		{"GET", "/api/a", peer, []string{"X-Api-Key", "k2"}, 200, "per-key"}, // another key
		{"GET", "/api/a", peer, nil, 200, "anon"},                            // no key: by IP
		{"GET", "/api/a", peer, nil, 429, "anon"},
		{"GET", "/api/a", "203.0.113.8:1", nil, 200, "anon"}, // another IP
		{"GET", "/api/a", peer, []string{"X-Api-Key", ""}, 429, "anon"},
		{"POST", "/api/a", peer, []string{"X-User", "ana"}, 200, "writes"},
		{"POST", "/api/a", peer, []string{"X-User", "ana"}, 429, "writes"},
		{"POST", "/api/a", peer, []string{"X-Api-Key", "k3"}, 200, "per-key"}, // no principal: the next rule
		{"HEAD", "/health", peer, nil, 200, ""},                               // no rule
		{"GET", "/apix", peer, nil, 200, ""},
	} {
		r := f.do(c.method, c.path, c.peer, c.header...)
		policy := ""
		if ps, _ := ratelimitheader.ParsePolicies(r.Header["Ratelimit-Policy"]); len(ps) > 0 {
			policy = ps[0].Name
		}
		if r.StatusCode != c.status || policy != c.policy {
			t.Errorf("request %d (%s %s %v): %d under %q, want %d under %q", i, c.method, c.path, c.header, r.StatusCode, policy, c.status, c.policy)
		}
	}
}

// Several limits in declared order: all or nothing by default (a
// rejection spends nothing), rejections count when asked.
func TestModes(t *testing.T) {
	t.Parallel()
	for _, mode := range []sluice.Mode{sluice.AllOrNothing, sluice.RejectionsCount} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			user := sluice.Limit{Name: "user", Quota: 5, Window: time.Hour}
			global := sluice.Limit{Name: "global", Quota: 1, Window: time.Hour}
			f := newFixture(t, httplimit.Options{Rules: []httplimit.Rule{{Name: "r", Mode: mode, Quotas: []httplimit.Quota{
				{Limit: user, Key: httplimit.Key{Kind: httplimit.Header, Header: "X-User"}},
				{Limit: global, Key: httplimit.Key{Kind: httplimit.Global}},
			}}}}, nil)
			f.do("GET", "/", peer, "X-User", "a")
			for range 2 {
				if r := f.do("GET", "/", peer, "X-User", "a"); r.StatusCode != 429 {
					t.Fatalf("global spent: %d", r.StatusCode)
				}
			}
			d, _ := f.store.Store.Allow(context.Background(), "h:X-User:a", user, 1)
			want := 3.0 // 5 − 1 − this one
			if mode == sluice.RejectionsCount {
				want = 1 // the two rejected requests spent too
			}
			if d.Remaining != want {
				t.Fatalf("user has %v left, want %v", d.Remaining, want)
			}
		})
	}
}

// Costs: static, computed per request, and charged after the response (a
// debt the next requests wait out).
func TestCosts(t *testing.T) {
	t.Parallel()
	tokens := sluice.Limit{Name: "tokens", Quota: 100, Window: 100 * time.Second} // 1 per second
	f := newFixture(t, httplimit.Options{Rules: []httplimit.Rule{
		{Name: "static", Match: httplimit.Match{Path: "/static"}, Quotas: []httplimit.Quota{{Limit: tokens, Key: httplimit.Key{Kind: httplimit.Global}, Cost: 10}}},
		{Name: "computed", Match: httplimit.Match{Path: "/batch"}, Quotas: []httplimit.Quota{{Limit: tokens, Key: httplimit.Key{Kind: httplimit.Global},
			CostFunc: func(r *http.Request) float64 { n, _ := strconv.Atoi(r.URL.Query().Get("n")); return float64(n) }}}},
		{Name: "charged", Match: httplimit.Match{Path: "/answer"}, Quotas: []httplimit.Quota{{Limit: tokens, Key: httplimit.Key{Kind: httplimit.Global},
			Charge: func(r *http.Request, status int, h http.Header) float64 {
				if status != 200 {
					return 0
				}
				n, _ := strconv.ParseFloat(h.Get("X-Tokens-Used"), 64)
				return n
			}}}},
	}}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Tokens-Used", "150") // what answering cost
		io.WriteString(w, "ok")
	}))
	remaining := func(r *http.Response) string { return r.Header.Get("RateLimit") }
	if r := f.do("GET", "/static", peer); remaining(r) != `"tokens";r=90;t=10` {
		t.Fatalf("static: %s", remaining(r))
	}
	if r := f.do("GET", "/batch?n=30", peer); remaining(r) != `"tokens";r=60;t=40` {
		t.Fatalf("computed: %s", remaining(r))
	}
	if r := f.do("GET", "/answer", peer); r.StatusCode != 200 || remaining(r) != `"tokens";r=59;t=41` {
		t.Fatalf("charged, before the charge: %d %s", r.StatusCode, remaining(r))
	}
	// 59 − 150 = −91: a debt of 91, paid at 1 per second.
	r := f.do("GET", "/static", peer)
	if r.StatusCode != 429 || r.Header.Get("Retry-After") != "101" {
		t.Fatalf("after the charge: %d, Retry-After %q; want 429 after (91 + 10) s", r.StatusCode, r.Header.Get("Retry-After"))
	}
}

// Shadow mode decides and counts, never rejects, and says nothing to the
// client.
func TestShadow(t *testing.T) {
	t.Parallel()
	var obs recorder
	f := newFixture(t, httplimit.Options{Observer: &obs, Rules: []httplimit.Rule{{Name: "trial", Shadow: true, Quotas: []httplimit.Quota{{Limit: perIP, Key: httplimit.Key{Kind: httplimit.IP}}}}}}, nil)
	for range 5 {
		if r := f.do("GET", "/", peer); r.StatusCode != 200 || r.Header.Get("RateLimit") != "" || r.Header.Get("Retry-After") != "" {
			t.Fatalf("shadow: %d %v", r.StatusCode, r.Header)
		}
	}
	if got := obs.outcomes(); !slices.Equal(got, []enforce.Outcome{enforce.Allowed, enforce.Allowed, enforce.ShadowRejected, enforce.ShadowRejected, enforce.ShadowRejected}) {
		t.Fatalf("outcomes %v", got)
	}
}

// recorder is an Observer that keeps the events.
type recorder struct {
	mu     sync.Mutex
	events []enforce.Event
}

func (r *recorder) Observe(e enforce.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) outcomes() []enforce.Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []enforce.Outcome
	for _, e := range r.events {
		out = append(out, e.Outcome)
	}
	return out
}

// failing is a Limiter whose every call fails: a store answering garbage
// (or, with err set, answering d and err: a decision only its error
// qualifies).
type failing struct {
	sluice.Limiter
	d   sluice.Decision
	err error
}

var errGarbage = errors.New("store: unexpected reply")

func (f failing) Allow(context.Context, string, sluice.Limit, float64) (sluice.Decision, error) {
	return f.d, cmp.Or(f.err, errGarbage)
}

// A limiter that fails: the rule's OnError lets the request through or
// refuses it with 503, and the Observer hears the error.
func TestOnError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		policy sluice.FailurePolicy
		status int
	}{{sluice.FailOpen, 200}, {sluice.FailClosed, 503}} {
		var obs recorder
		f := newFixture(t, httplimit.Options{Limiter: failing{}, Observer: &obs, Rules: []httplimit.Rule{{Name: "r", OnError: c.policy, Quotas: []httplimit.Quota{{Limit: perIP, Key: httplimit.Key{Kind: httplimit.IP}}}}}}, nil)
		r := f.do("GET", "/", peer)
		if r.StatusCode != c.status {
			t.Errorf("%v: status %d, want %d", c.policy, r.StatusCode, c.status)
		}
		if c.status == 503 && (r.Header.Get("Retry-After") != "1" || body(t, r) != `{"error":"rate_limiter_unavailable","retryable":true}`) {
			t.Errorf("%v: %v", c.policy, r.Header)
		}
		if len(obs.events) != 1 || obs.events[0].Outcome != enforce.Failed || !errors.Is(obs.events[0].Err, errGarbage) {
			t.Errorf("%v: events %+v", c.policy, obs.events)
		}
	}
}

// A concurrency quota holds its slot while the handler runs and frees it
// after, even when the client has gone.
func TestConcurrencyQuota(t *testing.T) {
	t.Parallel()
	// A window shorter than a second: the policy's q is the number of
	// slots, not a rate per second.
	slots := sluice.Limit{Name: "slots", Algorithm: sluice.Concurrency, Quota: 1, Window: 400 * time.Millisecond}
	entered, release := make(chan struct{}), make(chan struct{})
	f := newFixture(t, httplimit.Options{Rules: []httplimit.Rule{{Name: "slots", Quotas: []httplimit.Quota{{Limit: slots, Key: httplimit.Key{Kind: httplimit.Global}}}}}},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				entered <- struct{}{}
				<-release
			}
		}))
	done := make(chan *http.Response)
	go func() { done <- f.do("GET", "/slow", peer) }()
	<-entered
	if r := f.do("GET", "/fast", peer); r.StatusCode != 429 {
		t.Fatalf("a second request while the slot is held: %d", r.StatusCode)
	}
	if p := f.do("GET", "/fast", peer).Header.Get("RateLimit-Policy"); p != `"slots";q=1;qu="concurrent-requests"` {
		t.Errorf("policy %q", p)
	}
	close(release)
	if r := <-done; r.StatusCode != 200 {
		t.Fatalf("the slow request: %d", r.StatusCode)
	}
	if r := f.do("GET", "/fast", peer); r.StatusCode != 200 {
		t.Fatalf("after the slot was released: %d", r.StatusCode)
	}
}

// Every branch looks the same from outside: a known or an unknown key, a
// hot key or a cold one, get the same fields, the same body bytes and the
// same single call to the store.
func TestNoIdentityLeak(t *testing.T) {
	t.Parallel()
	perKey := sluice.Limit{Name: "per-key", Quota: 3, Window: time.Hour}
	f := newFixture(t, httplimit.Options{Rules: []httplimit.Rule{{Name: "k", Quotas: []httplimit.Quota{{Limit: perKey, Key: httplimit.Key{Kind: httplimit.Header, Header: "X-Api-Key"}}}}}}, nil)
	f.do("GET", "/", peer, "X-Api-Key", "hot")
	f.do("GET", "/", peer, "X-Api-Key", "hot") // hot: seen before
	type shape struct {
		fields []string
		body   string
		calls  int64
	}
	look := func(key string) shape {
		before := f.store.calls.Load()
		r := f.do("GET", "/", peer, "X-Api-Key", key)
		var fields []string
		for k := range r.Header {
			fields = append(fields, k)
		}
		slices.Sort(fields)
		return shape{fields, body(t, r), f.store.calls.Load() - before}
	}
	hot, cold := look("hot"), look("never-seen-"+strconv.Itoa(int(time.Now().UnixNano())))
	if !slices.Equal(hot.fields, cold.fields) || hot.body != cold.body || hot.calls != 1 || cold.calls != 1 {
		t.Fatalf("hot %+v, cold %+v", hot, cold)
	}
	for _, v := range f.do("GET", "/", peer, "X-Api-Key", "secret-key-123").Header {
		for _, s := range v {
			if strings.Contains(s, "secret-key-123") || len(s) > 100 {
				t.Fatalf("a response field carries %q", s)
			}
		}
	}
}

// The client IP goes through clientip: a trusted proxy's X-Forwarded-For
// is read, and IPv6 clients of one /64 share a key.
func TestClientIP(t *testing.T) {
	t.Parallel()
	trusted, _ := clientip.ParseTrusted([]string{"10.0.0.0/8"})
	ip, err := clientip.New(clientip.Options{TrustedProxies: trusted})
	if err != nil {
		t.Fatal(err)
	}
	one := sluice.Limit{Name: "one", Quota: 1, Window: time.Hour}
	f := newFixture(t, httplimit.Options{ClientIP: ip, Rules: []httplimit.Rule{{Name: "ip", Quotas: []httplimit.Quota{{Limit: one, Key: httplimit.Key{Kind: httplimit.IP}}}}}}, nil)
	for i, c := range []struct {
		peer, xff string
		status    int
	}{
		{"10.1.1.1:1", "198.51.100.1", 200},
		{"10.2.2.2:1", "198.51.100.1", 429},   // the same client through another proxy
		{"198.51.100.9:1", "10.0.0.1", 200},   // untrusted peer: its header is ignored
		{"198.51.100.9:2", "192.0.2.55", 429}, // the same peer, spoofing
		{"[2001:db8:1:2::1]:1", "", 200},
		{"[2001:db8:1:2:ffff::9]:1", "", 429}, // the same /64
	} {
		var h []string
		if c.xff != "" {
			h = []string{"X-Forwarded-For", c.xff}
		}
		if r := f.do("GET", "/", c.peer, h...); r.StatusCode != c.status {
			t.Errorf("request %d (%s, %q): %d, want %d", i, c.peer, c.xff, r.StatusCode, c.status)
		}
	}
}

// Draft -06 and the legacy fields, by option.
func TestFieldVersions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, httplimit.Options{Version: ratelimitheader.Draft06, Legacy: true, Rules: []httplimit.Rule{{Name: "ip", Quotas: []httplimit.Quota{{Limit: perIP, Key: httplimit.Key{Kind: httplimit.IP}}}}}}, nil)
	r := f.do("GET", "/", peer)
	for k, v := range map[string]string{
		"RateLimit-Limit": "2", "RateLimit-Remaining": "1", "RateLimit-Reset": "30",
		"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "30",
	} {
		if got := r.Header.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	if r.Header.Get("RateLimit") != "" {
		t.Errorf("a draft -11 field in a draft -06 response: %v", r.Header)
	}
}

// A bad configuration is refused at New, saying which rule and why.
func TestNewRefusesBadRules(t *testing.T) {
	t.Parallel()
	ms, _ := memstore.New(memstore.Options{})
	defer ms.Close()
	ok := httplimit.Quota{Limit: perIP, Key: httplimit.Key{Kind: httplimit.IP}}
	for _, c := range []struct {
		name  string
		opts  httplimit.Options
		wants string
	}{
		{"no limiter", httplimit.Options{Rules: []httplimit.Rule{{Name: "r", Quotas: []httplimit.Quota{ok}}}}, "Limiter is required"},
		{"no rules", httplimit.Options{Limiter: ms}, "no rules"},
		{"unnamed", httplimit.Options{Limiter: ms, Rules: []httplimit.Rule{{Quotas: []httplimit.Quota{ok}}}}, "name"},
		{"twice", httplimit.Options{Limiter: ms, Rules: []httplimit.Rule{{Name: "r", Quotas: []httplimit.Quota{ok}}, {Name: "r", Quotas: []httplimit.Quota{ok}}}}, "two rules"},
		{"no quotas", httplimit.Options{Limiter: ms, Rules: []httplimit.Rule{{Name: "r"}}}, "1 to 8 limits"},
		{"fail_local", httplimit.Options{Limiter: ms, Rules: []httplimit.Rule{{Name: "r", OnError: sluice.FailLocal, Quotas: []httplimit.Quota{ok}}}}, `rule "r": OnError fail_local: a middleware has no local fallback; use fail_open or fail_closed`},
		{"bad OnError", httplimit.Options{Limiter: ms, Rules: []httplimit.Rule{{Name: "r", OnError: 9, Quotas: []httplimit.Quota{ok}}}}, "unknown OnError 9"},
		{"bad path", httplimit.Options{Limiter: ms, Rules: []httplimit.Rule{{Name: "r", Match: httplimit.Match{Path: "api"}, Quotas: []httplimit.Quota{ok}}}}, "must start with /"},
		{"bad limit", httplimit.Options{Limiter: ms, Rules: []httplimit.Rule{{Name: "r", Quotas: []httplimit.Quota{{Limit: sluice.Limit{Name: "x", Quota: -1, Window: time.Second}}}}}}, "quota"},
		{"no header", httplimit.Options{Limiter: ms, Rules: []httplimit.Rule{{Name: "r", Quotas: []httplimit.Quota{{Limit: perIP, Key: httplimit.Key{Kind: httplimit.Header}}}}}}, "Key.Header"},
		{"no principal", httplimit.Options{Limiter: ms, Rules: []httplimit.Rule{{Name: "r", Quotas: []httplimit.Quota{{Limit: perIP, Key: httplimit.Key{Kind: httplimit.Principal}}}}}}, "Options.Principal"},
		{"same limit twice", httplimit.Options{Limiter: ms, Rules: []httplimit.Rule{{Name: "r", Quotas: []httplimit.Quota{ok, ok}}}}, "used twice"},
		{"bad cost", httplimit.Options{Limiter: ms, Rules: []httplimit.Rule{{Name: "r", Quotas: []httplimit.Quota{{Limit: perIP, Cost: -2}}}}}, "cost"},
		{"cost above capacity", httplimit.Options{Limiter: ms, Rules: []httplimit.Rule{{Name: "r", Quotas: []httplimit.Quota{{Limit: perIP, Cost: 3}}}}}, "cost 3 exceeds the limit's capacity 2"},
		{"bad header name", httplimit.Options{Limiter: ms, Rules: []httplimit.Rule{{Name: "r", Quotas: []httplimit.Quota{{Limit: perIP, Key: httplimit.Key{Kind: httplimit.Header, Header: "X Api Key"}}}}}}, `header "X Api Key": not a header name`},
		{"charge on a log", httplimit.Options{Limiter: ms, Rules: []httplimit.Rule{{Name: "r", Quotas: []httplimit.Quota{{Limit: sluice.Limit{Name: "log", Algorithm: sluice.SlidingLog, Quota: 5, Window: time.Second},
			Charge: func(*http.Request, int, http.Header) float64 { return 1 }}}}}}, "cannot be charged"},
		{"charge without a charger", httplimit.Options{Limiter: failing{}, Rules: []httplimit.Rule{{Name: "r", Quotas: []httplimit.Quota{{Limit: perIP,
			Charge: func(*http.Request, int, http.Header) float64 { return 1 }}}}}}, "sluice.Charger"},
	} {
		if _, err := httplimit.New(c.opts); err == nil || !contains(err.Error(), c.wants) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.wants)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// Rules match the cleaned path: a request cannot skip its rule by
// spelling the path another way the upstream reads the same.
func TestPathIsCleanedBeforeMatching(t *testing.T) {
	t.Parallel()
	one := sluice.Limit{Name: "one", Quota: 1, Window: time.Hour}
	for _, p := range []string{"/x/../api/orders", "//api/orders", "/api/./orders", "/api//orders", "/api/orders/../items/"} {
		f := newFixture(t, httplimit.Options{Rules: []httplimit.Rule{{Name: "api", Match: httplimit.Match{Path: "/api/"},
			Quotas: []httplimit.Quota{{Limit: one, Key: httplimit.Key{Kind: httplimit.Global}}}}}}, nil)
		f.do("GET", "/api/orders", peer)
		if r := f.do("GET", p, peer); r.StatusCode != 429 {
			t.Errorf("%s after /api/orders spent the quota: %d, want 429", p, r.StatusCode)
		}
	}
	f := newFixture(t, httplimit.Options{Rules: []httplimit.Rule{{Name: "api", Match: httplimit.Match{Path: "/api/"},
		Quotas: []httplimit.Quota{{Limit: one, Key: httplimit.Key{Kind: httplimit.Global}}}}}}, nil)
	for range 3 {
		if r := f.do("GET", "/api/../health", peer); r.StatusCode != 200 {
			t.Fatalf("/api/../health is /health, not limited: %d", r.StatusCode)
		}
	}
}

// A leaky bucket admits requests to be served later (nginx's burst
// without nodelay): the middleware holds each for its Delay.
func TestLeakyBucketDelays(t *testing.T) {
	t.Parallel()
	queue := sluice.Limit{Name: "queue", Algorithm: sluice.LeakyBucket, Quota: 10, Window: time.Second, Burst: 3} // one every 100 ms, 3 at most in the queue
	f := newFixture(t, httplimit.Options{Rules: []httplimit.Rule{{Name: "q", Quotas: []httplimit.Quota{{Limit: queue, Key: httplimit.Key{Kind: httplimit.Global}}}}}}, nil)
	var waited []time.Duration
	httplimit.SetSleep(f.mw, func(_ context.Context, d time.Duration) bool { waited = append(waited, d); return true })
	var codes []int
	for range 5 {
		codes = append(codes, f.do("GET", "/", peer).StatusCode)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}
	if !slices.Equal(codes, []int{200, 200, 200, 429, 429}) || !slices.Equal(waited, want) {
		t.Fatalf("codes %v, waits %v; want 3 served (the last two delayed %v) and the rest refused", codes, waited, want)
	}
	if f.served.Load() != 3 {
		t.Fatalf("%d served", f.served.Load())
	}
	// A client that goes away while waiting is not served.
	f.clock.Add(time.Second)
	httplimit.SetSleep(f.mw, func(context.Context, time.Duration) bool { return false })
	f.do("GET", "/", peer)
	f.do("GET", "/", peer) // delayed: its client is gone
	if f.served.Load() != 4 {
		t.Fatalf("%d served, want 4: the abandoned request must not run", f.served.Load())
	}
}

// A cost that cannot be taken is the client's error: 400, nothing spent,
// not a limiter failure (which FailOpen would let through).
func TestInvalidCost(t *testing.T) {
	t.Parallel()
	obs := &recorder{}
	one := sluice.Limit{Name: "one", Quota: 1, Window: time.Hour}
	f := newFixture(t, httplimit.Options{Observer: obs, Rules: []httplimit.Rule{{Name: "r", Quotas: []httplimit.Quota{{Limit: one, Key: httplimit.Key{Kind: httplimit.Global},
		CostFunc: func(r *http.Request) float64 { return float64(r.ContentLength) }}}}}}, nil)
	for _, n := range []int64{-1, -1} {
		r := httptest.NewRequest("POST", "/", nil)
		r.ContentLength = n // a chunked body
		w := httptest.NewRecorder()
		f.handler.ServeHTTP(w, r)
		if w.Code != 400 || w.Body.String() != `{"error":"invalid_cost","retryable":false}` || w.Header().Get("Retry-After") != "" {
			t.Fatalf("cost -1: %d %q", w.Code, w.Body.String())
		}
	}
	tiny := newFixture(t, httplimit.Options{Rules: []httplimit.Rule{{Name: "r", Quotas: []httplimit.Quota{{Limit: one, Key: httplimit.Key{Kind: httplimit.Global},
		CostFunc: func(*http.Request) float64 { return 1e-9 }}}}}}, nil)
	if r := tiny.do("GET", "/", peer); r.StatusCode != 400 {
		t.Fatalf("cost 1e-9 (below the resolution): %d", r.StatusCode)
	}
	if f.served.Load() != 0 || tiny.served.Load() != 0 {
		t.Fatal("a request of invalid cost was served")
	}
	if got := obs.outcomes(); !slices.Equal(got, []enforce.Outcome{enforce.Invalid, enforce.Invalid}) {
		t.Fatalf("observed %v", got)
	}
	if r := f.do("GET", "/", peer); r.StatusCode != 200 {
		t.Fatalf("after the invalid ones, the quota is whole: %d", r.StatusCode)
	}
}

// A handler that panics still gives its concurrency slot back.
func TestConcurrencySlotReleasedOnPanic(t *testing.T) {
	t.Parallel()
	slots := sluice.Limit{Name: "slots", Algorithm: sluice.Concurrency, Quota: 1, Window: time.Hour}
	f := newFixture(t, httplimit.Options{Rules: []httplimit.Rule{{Name: "s", Quotas: []httplimit.Quota{{Limit: slots, Key: httplimit.Key{Kind: httplimit.Global}}}}}},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/panic" {
				panic(http.ErrAbortHandler)
			}
		}))
	func() {
		defer func() { _ = recover() }()
		f.do("GET", "/panic", peer)
	}()
	if r := f.do("GET", "/", peer); r.StatusCode != 200 {
		t.Fatalf("after a panicking handler: %d, want its slot back", r.StatusCode)
	}
}

// A 1xx the handler sends first is not the status a charge sees.
func TestChargeSeesTheFinalStatus(t *testing.T) {
	t.Parallel()
	var statuses []int
	tb := sluice.Limit{Name: "tb", Quota: 100, Window: time.Hour}
	f := newFixture(t, httplimit.Options{Rules: []httplimit.Rule{{Name: "c", Quotas: []httplimit.Quota{{Limit: tb, Key: httplimit.Key{Kind: httplimit.Global},
		Charge: func(_ *http.Request, status int, _ http.Header) float64 {
			statuses = append(statuses, status)
			return 0
		}}}}}},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusCreated)
		}))
	f.do("GET", "/", peer)
	if !slices.Equal(statuses, []int{201}) {
		t.Fatalf("charge saw %v, want [201]", statuses)
	}
}
