package pace_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/pace"
)

// A client that knows its target's limits: 100 per second (released one
// every 10 ms) and 10,000 per day, at most 8 requests in flight.
func ExamplePacer() {
	p, err := pace.New(pace.Options{
		Limits: []sluice.Limit{
			{Name: "per-second", Quota: 100, Window: time.Second},
			{Name: "per-day", Quota: 10_000, Window: 24 * time.Hour},
		},
		MaxInFlight: 8,
	})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	for range 3 {
		r, err := p.Wait(context.Background(), 1)
		if err != nil {
			panic(err)
		}
		// ... send the work ...
		r.Done()
	}
	s := p.Stats()
	fmt.Printf("granted %d; the slowest limit allows %.4f per second\n", s.Granted, s.Rate)
	// Output: granted 3; the slowest limit allows 0.1157 per second
}

// Any http.Client behind a Transport: it learns the target's limit from the
// RateLimit-Policy and RateLimit fields of the first answer (here sluice's
// own middleware, 1 per second), and waits instead of collecting a 429.
func ExampleTransport() {
	// A clock read at every decision: the default coarse clock runs late on
	// a starved machine, and the second request comes the instant the
	// first one's token is back.
	store, _ := memstore.New(memstore.Options{ClockResolution: -1})
	defer store.Close()
	mw, err := httplimit.New(httplimit.Options{
		Limiter: store,
		Rules: []httplimit.Rule{{
			Name:   "api",
			Quotas: []httplimit.Quota{{Limit: sluice.Limit{Name: "api", Quota: 1, Window: time.Second}, Key: httplimit.Key{Kind: httplimit.Global}}},
		}},
	})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	defer srv.Close()

	tr, err := pace.NewTransport(pace.TransportOptions{})
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: tr}
	for range 2 {
		resp, err := client.Get(srv.URL)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
	}
	s := tr.Stats()
	fmt.Printf("429s: %d, learned limits: %d\n", s.Throttled, s.Pacer.Learned)
	// Output:
	// 200 OK
	// 200 OK
	// 429s: 0, learned limits: 1
}
