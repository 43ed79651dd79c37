package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// LeaseStats are one leased limit's figures, read at each scrape from a
// lease-backed store (leasestore.LimitStats: the same fields, names,
// types and order), so a caller converts one to the other:
//
//	m.RegisterLeases(func() []metrics.LeaseStats {
//		var out []metrics.LeaseStats
//		for _, st := range store.Stats() {
//			out = append(out, metrics.LeaseStats(st))
//		}
//		return out
//	})
type LeaseStats struct {
	// Limit is the leased limit's name: the series' only label.
	Limit string
	// Keys are the keys with a lease Holder now.
	Keys int
	// Held, Usable and Quarantined are the partitions held now, those
	// spendable now, and those waiting out a quarantine.
	Held, Usable, Quarantined int
	// Unreachable counts the keys whose Holder's last round did not reach
	// the Coordinator.
	Unreachable int
	// Acquired, Released, Lost and Fenced leases; Quarantine the time
	// partitions spent in quarantine; Syncs and SyncErrors the rounds.
	Acquired, Released, Lost, Fenced uint64
	Quarantine                       time.Duration
	Syncs, SyncErrors                uint64
	// FailOpen, FailClosed and FailLocal count the decisions the failure
	// policy made; Overflow the requests for a key beyond the store's
	// bound; Stopped the Holders stopped.
	FailOpen, FailClosed, FailLocal uint64
	Overflow                        uint64
	Stopped                         uint64
}

// RegisterLeases exports a lease-backed store's figures per leased limit,
// as <namespace>_lease_* (sluice_lease_* by default), labelled
// limit=name — never a key, so the series are bounded by the
// configuration: keys, partitions_held, partitions_usable,
// partitions_quarantined, unreachable_keys (gauges), acquired_total,
// released_total, lost_total, fenced_total, quarantine_seconds_total,
// syncs_total, sync_errors_total, fallback_total{policy},
// overflow_total and stopped_total (counters). stats is called once per
// scrape and must be safe for concurrent use. A nil stats, or a registry
// that already holds these series, is an error.
func (m *Metrics) RegisterLeases(stats func() []LeaseStats) error {
	if stats == nil {
		return fmt.Errorf("metrics: register leases: %w", errNoStats)
	}
	ns := m.namespace + "_lease"
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(ns, "", name), help, append([]string{"limit"}, labels...), nil)
	}
	gauge, count := prometheus.GaugeValue, prometheus.CounterValue
	c := &leaseCollector{stats: stats, series: []leaseSeries{
		{desc("keys", "Keys of the limit with a lease Holder in this process."), gauge, func(x LeaseStats) float64 { return float64(x.Keys) }, ""},
		{desc("partitions_held", "Partitions held under a lease now."), gauge, func(x LeaseStats) float64 { return float64(x.Held) }, ""},
		{desc("partitions_usable", "Partitions spendable now: held, out of quarantine, before their local deadline."), gauge, func(x LeaseStats) float64 { return float64(x.Usable) }, ""},
		{desc("partitions_quarantined", "Partitions held and waiting out a quarantine (taken over, or never held before)."), gauge, func(x LeaseStats) float64 { return float64(x.Quarantined) }, ""},
		{desc("unreachable_keys", "Keys whose Holder's last round did not reach the Coordinator."), gauge, func(x LeaseStats) float64 { return float64(x.Unreachable) }, ""},
		{desc("acquired_total", "Leases acquired."), count, func(x LeaseStats) float64 { return float64(x.Acquired) }, ""},
		{desc("released_total", "Leases given back gracefully."), count, func(x LeaseStats) float64 { return float64(x.Released) }, ""},
		{desc("lost_total", "Leases lost: lapsed at the local deadline, not renewed, or fenced."), count, func(x LeaseStats) float64 { return float64(x.Lost) }, ""},
		{desc("fenced_total", "Stale epochs a target refused."), count, func(x LeaseStats) float64 { return float64(x.Fenced) }, ""},
		{desc("quarantine_seconds_total", "Time partitions spent in quarantine."), count, func(x LeaseStats) float64 { return x.Quarantine.Seconds() }, ""},
		{desc("syncs_total", "Rounds with the Coordinator."), count, func(x LeaseStats) float64 { return float64(x.Syncs) }, ""},
		{desc("sync_errors_total", "Rounds the Coordinator did not answer."), count, func(x LeaseStats) float64 { return float64(x.SyncErrors) }, ""},
		{desc("overflow_total", "Requests for a new key beyond the store's bound on keys, decided by the failure policy."), count, func(x LeaseStats) float64 { return float64(x.Overflow) }, ""},
		{desc("stopped_total", "Holders stopped: idle keys, changed parameters."), count, func(x LeaseStats) float64 { return float64(x.Stopped) }, ""},
	}}
	fallback := desc("fallback_total", "Decisions the failure policy made (the Coordinator out of reach and nothing usable held, or a key beyond the bound), by policy.", "policy")
	for _, p := range []struct {
		name  string
		value func(LeaseStats) float64
	}{
		{"fail_open", func(x LeaseStats) float64 { return float64(x.FailOpen) }},
		{"fail_closed", func(x LeaseStats) float64 { return float64(x.FailClosed) }},
		{"fail_local", func(x LeaseStats) float64 { return float64(x.FailLocal) }},
	} {
		c.series = append(c.series, leaseSeries{fallback, count, p.value, p.name})
	}
	if err := m.registry.Register(c); err != nil {
		return fmt.Errorf("metrics: register leases: %w", err)
	}
	return nil
}

type leaseSeries struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(LeaseStats) float64
	label string // the second label's value, if the series has one
}

type leaseCollector struct {
	stats  func() []LeaseStats
	series []leaseSeries
}

func (c *leaseCollector) Describe(ch chan<- *prometheus.Desc) {
	seen := map[*prometheus.Desc]bool{}
	for _, s := range c.series {
		if !seen[s.desc] {
			seen[s.desc] = true
			ch <- s.desc
		}
	}
}

func (c *leaseCollector) Collect(ch chan<- prometheus.Metric) {
	for _, x := range c.stats() {
		for _, s := range c.series {
			labels := []string{x.Limit}
			if s.label != "" {
				labels = append(labels, s.label)
			}
			ch <- prometheus.MustNewConstMetric(s.desc, s.kind, s.value(x), labels...)
		}
	}
}
