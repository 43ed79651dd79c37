package metrics_test

import (
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/pace"
)

// TestRegisterPace sends one request through a pace.Transport to a target
// that throttles it once (429, Retry-After: 1) and then answers 200, and
// reads the counters back from the registry. It takes about a second, the
// Retry-After. Not parallel: goleak looks at every goroutine.
func TestRegisterPace(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // last: after the server and connections are closed

	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	base := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(base.CloseIdleConnections) // before srv.Close: cleanups run last first

	tr, err := pace.NewTransport(pace.TransportOptions{Base: base})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Pacer().Close)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(metrics.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterPace("api.example.com:443", paceStats(tr)); err != nil {
		t.Fatal(err)
	}

	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("got %d %q, %v; want 200 \"ok\"", resp.StatusCode, body, err)
	}

	got := scrapePace(t, reg, "api.example.com:443")
	want := map[string]float64{
		"sluice_pace_requests_total":               1,
		"sluice_pace_tries_total":                  2,
		"sluice_pace_retries_total":                1,
		"sluice_pace_throttled_total":              1,
		"sluice_pace_failures_total":               0,
		"sluice_pace_retry_after_capped_total":     0,
		"sluice_pace_retry_budget_exhausted_total": 0,
		"sluice_pace_gave_up_total":                0,
		"sluice_pace_fenced_total":                 0,
		"sluice_pace_granted_total":                2,
		"sluice_pace_queued":                       0,
		"sluice_pace_in_flight":                    0,
		"sluice_pace_breaker_state":                0,
		"sluice_pace_breaker_opens_total":          0,
		"sluice_pace_breaker_rejected_total":       0,
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, w)
		}
	}
	if g := got["sluice_pace_holds_total"]; g < 1 {
		t.Errorf("sluice_pace_holds_total = %v, want ≥ 1 (the Retry-After)", g)
	}
	for _, name := range []string{"sluice_pace_wait_seconds_total", "sluice_pace_effective_rate", "sluice_pace_learned_total"} {
		if g, ok := got[name]; !ok || g < 0 || math.IsNaN(g) {
			t.Errorf("%s = %v (present %v), want a value ≥ 0", name, g, ok)
		}
	}
	if g, ok := got["sluice_pace_rate_limit"]; !ok || !(math.IsInf(g, 1) || g > 0) {
		t.Errorf("sluice_pace_rate_limit = %v (present %v), want > 0 or +Inf", g, ok)
	}
	if len(got) != 20 {
		t.Errorf("%d series for the target, want 20: %v", len(got), got)
	}
}

// paceStats reads a pace.Transport's stats as RegisterPace takes them.
func paceStats(tr *pace.Transport) func() metrics.PaceStats {
	return func() metrics.PaceStats {
		s := tr.Stats()
		return metrics.PaceStats{
			Requests: s.Requests, Tries: s.Tries, Retries: s.Retries, Throttled: s.Throttled, Failures: s.Failures,
			RetryAfterCapped: s.RetryAfterCapped, BudgetSpent: s.BudgetSpent, GaveUp: s.GaveUp, Fenced: s.Fenced,
			EffectiveRate: s.Pacer.EffectiveRate, Rate: s.Pacer.Rate, Queued: s.Pacer.Queued, InFlight: s.Pacer.InFlight,
			Waited: s.Pacer.Waited, Granted: s.Pacer.Granted, Holds: s.Pacer.Holds, Learned: s.Pacer.Learned,
			Breaker: s.Breaker.State.String(), BreakerOpens: s.Breaker.Opens, BreakerRejected: s.Breaker.Rejected,
		}
	}
}

// scrapePace gathers reg and returns the value of every sluice_pace_ series
// labelled target=target, by metric name.
func scrapePace(t *testing.T, reg *prometheus.Registry, target string) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "sluice_pace_") {
			continue
		}
		for _, s := range f.GetMetric() {
			var labelled bool
			for _, l := range s.GetLabel() {
				labelled = labelled || l.GetName() == "target" && l.GetValue() == target
			}
			if !labelled {
				continue
			}
			switch {
			case s.GetCounter() != nil:
				out[f.GetName()] = s.GetCounter().GetValue()
			case s.GetGauge() != nil:
				out[f.GetName()] = s.GetGauge().GetValue()
			}
		}
	}
	return out
}

// TestRegisterPaceRateLimitInf checks that a Pacer with no limit exports its
// Rate, +Inf, as it is: Prometheus takes +Inf as a value.
func TestRegisterPaceRateLimitInf(t *testing.T) {
	t.Parallel()
	tr, err := pace.NewTransport(pace.TransportOptions{}) // a Pacer with no limit: Rate +Inf
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := metrics.New(metrics.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterPace("t", paceStats(tr)); err != nil {
		t.Fatal(err)
	}
	if g := scrapePace(t, reg, "t")["sluice_pace_rate_limit"]; !math.IsInf(g, 1) {
		t.Fatalf("sluice_pace_rate_limit = %v, want +Inf", g)
	}
}

func TestRegisterPaceRefused(t *testing.T) {
	t.Parallel()
	m, err := metrics.New(metrics.Options{Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	newTransport := func() func() metrics.PaceStats {
		tr, err := pace.NewTransport(pace.TransportOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return paceStats(tr)
	}
	for _, name := range []string{"", strings.Repeat("a", 65), "a b", "a/b", `a"b`, "a\nb", "é", "a{b}"} {
		if err := m.RegisterPace(name, newTransport()); !errors.Is(err, metrics.ErrInvalidTarget) {
			t.Errorf("RegisterPace(%q) = %v, want ErrInvalidTarget", name, err)
		}
	}
	for _, name := range []string{strings.Repeat("a", 64), "api.example.com:443", "A_z-0.9:"} {
		if err := m.RegisterPace(name, newTransport()); err != nil {
			t.Errorf("RegisterPace(%q) = %v, want nil", name, err)
		}
	}
	if err := m.RegisterPace("ok", nil); err == nil {
		t.Error("RegisterPace with nil stats accepted")
	}
	if err := m.RegisterPace("api.example.com:443", newTransport()); err == nil || !strings.Contains(err.Error(), `"api.example.com:443"`) {
		t.Errorf("second Transport under one name: %v, want an error naming it", err)
	}
}
