package pace_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/pace"
)

// fields says what a simulated target tells its clients.
type fields int

const (
	rateLimitFields fields = iota // RateLimit-Policy and RateLimit (draft-11), Retry-After on 429
	retryAfterOnly                // nothing but 429 with Retry-After
)

// target is a service that enforces a hidden token bucket with sluice's own
// middleware, and counts what reaches it by instant.
type target struct {
	limit   sluice.Limit
	handler http.Handler
	store   *memstore.Store
	start   time.Time

	mu        sync.Mutex
	sends     int
	ok        []time.Duration // since start, of each 2xx
	throttled []time.Duration // of each 429
}

func newTarget(t *testing.T, limit sluice.Limit, f fields) *target {
	t.Helper()
	store, err := memstore.New(memstore.Options{Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	tg := &target{limit: limit, store: store, start: time.Now()}
	mw, err := httplimit.New(httplimit.Options{
		Limiter: store,
		Rules: []httplimit.Rule{{
			Name:   "api",
			Quotas: []httplimit.Quota{{Limit: limit, Key: httplimit.Key{Kind: httplimit.Global}}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	h := mw.Handler(ok)
	tg.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f == retryAfterOnly {
			w = stripFields{w}
		}
		rec := &statusRecorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		at := time.Since(tg.start)
		tg.mu.Lock()
		defer tg.mu.Unlock()
		tg.sends++
		switch {
		case rec.status == http.StatusTooManyRequests:
			tg.throttled = append(tg.throttled, at)
		case rec.status < 300:
			tg.ok = append(tg.ok, at)
		}
	})
	return tg
}

func (tg *target) close() { _ = tg.store.Close() }

// between counts the 2xx and the 429 that arrived in [from, to).
func (tg *target) between(from, to time.Duration) (ok, throttled int) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	count := func(ts []time.Duration) (n int) {
		for _, x := range ts {
			if x >= from && x < to {
				n++
			}
		}
		return n
	}
	return count(tg.ok), count(tg.throttled)
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// stripFields removes every rate limit field but Retry-After.
type stripFields struct{ http.ResponseWriter }

func (s stripFields) WriteHeader(code int) {
	h := s.Header()
	for _, k := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		h.Del(k)
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s stripFields) Write(b []byte) (int, error) {
	s.WriteHeader(http.StatusOK)
	return s.ResponseWriter.Write(b)
}

// inProcess is a RoundTripper that serves requests with a handler, in the
// caller's goroutine: no network, so synctest's clock is the only clock.
type inProcess struct{ h http.Handler }

func (p inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
	rec := httptest.NewRecorder()
	p.h.ServeHTTP(rec, req)
	return rec.Result(), nil
}

// offer sends rate requests per second to client for d, each giving up after
// patience, and waits for all of them.
func offer(client *http.Client, rate float64, d, patience time.Duration) {
	var wg sync.WaitGroup
	every := time.Duration(float64(time.Second) / rate)
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		ctx, cancel := context.WithTimeout(context.Background(), min(patience, time.Until(end)))
		wg.Go(func() {
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://target.test/api", nil)
			resp, err := client.Do(req)
			if err == nil {
				_ = resp.Body.Close()
			}
		})
		time.Sleep(every)
	}
	wg.Wait()
}

type simResult struct {
	ok, throttled, sends int
	utilization          float64 // 2xx ÷ (L × duration)
	rateError            float64 // |2xx rate − L| ÷ L
	stats                pace.TransportStats
}

func (r simResult) String() string {
	return fmt.Sprintf("2xx %d, 429 %d (%.2f %%), sends %d, utilization %.2f %%, rate error %.2f %%, retries %d",
		r.ok, r.throttled, 100*float64(r.throttled)/float64(max(r.sends, 1)), r.sends, 100*r.utilization, 100*r.rateError, r.stats.Retries)
}

// simulate offers 5×L to a target enforcing limit through a client paced by
// opts, for d of simulated time.
func simulate(t *testing.T, limit sluice.Limit, f fields, opts pace.Options, d time.Duration) (simResult, *target) {
	t.Helper()
	return simulateWith(t, limit, f, opts, pace.RetryOptions{}, d)
}

// simulateWith is simulate with the Transport's retry options.
func simulateWith(t *testing.T, limit sluice.Limit, f fields, opts pace.Options, retry pace.RetryOptions, d time.Duration) (simResult, *target) {
	t.Helper()
	tg := newTarget(t, limit, f)
	defer tg.close()
	p, err := pace.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := pace.NewTransport(pace.TransportOptions{Base: inProcess{tg.handler}, Pacer: p, Retry: retry})
	if err != nil {
		t.Fatal(err)
	}
	rate := limit.Quota / limit.Window.Seconds()
	offer(&http.Client{Transport: tr}, 5*rate, d, 5*time.Second)
	ok, throttled := tg.between(0, d)
	res := simResult{ok: ok, throttled: throttled, sends: tg.sends, stats: tr.Stats()}
	res.utilization = float64(ok) / (rate * d.Seconds())
	res.rateError = math.Abs(float64(ok)/d.Seconds()-rate) / rate
	return res, tg
}

const simFor = 60 * time.Second

// hidden is the target's limit: 50 per second, a burst of 50.
var hidden = sluice.Limit{Name: "api", Quota: 50, Window: time.Second}

func TestConfiguredLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		res, _ := simulate(t, hidden, rateLimitFields, pace.Options{Limits: []sluice.Limit{hidden}}, simFor)
		t.Logf("limit configured on the client, 5×L offered for %v: %v", simFor, res)
		if res.throttled != 0 {
			t.Errorf("got %d × 429, want 0", res.throttled)
		}
		if res.utilization < 0.98 {
			t.Errorf("utilization %.2f %%, want ≥ 98 %%", 100*res.utilization)
		}
		if res.rateError > 0.01 {
			t.Errorf("rate error %.2f %%, want ≤ 1 %%", 100*res.rateError)
		}
		checkFigures(t, "TestConfiguredLimit", res)
	})
}

func TestLearnsFromRateLimitFields(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		res, tg := simulate(t, hidden, rateLimitFields, pace.Options{}, simFor)
		t.Logf("limit unknown, target sends RateLimit fields: %v", res)
		var after, afterThrottled int
		for w := time.Duration(0); w < simFor; w += hidden.Window {
			ok, th := tg.between(w, w+hidden.Window)
			if w >= 2*hidden.Window {
				after += ok + th
				afterThrottled += th
				if float64(ok) < 0.95*hidden.Quota {
					t.Errorf("window %v: %d allowed, want ≥ 95 %% of %v", w, ok, hidden.Quota)
				}
			} else {
				t.Logf("window %v: %d allowed, %d × 429", w, ok, th)
			}
		}
		share := float64(afterThrottled) / float64(after)
		t.Logf("after two windows: %d × 429 of %d sends (%.3f %%)", afterThrottled, after, 100*share)
		if share > 0.01 {
			t.Errorf("429 share after two windows %.2f %%, want ≤ 1 %%", 100*share)
		}
		checkFigures(t, "TestLearnsFromRateLimitFields", res)
	})
}

func TestLearnsFromRetryAfterOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		res, _ := simulate(t, hidden, retryAfterOnly, pace.Options{}, simFor)
		t.Logf("limit unknown, only 429 + Retry-After: %v", res)
		share := float64(res.throttled) / float64(res.sends)
		if res.utilization < 0.85 {
			t.Errorf("utilization %.2f %%, want ≥ 85 %%", 100*res.utilization)
		}
		if share > 0.05 {
			t.Errorf("429 share %.2f %%, want ≤ 5 %%", 100*share)
		}
		checkFigures(t, "TestLearnsFromRetryAfterOnly", res)
	})
}

// TestSeedScenario is the problem pace exists for: 10,000 records for a
// target that allows 100 per second. Fired all at once and retried on failure, they
// become several times as many sends; paced, they are 10,000 sends.
func TestSeedScenario(t *testing.T) {
	const records = 10_000
	limit := sluice.Limit{Name: "api", Quota: 100, Window: time.Second}
	run := func(t *testing.T, send func(client *http.Client) error, client func(http.RoundTripper) *http.Client) (sends int, took time.Duration) {
		tg := newTarget(t, limit, rateLimitFields)
		defer tg.close()
		c := client(inProcess{tg.handler})
		start := time.Now()
		var wg sync.WaitGroup
		var failed sync.Map
		for i := range records {
			wg.Go(func() {
				if err := send(c); err != nil {
					failed.Store(i, err)
				}
			})
		}
		wg.Wait()
		failed.Range(func(k, v any) bool {
			t.Errorf("record %v: %v", k, v)
			return false
		})
		ok, _ := tg.between(0, time.Hour)
		if ok != records {
			t.Errorf("%d records accepted, want %d", ok, records)
		}
		return tg.sends, time.Since(start)
	}
	get := func(c *http.Client) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://target.test/records", nil)
		return c.Do(req)
	}

	var paced, naive int
	synctest.Test(t, func(t *testing.T) {
		var took time.Duration
		paced, took = run(t, func(c *http.Client) error {
			resp, err := get(c)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		}, func(base http.RoundTripper) *http.Client {
			p, err := pace.New(pace.Options{Limits: []sluice.Limit{limit}})
			if err != nil {
				t.Fatal(err)
			}
			tr, err := pace.NewTransport(pace.TransportOptions{Base: base, Pacer: p})
			if err != nil {
				t.Fatal(err)
			}
			return &http.Client{Transport: tr}
		})
		t.Logf("paced: %d records, %d sends, %v (simulated)", records, paced, took)
	})
	// The naive client: fire everything, retry what fails after an
	// exponential backoff with full jitter (1 s doubling to 1 min, as
	// go-retryablehttp waits, but without giving up).
	synctest.Test(t, func(t *testing.T) {
		var took time.Duration
		naive, took = run(t, func(c *http.Client) error {
			for n := 0; ; n++ {
				resp, err := get(c)
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return nil
				}
				d := min(time.Minute, time.Second<<min(n, 6))
				time.Sleep(rand.N(d))
			}
		}, func(base http.RoundTripper) *http.Client { return &http.Client{Transport: base} })
		t.Logf("naive fire and retry: %d records, %d sends (%.1f×), %v (simulated)", records, naive, float64(naive)/records, took)
	})
	if paced > records+records/100 {
		t.Errorf("paced: %d sends, want ≤ %d", paced, records+records/100)
	}
	if naive < 2*records {
		t.Errorf("naive: %d sends; the negative control should send several times more than %d", naive, records)
	}
}
