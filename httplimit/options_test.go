package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// Validate refuses what New refuses, before anything starts.
func TestValidate(t *testing.T) {
	t.Parallel()
	ok := httplimit.Rule{Name: "r", Quotas: []httplimit.Quota{{Limit: perIP, Key: httplimit.Key{Kind: httplimit.Principal}, Charge: func(*http.Request, int, http.Header) float64 { return 0 }}}}
	if err := ok.Validate(); err != nil {
		t.Errorf("a valid rule: %v", err)
	}
	for _, c := range []struct {
		rule httplimit.Rule
		want string
	}{
		{httplimit.Rule{Name: "r", Quotas: []httplimit.Quota{{Limit: perIP, Key: httplimit.Key{Kind: 9}}}}, `rule "r", quota 0 (per-ip): unknown key kind 9`},
		{httplimit.Rule{Name: "r", Match: httplimit.Match{Methods: []string{"get"}}, Quotas: []httplimit.Quota{{Limit: perIP}}}, `rule "r": `},
		{httplimit.Rule{Name: "r", OnError: sluice.FailLocal, Quotas: []httplimit.Quota{{Limit: perIP}}}, "no local fallback"},
	} {
		if err := c.rule.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.rule, err, c.want)
		}
	}
	ms, _ := memstore.New(memstore.Options{})
	defer ms.Close()
	if _, err := httplimit.New(httplimit.Options{Limiter: ms, Version: 7, Rules: []httplimit.Rule{ok}}); err == nil || !strings.Contains(err.Error(), "unknown Version 7") {
		t.Errorf("Version 7: %v", err)
	}
}

func TestKeyKindString(t *testing.T) {
	t.Parallel()
	for k, want := range map[httplimit.KeyKind]string{httplimit.Global: "global", httplimit.IP: "ip", httplimit.Header: "header", httplimit.Principal: "principal", 9: "key_kind(9)"} {
		if got := k.String(); got != want {
			t.Errorf("%d: %q, want %q", k, got, want)
		}
	}
}

// The legacy fields beside draft -11 are about the decisive limit: the
// one with the least remaining.
func TestLegacyWithDraft11(t *testing.T) {
	t.Parallel()
	hourly := sluice.Limit{Name: "hourly", Quota: 100, Window: time.Hour}
	f := newFixture(t, httplimit.Options{Legacy: true, Rules: []httplimit.Rule{{Name: "r", Quotas: []httplimit.Quota{
		{Limit: hourly, Key: httplimit.Key{Kind: httplimit.Global}},
		{Limit: perIP, Key: httplimit.Key{Kind: httplimit.IP}},
	}}}}, nil)
	r := f.do("GET", "/", peer)
	for k, v := range map[string]string{
		"RateLimit-Policy":  `"hourly";q=100;w=3600, "per-ip";q=2;w=60`,
		"RateLimit":         `"hourly";r=99;t=36, "per-ip";r=1;t=30`,
		"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "30",
	} {
		if got := r.Header.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
}

// TenantLabel names the tenant the Observer hears; a GET rule also
// matches HEAD.
func TestTenantLabel(t *testing.T) {
	t.Parallel()
	var obs recorder
	f := newFixture(t, httplimit.Options{Observer: &obs, TenantLabel: func(r *http.Request) string { return "acct-" + r.Header.Get("X-Account") },
		Rules: []httplimit.Rule{{Name: "r", Match: httplimit.Match{Methods: []string{"GET"}}, Quotas: []httplimit.Quota{{Limit: perIP, Key: httplimit.Key{Kind: httplimit.IP}}}}}}, nil)
	f.do("HEAD", "/", peer, "X-Account", "7")
	f.do("POST", "/", peer, "X-Account", "8") // no rule: not observed
	if len(obs.events) != 1 || obs.events[0].Tenant != "acct-7" || obs.events[0].Outcome != enforce.Allowed {
		t.Fatalf("events %+v", obs.events)
	}
}

// A handler behind a charged quota still reaches the underlying writer
// (http.ResponseController: Flush).
func TestChargedHandlerCanFlush(t *testing.T) {
	t.Parallel()
	tb := sluice.Limit{Name: "tb", Quota: 100, Window: time.Hour}
	var flushErr error
	f := newFixture(t, httplimit.Options{Rules: []httplimit.Rule{{Name: "c", Quotas: []httplimit.Quota{{Limit: tb, Key: httplimit.Key{Kind: httplimit.Global},
		Charge: func(*http.Request, int, http.Header) float64 { return 1 }}}}}},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte("part"))
			flushErr = http.NewResponseController(w).Flush()
		}))
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = peer
	w := httptest.NewRecorder()
	f.handler.ServeHTTP(w, r)
	if flushErr != nil || !w.Flushed {
		t.Fatalf("Flush: %v, flushed %v", flushErr, w.Flushed)
	}
}

// A leaky bucket's delay is waited out on a timer (in a synctest bubble,
// on its fake clock), or not at all for a client already gone; a request
// with an empty path is "/".
func TestDelayOnATimer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ms, err := memstore.New(memstore.Options{Now: time.Now})
		if err != nil {
			t.Fatal(err)
		}
		defer ms.Close()
		queue := sluice.Limit{Name: "queue", Algorithm: sluice.LeakyBucket, Quota: 10, Window: time.Second, Burst: 3}
		mw, err := httplimit.New(httplimit.Options{Limiter: ms, Rules: []httplimit.Rule{{Name: "q", Match: httplimit.Match{Path: "/"}, Quotas: []httplimit.Quota{{Limit: queue, Key: httplimit.Key{Kind: httplimit.Global}}}}}})
		if err != nil {
			t.Fatal(err)
		}
		served := 0
		h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ }))
		start := time.Now()
		for range 2 {
			r := httptest.NewRequest("GET", "/", nil)
			r.URL.Path = ""
			h.ServeHTTP(httptest.NewRecorder(), r)
		}
		if waited := time.Since(start); served != 2 || waited != 100*time.Millisecond {
			t.Fatalf("%d served after %v, want 2 after 100ms (the second delayed)", served, waited)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx))
		if served != 2 {
			t.Fatalf("a request whose client is gone was served")
		}
	})
}
