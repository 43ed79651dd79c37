package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/redisstore"
)

// counter is one value a stats collector exports at scrape time, taken from
// the stats S read for that scrape.
type counter[S any] struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(S) float64
}

// statsCollector reads a component's stats once per scrape and exports its
// counters from that one reading, so they are consistent with each other.
type statsCollector[S any] struct {
	stats    func() S
	counters []counter[S]
}

func (c *statsCollector[S]) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range c.counters {
		ch <- x.desc
	}
}

func (c *statsCollector[S]) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for _, x := range c.counters {
		ch <- prometheus.MustNewConstMetric(x.desc, x.kind, x.value(s))
	}
}

func newCounter[S any](ns, name, help string, kind prometheus.ValueType, value func(S) float64) counter[S] {
	return counter[S]{prometheus.NewDesc(prometheus.BuildFQName(ns, "", name), help, nil, nil), kind, value}
}

// RegisterRedis exports a redisstore.Store's counters, as
// <namespace>_redis_* (sluice_redis_* by default): calls, failures and
// timeouts, the decisions each failure policy made, the breaker, NOSCRIPT
// answers, deny-cache hits, compensations, clamped clocks and dropped
// charges.
func (m *Metrics) RegisterRedis(s *redisstore.Store) error {
	ns := m.namespace + "_redis"
	st := func(f func(redisstore.Stats) uint64) func(redisstore.Stats) float64 {
		return func(x redisstore.Stats) float64 { return float64(f(x)) }
	}
	open := func(x redisstore.Stats) float64 {
		if x.BreakerOpen {
			return 1
		}
		return 0
	}
	c := &statsCollector[redisstore.Stats]{s.Stats, []counter[redisstore.Stats]{
		newCounter(ns, "calls_total", "Script calls sent to Redis.", prometheus.CounterValue, st(func(x redisstore.Stats) uint64 { return x.Calls })),
		newCounter(ns, "failures_total", "Calls that got no answer (timeout, transport, Redis unavailable).", prometheus.CounterValue, st(func(x redisstore.Stats) uint64 { return x.Failures })),
		newCounter(ns, "timeouts_total", "Calls that timed out.", prometheus.CounterValue, st(func(x redisstore.Stats) uint64 { return x.Timeouts })),
		newCounter(ns, "fallback_fail_open_total", "Decisions made by the fail_open policy while Redis could not answer.", prometheus.CounterValue, st(func(x redisstore.Stats) uint64 { return x.FailOpen })),
		newCounter(ns, "fallback_fail_closed_total", "Decisions made by the fail_closed policy while Redis could not answer.", prometheus.CounterValue, st(func(x redisstore.Stats) uint64 { return x.FailClosed })),
		newCounter(ns, "fallback_fail_local_total", "Decisions made in process by the fail_local policy while Redis could not answer.", prometheus.CounterValue, st(func(x redisstore.Stats) uint64 { return x.FailLocal })),
		newCounter(ns, "breaker_open", "1 while the breaker is open (Redis is not called).", prometheus.GaugeValue, open),
		newCounter(ns, "unreachable", "1 while Redis is unreachable (its last call, or connection attempt, failed for want of Redis): the failure policies decide.", prometheus.GaugeValue, func(x redisstore.Stats) float64 {
			if x.Unreachable {
				return 1
			}
			return 0
		}),
		newCounter(ns, "breaker_opens_total", "Times the breaker opened.", prometheus.CounterValue, st(func(x redisstore.Stats) uint64 { return x.BreakerOpens })),
		newCounter(ns, "noscript_total", "NOSCRIPT replies answered by sending the script.", prometheus.CounterValue, st(func(x redisstore.Stats) uint64 { return x.NoScript })),
		newCounter(ns, "deny_cache_hits_total", "Rejections answered in process by the deny cache.", prometheus.CounterValue, st(func(x redisstore.Stats) uint64 { return x.DenyCacheHits })),
		newCounter(ns, "compensations_total", "Spends undone after a multi-limit call across hash slots was rejected.", prometheus.CounterValue, st(func(x redisstore.Stats) uint64 { return x.Compensations })),
		newCounter(ns, "clock_backwards_total", "Decisions whose Redis clock was behind a key's state.", prometheus.CounterValue, st(func(x redisstore.Stats) uint64 { return x.ClockBackwards })),
		newCounter(ns, "charges_dropped_total", "Charges Redis could not take, under fail_open or fail_closed.", prometheus.CounterValue, st(func(x redisstore.Stats) uint64 { return x.ChargesDropped })),
	}}
	return m.registry.Register(c)
}

// RegisterMemory exports a memstore.Store's counters, as
// <namespace>_memory_* (sluice_memory_* by default): keys held, keys
// evicted to stay under MaxKeys, keys expired, clamped clocks.
func (m *Metrics) RegisterMemory(s *memstore.Store) error {
	ns := m.namespace + "_memory"
	c := &statsCollector[memstore.Stats]{s.Stats, []counter[memstore.Stats]{
		newCounter(ns, "keys", "States held now.", prometheus.GaugeValue, func(x memstore.Stats) float64 { return float64(x.Keys) }),
		newCounter(ns, "evictions_total", "Keys dropped while they held live state, to stay under MaxKeys (each restarts full).", prometheus.CounterValue, func(x memstore.Stats) float64 { return float64(x.Evictions) }),
		newCounter(ns, "expired_total", "Keys forgotten because they were back to full.", prometheus.CounterValue, func(x memstore.Stats) float64 { return float64(x.Expired) }),
		newCounter(ns, "clock_backwards_total", "Decisions whose clock reading was behind a key's state.", prometheus.CounterValue, func(x memstore.Stats) float64 { return float64(x.ClockBackwards) }),
	}}
	return m.registry.Register(c)
}
