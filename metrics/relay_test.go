package metrics_test

import (
	"errors"
	"io"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/metrics"
)

// TestRegisterRelayQueue reads a queue's series back through the handler:
// the values given, labelled by queue and target only; an unknown ETA is
// NaN; a stats function that cannot read exports nothing.
func TestRegisterRelayQueue(t *testing.T) {
	m, err := metrics.New(metrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ok := true
	stats := metrics.RelayQueueStats{Depth: 840, Ready: 830, InFlight: 10, Dead: 2, OldestAge: 3 * time.Second,
		EffectiveRate: 49.5, Limit: 50, ETA: 16800 * time.Millisecond, ETAKnown: true, MeanWait: 2 * time.Second,
		Delivered: 160, Throttled: 1, Failed: 3, DeadLettered: 2, Paused: true}
	if err := m.RegisterRelayQueue("bulk", "demo", func() (metrics.RelayQueueStats, bool) { return stats, ok }); err != nil {
		t.Fatal(err)
	}
	scrape := func() string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		b, _ := io.ReadAll(rec.Body)
		return string(b)
	}
	out := scrape()
	for _, want := range []string{
		`sluice_relay_depth{queue="bulk",target="demo"} 840`,
		`sluice_relay_in_flight{queue="bulk",target="demo"} 10`,
		`sluice_relay_effective_rate{queue="bulk",target="demo"} 49.5`,
		`sluice_relay_rate_limit{queue="bulk",target="demo"} 50`,
		`sluice_relay_eta_seconds{queue="bulk",target="demo"} 16.8`,
		`sluice_relay_paused{queue="bulk",target="demo"} 1`,
		`sluice_relay_throttled_total{queue="bulk",target="demo"} 1`,
		`sluice_relay_dead_lettered_total{queue="bulk",target="demo"} 2`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s in:\n%s", want, out)
		}
	}
	stats.ETAKnown, stats.Limit = false, math.Inf(1)
	out = scrape()
	if !strings.Contains(out, `sluice_relay_eta_seconds{queue="bulk",target="demo"} NaN`) || !strings.Contains(out, `sluice_relay_rate_limit{queue="bulk",target="demo"} +Inf`) {
		t.Errorf("unknown ETA and limit:\n%s", out)
	}
	ok = false
	if out := scrape(); strings.Contains(out, "sluice_relay_") {
		t.Errorf("a queue whose figures cannot be read exported series:\n%s", out)
	}
	if err := m.RegisterRelayQueue("bulk", "demo", func() (metrics.RelayQueueStats, bool) { return stats, true }); err == nil {
		t.Error("the same queue registered twice")
	}
	if err := m.RegisterRelayQueue("a b", "demo", func() (metrics.RelayQueueStats, bool) { return stats, true }); !errors.Is(err, metrics.ErrInvalidTarget) {
		t.Errorf("a bad name: %v", err)
	}
	if err := m.RegisterRelayQueue("q2", "demo", nil); err == nil {
		t.Error("nil stats accepted")
	}
}
