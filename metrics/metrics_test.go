package metrics_test

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/metrics"
)

func TestDecisionsByRuleAndOutcome(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(metrics.Options{Registry: reg, Tenants: 4})
	if err != nil {
		t.Fatal(err)
	}
	events := []enforce.Event{
		{Rule: "per-ip", Outcome: enforce.Allowed, Tenant: "a", Cost: 1, Latency: 30 * time.Microsecond},
		{Rule: "per-ip", Outcome: enforce.Allowed, Tenant: "a", Cost: 1},
		{Rule: "per-ip", Outcome: enforce.Rejected, Tenant: "b", Cost: 5},
		{Rule: "per-key", Outcome: enforce.ShadowRejected, Tenant: "c", Cost: 2},
		{Rule: "per-key", Outcome: enforce.Failed, Tenant: "c", Cost: 1, Err: errors.New("down")},
	}
	for _, e := range events {
		m.Observe(e)
	}
	want := `
# HELP sluice_decisions_total Requests decided, by rule and outcome (allowed, rejected, shadow_rejected: would have been rejected in shadow mode, failed: the limiter failed and the rule's on_error answered, invalid: the request's cost could not be taken).
# TYPE sluice_decisions_total counter
sluice_decisions_total{outcome="allowed",rule="per-ip"} 2
sluice_decisions_total{outcome="allowed",rule="per-key"} 0
sluice_decisions_total{outcome="failed",rule="per-ip"} 0
sluice_decisions_total{outcome="failed",rule="per-key"} 1
sluice_decisions_total{outcome="invalid",rule="per-ip"} 0
sluice_decisions_total{outcome="invalid",rule="per-key"} 0
sluice_decisions_total{outcome="rejected",rule="per-ip"} 1
sluice_decisions_total{outcome="rejected",rule="per-key"} 0
sluice_decisions_total{outcome="shadow_rejected",rule="per-ip"} 0
sluice_decisions_total{outcome="shadow_rejected",rule="per-key"} 1
# HELP sluice_limiter_errors_total Limiter calls that failed with an error rather than a decision, by rule.
# TYPE sluice_limiter_errors_total counter
sluice_limiter_errors_total{rule="per-ip"} 0
sluice_limiter_errors_total{rule="per-key"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_decisions_total", "sluice_limiter_errors_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "sluice_decision_seconds"); n != 2 {
		t.Fatalf("decision_seconds: %d series, want one per rule (2)", n)
	}

	got := m.TopTenants(2)
	if got.Spent != 2 || got.Rejections != 2 {
		t.Fatalf("totals: %v spent, %v rejections; want 2 (a's two allowed) and 2 (b's and c's)", got.Spent, got.Rejections)
	}
	if len(got.BySpent) != 1 || got.BySpent[0].Tenant != "a" || got.BySpent[0].Weight != 2 || got.BySpent[0].Share != 1 {
		t.Fatalf("by spent: %+v, want a alone with 2: nothing else was spent", got.BySpent)
	}
	if len(got.ByRejections) != 2 || got.ByRejections[0].Tenant != "b" || got.ByRejections[0].Weight != 1 || got.ByRejections[1].Tenant != "c" {
		t.Fatalf("by rejections: %+v, want b then c, one each", got.ByRejections)
	}
	m.ResetTenants()
	if got := m.TopTenants(2); got.Spent != 0 || len(got.BySpent) != 0 || len(got.ByRejections) != 0 {
		t.Fatalf("after reset: %+v", got)
	}
}

// TestNoKeyLabel: whatever the tenants, the series are per rule and
// outcome only — a key never becomes a label (cardinality, privacy).
func TestNoKeyLabel(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(metrics.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		m.Observe(enforce.Event{Rule: "r", Outcome: enforce.Allowed, Tenant: "tenant-" + string(rune('a'+i%26)) + strings.Repeat("x", i%7), Cost: 1})
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, metric := range f.Metric {
			for _, l := range metric.Label {
				if l.GetName() != "rule" && l.GetName() != "outcome" {
					t.Fatalf("%s has label %q", f.GetName(), l.GetName())
				}
				if strings.Contains(l.GetValue(), "tenant") {
					t.Fatalf("%s carries a tenant in %q", f.GetName(), l.GetValue())
				}
			}
		}
	}
}

func TestHandlerServesStoreCounters(t *testing.T) {
	m, err := metrics.New(metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := m.RegisterMemory(func() metrics.MemoryStats { return metrics.MemoryStats(store.Stats()) }); err != nil {
		t.Fatal(err)
	}
	m.Observe(enforce.Event{Rule: "r", Outcome: enforce.Rejected})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`sluice_decisions_total{outcome="rejected",rule="r"} 1`, "sluice_memory_keys 0", "sluice_memory_evictions_total 0", "go_goroutines"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestOptionsRefused(t *testing.T) {
	if _, err := metrics.New(metrics.Options{Tenants: 1 << 30}); err == nil {
		t.Fatal("Tenants 1<<30 accepted")
	}
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(metrics.Options{Registry: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.New(metrics.Options{Registry: reg}); err == nil {
		t.Fatal("registering twice in one registry accepted")
	}
}
