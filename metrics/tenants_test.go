package metrics_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/metrics"
)

// TestTenantsNotPoisoned: 20 tenants asking for the largest cost an RLS
// request can carry, all refused, do not push out of the view a tenant
// that really spent 60: the view ranks by what was spent, and counts a
// rejection as one whatever it asked for.
func TestTenantsNotPoisoned(t *testing.T) {
	t.Parallel()
	m, err := metrics.New(metrics.Options{Registry: prometheus.NewRegistry(), Tenants: 20})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		m.Observe(enforce.Event{Rule: "r", Outcome: enforce.Allowed, Tenant: "real", Cost: 20})
	}
	for i := range 20 {
		m.Observe(enforce.Event{Rule: "r", Outcome: enforce.Rejected, Tenant: fmt.Sprintf("attacker-%02d", i), Cost: 4294967295})
	}
	m.Observe(enforce.Event{Rule: "r", Outcome: enforce.ShadowRejected, Tenant: "attacker-00", Cost: 4294967295})
	m.Observe(enforce.Event{Rule: "r", Outcome: enforce.Failed, Tenant: "attacker-01", Cost: 4294967295})
	m.Observe(enforce.Event{Rule: "r", Outcome: enforce.Invalid, Tenant: "attacker-02", Cost: 4294967295})
	got := m.TopTenants(20)
	if got.Spent != 60 || len(got.BySpent) != 1 || got.BySpent[0].Tenant != "real" || got.BySpent[0].Weight != 60 || got.BySpent[0].Error != 0 {
		t.Fatalf("by spent: %v in all, %+v; want the real tenant alone, exactly 60", got.Spent, got.BySpent)
	}
	if got.Rejections != 21 || len(got.ByRejections) != 20 || got.ByRejections[0].Tenant != "attacker-00" || got.ByRejections[0].Weight != 2 {
		t.Fatalf("by rejections: %v in all, %+v; want 21, attacker-00 first with 2", got.Rejections, got.ByRejections)
	}
}

// TestTenantsHandler: ?n= bounds both rankings, from 1 to 1000, default
// 20; anything else is 400 with a JSON reason.
func TestTenantsHandler(t *testing.T) {
	t.Parallel()
	m, err := metrics.New(metrics.Options{Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		tenant := fmt.Sprintf("t%02d", i)
		m.Observe(enforce.Event{Rule: "r", Outcome: enforce.Allowed, Tenant: tenant, Cost: float64(i + 1)})
		m.Observe(enforce.Event{Rule: "r", Outcome: enforce.Rejected, Tenant: tenant, Cost: 1})
	}
	mux := http.NewServeMux()
	mux.Handle("GET /admin/tenants", m.TenantsHandler())
	mux.Handle("POST /admin/tenants/reset", m.ResetTenantsHandler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		query string
		code  int
		n     int // tenants in each ranking
	}{
		{"", 200, 20}, {"?n=1", 200, 1}, {"?n=25", 200, 25}, {"?n=1000", 200, 30},
		{"?n=0", 400, 0}, {"?n=1001", 400, 0}, {"?n=-1", 400, 0}, {"?n=abc", 400, 0}, {"?n=", 400, 0}, {"?n=2.5", 400, 0}, {"?n=1&n=2", 400, 0}, {"?n=1;x", 400, 0}, {"?x=%zz&n=3", 400, 0},
	} {
		code, ct, body := fetch(t, "GET", srv.URL+"/admin/tenants"+c.query)
		if code != c.code || ct != "application/json" {
			t.Errorf("%q: %d %s %s, want %d JSON", c.query, code, ct, body, c.code)
			continue
		}
		if code != 200 {
			var e struct{ Error string }
			if err := json.Unmarshal([]byte(body), &e); err != nil || !strings.Contains(e.Error, "from 1 to 1000") {
				t.Errorf("%q: %s, want {\"error\": ...} saying from 1 to 1000", c.query, body)
			}
			continue
		}
		var v metrics.Tenants
		if err := json.Unmarshal([]byte(body), &v); err != nil || len(v.BySpent) != c.n || len(v.ByRejections) != c.n {
			t.Errorf("%q: %v, %d and %d tenants, want %d each", c.query, err, len(v.BySpent), len(v.ByRejections), c.n)
		} else if v.BySpent[0].Tenant != "t29" || v.BySpent[0].Weight != 30 {
			t.Errorf("%q: %+v first, want t29 with 30", c.query, v.BySpent[0])
		}
	}
	if code, _, _ := fetch(t, "POST", srv.URL+"/admin/tenants/reset"); code != 204 {
		t.Fatalf("reset: %d", code)
	}
	if got := m.TopTenants(5); len(got.BySpent) != 0 || got.Rejections != 0 {
		t.Fatalf("after reset: %+v", got)
	}
}

func fetch(t *testing.T, method, url string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}
