package metrics_test

import (
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/metrics"
)

// Metrics observes the decisions of a middleware (here two, given by
// hand), exports a store's counters read at each scrape, and serves them
// in the Prometheus text format.
func Example() {
	m, err := metrics.New(metrics.Options{})
	if err != nil {
		panic(err)
	}
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	// The collector takes the stats it reads: memstore.Stats converts to
	// metrics.MemoryStats, field for field.
	if err := m.RegisterMemory(func() metrics.MemoryStats { return metrics.MemoryStats(store.Stats()) }); err != nil {
		panic(err)
	}
	m.Observe(enforce.Event{Rule: "per-ip", Outcome: enforce.Allowed, Tenant: "ip:192.0.2.1", Cost: 1, Latency: 40 * time.Microsecond})
	m.Observe(enforce.Event{Rule: "per-ip", Outcome: enforce.Rejected, Tenant: "ip:192.0.2.7", Cost: 1, Latency: 30 * time.Microsecond})

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, "sluice_decisions_total{") && !strings.HasSuffix(line, " 0\n") || strings.HasPrefix(line, "sluice_memory_keys ") {
			fmt.Print(line)
		}
	}
	top := m.TopTenants(1)
	fmt.Println("heaviest spender:", top.BySpent[0].Tenant, top.BySpent[0].Weight)
	// Output:
	// sluice_decisions_total{outcome="allowed",rule="per-ip"} 1
	// sluice_decisions_total{outcome="rejected",rule="per-ip"} 1
	// sluice_memory_keys 0
	// heaviest spender: ip:192.0.2.1 1
}
