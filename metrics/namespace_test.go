package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/redisstore"
)

// TestNamespaces: two Metrics of different namespaces share one registry,
// each with its own memory store, Redis store and pace target under one
// name, and every series of each is under its own namespace.
func TestNamespaces(t *testing.T) {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redistest.Addr(t)}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	reg := prometheus.NewRegistry()
	for _, ns := range []string{"edge", "internal"} {
		m, err := metrics.New(metrics.Options{Registry: reg, Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		mem, err := memstore.New(memstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mem.Close() })
		rs, err := redisstore.New(redisstore.Options{Client: redisstore.NewRueidis(client), Prefix: "sluice-test-ns-" + ns})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		tr, err := pace.NewTransport(pace.TransportOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tr.Pacer().Close)
		if err := m.RegisterMemory(func() metrics.MemoryStats { return metrics.MemoryStats(mem.Stats()) }); err != nil {
			t.Fatalf("%s: RegisterMemory: %v", ns, err)
		}
		if err := m.RegisterRedis(func() metrics.RedisStats { return metrics.RedisStats(rs.Stats()) }); err != nil {
			t.Fatalf("%s: RegisterRedis: %v", ns, err)
		}
		if err := m.RegisterPace("api", paceStats(tr)); err != nil {
			t.Fatalf("%s: RegisterPace: %v", ns, err)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, f := range families {
		ns, _, _ := strings.Cut(f.GetName(), "_")
		if ns != "edge" && ns != "internal" {
			t.Errorf("%s: not under either namespace", f.GetName())
		}
		seen[ns]++
	}
	for _, want := range []string{"edge_memory_keys", "internal_memory_keys", "edge_redis_calls_total", "internal_redis_breaker_open", "edge_pace_tries_total", "internal_pace_rate_limit"} {
		found := false
		for _, f := range families {
			found = found || f.GetName() == want
		}
		if !found {
			t.Errorf("no %s series", want)
		}
	}
	if seen["edge"] != seen["internal"] {
		t.Errorf("%d series under edge, %d under internal; want as many", seen["edge"], seen["internal"])
	}
}
