package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/metrics"
)

// TestStoreStatsSeries gives each field of RedisStats and MemoryStats a
// value of its own and reads every series back: each exports its field,
// none another's.
func TestStoreStatsSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(metrics.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	redis := metrics.RedisStats{Calls: 1, NoScript: 2, Failures: 3, Timeouts: 4, FailOpen: 5, FailClosed: 6, FailLocal: 7,
		BreakerOpen: true, Unreachable: false, BreakerOpens: 8, DenyCacheHits: 9, Compensations: 10, ClockBackwards: 11, ChargesDropped: 12, Batches: 13, Batched: 14}
	if err := m.RegisterRedis(func() metrics.RedisStats { return redis }); err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterMemory(func() metrics.MemoryStats {
		return metrics.MemoryStats{Keys: 21, Evictions: 22, Expired: 23, ClockBackwards: 24}
	}); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"sluice_redis_calls_total": 1, "sluice_redis_noscript_total": 2, "sluice_redis_failures_total": 3,
		"sluice_redis_timeouts_total": 4, "sluice_redis_fallback_fail_open_total": 5, "sluice_redis_fallback_fail_closed_total": 6,
		"sluice_redis_fallback_fail_local_total": 7, "sluice_redis_breaker_open": 1, "sluice_redis_unreachable": 0,
		"sluice_redis_breaker_opens_total": 8, "sluice_redis_deny_cache_hits_total": 9, "sluice_redis_compensations_total": 10,
		"sluice_redis_clock_backwards_total": 11, "sluice_redis_charges_dropped_total": 12,
		"sluice_redis_batches_total": 13, "sluice_redis_batched_decisions_total": 14,
		"sluice_memory_keys": 21, "sluice_memory_evictions_total": 22, "sluice_memory_expired_total": 23, "sluice_memory_clock_backwards_total": 24,
	}
	got := scrape(t, reg)
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d series, want %d: %v", len(got), len(want), got)
	}
	redis.BreakerOpen, redis.Unreachable = false, true
	got = scrape(t, reg)
	if got["sluice_redis_breaker_open"] != 0 || got["sluice_redis_unreachable"] != 1 {
		t.Errorf("breaker_open %v, unreachable %v; want 0 and 1", got["sluice_redis_breaker_open"], got["sluice_redis_unreachable"])
	}
	if err := m.RegisterMemory(func() metrics.MemoryStats { return metrics.MemoryStats{} }); err == nil {
		t.Error("a second memory collector in one registry accepted")
	}
}

// TestPaceStatsSeries gives each field of PaceStats a value of its own
// and reads every series back; the breaker's state is exported by name.
func TestPaceStatsSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(metrics.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	stats := metrics.PaceStats{Requests: 1, Tries: 2, Retries: 3, Throttled: 4, Failures: 5, RetryAfterCapped: 6, BudgetSpent: 7, GaveUp: 8, Fenced: 19,
		EffectiveRate: 9.5, Rate: 10.5, Queued: 11, InFlight: 12, Waited: 13 * time.Second, Granted: 14, Holds: 15, Learned: 16,
		Breaker: "closed", BreakerOpens: 17, BreakerRejected: 18}
	if err := m.RegisterPace("t", func() metrics.PaceStats { return stats }); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"sluice_pace_requests_total": 1, "sluice_pace_tries_total": 2, "sluice_pace_retries_total": 3, "sluice_pace_throttled_total": 4,
		"sluice_pace_failures_total": 5, "sluice_pace_retry_after_capped_total": 6, "sluice_pace_retry_budget_exhausted_total": 7,
		"sluice_pace_gave_up_total": 8, "sluice_pace_effective_rate": 9.5, "sluice_pace_rate_limit": 10.5, "sluice_pace_queued": 11,
		"sluice_pace_in_flight": 12, "sluice_pace_wait_seconds_total": 13, "sluice_pace_granted_total": 14, "sluice_pace_holds_total": 15,
		"sluice_pace_learned_total": 16, "sluice_pace_breaker_state": 0, "sluice_pace_breaker_opens_total": 17, "sluice_pace_breaker_rejected_total": 18,
		"sluice_pace_fenced_total": 19,
	}
	got := scrapePace(t, reg, "t")
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d series, want %d: %v", len(got), len(want), got)
	}
	for _, c := range []struct {
		state string
		want  float64
	}{{"closed", 0}, {"open", 1}, {"half_open", 2}, {"BreakerState(7)", -1}, {"", -1}} {
		stats.Breaker = c.state
		if g := scrapePace(t, reg, "t")["sluice_pace_breaker_state"]; g != c.want {
			t.Errorf("breaker %q: breaker_state %v, want %v", c.state, g, c.want)
		}
	}
}

func TestNilStatsRefused(t *testing.T) {
	t.Parallel()
	m, err := metrics.New(metrics.Options{Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterRedis(nil); err == nil || !strings.Contains(err.Error(), "redis") {
		t.Errorf("RegisterRedis(nil) = %v, want an error naming redis", err)
	}
	if err := m.RegisterMemory(nil); err == nil || !strings.Contains(err.Error(), "memory") {
		t.Errorf("RegisterMemory(nil) = %v, want an error naming memory", err)
	}
}

// TestReloads counts reloads by result; a result's series appears at its
// first count, and the metric registers once per registry.
func TestReloads(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(metrics.Options{Registry: reg, Namespace: "edge"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.RegisterReloads()
	if err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "edge_config_reloads_total"); n != 0 {
		t.Fatalf("%d series before any reload, want 0", n)
	}
	r.OK()
	r.OK()
	r.Refused()
	want := `
# HELP edge_config_reloads_total Configuration reloads, by result (ok, or refused: the file was bad and the previous configuration stayed).
# TYPE edge_config_reloads_total counter
edge_config_reloads_total{result="ok"} 2
edge_config_reloads_total{result="refused"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "edge_config_reloads_total"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.RegisterReloads(); err == nil {
		t.Fatal("registering the reloads twice in one registry accepted")
	}
}

// scrape gathers reg and returns the value of every counter and gauge
// series without labels, by metric name.
func scrape(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			switch {
			case len(s.GetLabel()) > 0:
			case s.GetCounter() != nil:
				out[f.GetName()] = s.GetCounter().GetValue()
			case s.GetGauge() != nil:
				out[f.GetName()] = s.GetGauge().GetValue()
			}
		}
	}
	return out
}

func TestRefused(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(metrics.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.RegisterRefused()
	if err != nil {
		t.Fatal(err)
	}
	r.Inc("path")
	r.Inc("path")
	r.Inc("body")
	want := `
# HELP sluice_requests_refused_total Requests refused as bad input, by reason: a path or header that cannot be normalised (400, before any rule applied, so none is named), a body over its bound (413).
# TYPE sluice_requests_refused_total counter
sluice_requests_refused_total{reason="body"} 1
sluice_requests_refused_total{reason="path"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_requests_refused_total"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.RegisterRefused(); err == nil {
		t.Fatal("registering the refusals twice in one registry accepted")
	}
}
