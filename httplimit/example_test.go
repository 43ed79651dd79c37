package httplimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/memstore"
)

// An API limited per API key (and, for the whole service, globally), with
// the tokens each answer used charged after it; anonymous clients per IP.
func Example() {
	start := time.Now()
	store, err := memstore.New(memstore.Options{Now: func() time.Time { return start }}) // a still clock, for the output below
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	perKey := sluice.Limit{Name: "per-key", Algorithm: sluice.GCRA, Quota: 100, Window: time.Minute, Burst: 2}
	tokens := sluice.Limit{Name: "tokens", Quota: 10000, Window: time.Hour}
	perIP := sluice.Limit{Name: "per-ip", Algorithm: sluice.SlidingWindow, Quota: 30, Window: time.Minute}
	apiKey := httplimit.Key{Kind: httplimit.Header, Header: "X-API-Key"}
	mw, err := httplimit.New(httplimit.Options{
		Limiter: store,
		Rules: []httplimit.Rule{
			{Name: "api-key", Match: httplimit.Match{Path: "/api/"}, Quotas: []httplimit.Quota{
				{Limit: perKey, Key: apiKey},
				{Limit: tokens, Key: apiKey, Charge: func(_ *http.Request, _ int, h http.Header) float64 {
					n, _ := strconv.ParseFloat(h.Get("X-Tokens-Used"), 64)
					return n
				}},
			}},
			{Name: "anonymous", Match: httplimit.Match{Path: "/api/"}, Quotas: []httplimit.Quota{
				{Limit: perIP, Key: httplimit.Key{Kind: httplimit.IP}},
			}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Tokens-Used", "700")
		fmt.Fprint(w, "answer")
	})
	h := mw.Handler(api)

	for range 3 {
		r := httptest.NewRequest("GET", "/api/complete", nil)
		r.Header.Set("X-API-Key", "k-123")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d %s | %s | %s\n", w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"), w.Body.String())
	}
	// Output:
	// 200 "per-key";r=1;t=1, "tokens";r=9999;t=1 |  | answer
	// 200 "per-key";r=0;t=2, "tokens";r=9298;t=253 |  | answer
	// 429 "per-key";r=0;t=1, "tokens";r=8598;t=505 | 1 | {"error":"rate_limited","retryable":true}
}

// A target that refuses a paused lease holder: the requests carry the
// lease they are sent under (lease.FormatFence), and once the partition's
// new holder has been seen, the old one is refused with 409.
func Example_fence() {
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	fences, err := lease.NewFences(lease.FenceOptions{Groups: []string{"openai-tokens"}})
	if err != nil {
		log.Fatal(err)
	}
	mw, err := httplimit.New(httplimit.Options{
		Limiter: store,
		Rules:   []httplimit.Rule{{Name: "all", Quotas: []httplimit.Quota{{Limit: sluice.Limit{Name: "global", Quota: 100, Window: time.Second}}}}},
		Fence:   httplimit.Fence{Fences: fences},
	})
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "done") }))

	paused := lease.Spend{Group: "openai-tokens", Grant: lease.Grant{Partition: 3, Epoch: 5}}
	successor := lease.Spend{Group: "openai-tokens", Grant: lease.Grant{Partition: 3, Epoch: 9}}
	for _, s := range []lease.Spend{paused, successor, paused} {
		r := httptest.NewRequest("POST", "/v1/complete", nil)
		r.Header.Set(lease.FenceHeader, lease.FormatFence(s))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("epoch %d: %d %s\n", s.Epoch, w.Code, w.Body.String())
	}
	// Output:
	// epoch 5: 200 done
	// epoch 9: 200 done
	// epoch 5: 409 {"error":"stale_lease_epoch","retryable":false}
}
