package bench

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-chi/httprate"
	limiterhttp "github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"

	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/memstore"
)

// discard is a ResponseWriter that keeps nothing but its header map,
// emptied between requests, so that the benchmarks measure the middleware.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })

// serve runs h on one allowed request per iteration: the same client (by
// IP), a limit it never reaches. Each implementation writes its
// rate-limit fields (sluice: RateLimit-Policy and RateLimit; the others:
// X-RateLimit-*).
func memstoreOptions() memstore.Options { return memstore.Options{} }

func serve(b *testing.B, h http.Handler) {
	r := httptest.NewRequest("GET", "/api/items", nil)
	r.RemoteAddr = "203.0.113.7:4711"
	w := &discard{h: make(http.Header)}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
}

// The middleware on an allowed request, keyed by client IP, against
// go-chi/httprate and sethvargo/go-limiter's httplimit; "none" is the bare
// handler, whose time the others include.
func BenchmarkMiddleware(b *testing.B) {
	b.Run("impl=none", func(b *testing.B) { serve(b, okHandler) })
	b.Run("impl=sluice", func(b *testing.B) {
		mw, err := httplimit.New(httplimit.Options{
			Limiter: newMemstore(b, memstoreOptions()),
			Rules: []httplimit.Rule{{Name: "per-ip", Quotas: []httplimit.Quota{{
				Limit: everything, Key: httplimit.Key{Kind: httplimit.IP},
			}}}},
		})
		if err != nil {
			b.Fatal(err)
		}
		serve(b, mw.Handler(okHandler))
	})
	b.Run("impl=httprate", func(b *testing.B) {
		// LimitByIP, now deprecated, spelled out: the peer's address,
		// IPv6 by /64.
		byIP := func(r *http.Request) (string, error) {
			ip, _, err := net.SplitHostPort(r.RemoteAddr)
			if err != nil {
				ip = r.RemoteAddr
			}
			return httprate.CanonicalizeIP(ip), nil
		}
		serve(b, httprate.LimitBy(1e9, time.Second, byIP)(okHandler))
	})
	b.Run("impl=golimiter", func(b *testing.B) {
		store, err := memorystore.New(&memorystore.Config{Tokens: 1e9, Interval: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { store.Close(b.Context()) })
		mw, err := limiterhttp.NewMiddleware(store, limiterhttp.IPKeyFunc())
		if err != nil {
			b.Fatal(err)
		}
		serve(b, mw.Handle(okHandler))
	})
}
