package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/memstore"
)

// An allowed request costs one allocation for a rule of one limit (the
// arena holding its IP key and its RateLimit value: the decision stays on
// the stack), and a few more for several limits (AllowAll's slices).
func TestServeAllocs(t *testing.T) {
	ms, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	perIP := sluice.Limit{Name: "per-ip", Quota: 1e9, Window: time.Second}
	global := sluice.Limit{Name: "global", Quota: 1e9, Window: time.Second}
	ip := httplimit.Key{Kind: httplimit.IP}
	fences, err := lease.NewFences(lease.FenceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		quotas []httplimit.Quota
		fence  httplimit.Fence
		max    float64
	}{
		{"ip", []httplimit.Quota{{Limit: perIP, Key: ip}}, httplimit.Fence{}, 1},
		{"global", []httplimit.Quota{{Limit: global}}, httplimit.Fence{}, 1},
		{"ip and global", []httplimit.Quota{{Limit: perIP, Key: ip}, {Limit: global}}, httplimit.Fence{}, 4},
		// A fence that passes allocates nothing (its group known).
		{"ip, fenced", []httplimit.Quota{{Limit: perIP, Key: ip}}, httplimit.Fence{Fences: fences, Required: true}, 1},
	} {
		mw, err := httplimit.New(httplimit.Options{Limiter: ms, Rules: []httplimit.Rule{{Name: "r", Quotas: c.quotas}}, Fence: c.fence})
		if err != nil {
			t.Fatal(err)
		}
		h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "203.0.113.7:4711"
		r.Header.Set(lease.FenceHeader, "7 3 fleet")
		w := httptest.NewRecorder() // its header map cleared each time: the recorder allocates nothing more
		if n := testing.AllocsPerRun(100, func() { clear(w.Header()); h.ServeHTTP(w, r) }); n > c.max {
			t.Errorf("%s: %v allocations per request, want at most %v", c.name, n, c.max)
		}
		if w.Header().Get("RateLimit") == "" {
			t.Errorf("%s: no RateLimit field", c.name)
		}
	}
}
