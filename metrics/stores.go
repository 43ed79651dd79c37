package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// RedisStats are the counters RegisterRedis exports, read from a Redis
// store at each scrape. Its fields are redisstore.Stats' (names, types and
// order), so a caller converts one to the other:
//
//	m.RegisterRedis(func() metrics.RedisStats { return metrics.RedisStats(store.Stats()) })
//
// and the compiler checks that the two stay in step.
type RedisStats struct {
	Calls          uint64 // script calls sent to Redis
	NoScript       uint64 // NOSCRIPT replies, answered by sending the script (EVAL)
	Failures       uint64 // calls that failed to get an answer (timeout, transport, unavailable)
	Timeouts       uint64 // of which timeouts
	FailOpen       uint64 // decisions made by the FailOpen policy
	FailClosed     uint64 // decisions made by the FailClosed policy
	FailLocal      uint64 // decisions made by the FailLocal policy
	BreakerOpen    bool   // whether the breaker is open now
	Unreachable    bool   // whether Redis is unreachable now
	BreakerOpens   uint64 // times the breaker opened
	DenyCacheHits  uint64 // rejections answered locally (DenyCache)
	Compensations  uint64 // spends undone after a multi-limit call across hash slots was rejected
	ClockBackwards uint64 // decisions whose Redis clock was behind a key's state (clamped)
	ChargesDropped uint64 // charges Redis could not take, under FailOpen or FailClosed
	Batches        uint64 // script calls of coalesced decisions (counted in Calls too)
	Batched        uint64 // decisions sent in them
}

// MemoryStats are the counters RegisterMemory exports, read from an
// in-process store at each scrape. Its fields are memstore.Stats' (names,
// types and order), so a caller converts one to the other:
//
//	m.RegisterMemory(func() metrics.MemoryStats { return metrics.MemoryStats(store.Stats()) })
type MemoryStats struct {
	Keys           int    // states held now
	Evictions      uint64 // keys dropped while they held live state, to stay under MaxKeys
	Expired        uint64 // keys forgotten because they were back to full
	ClockBackwards uint64 // decisions whose clock reading was behind a key's state (clamped)
}

// errNoStats is returned, wrapped, for a nil stats function.
var errNoStats = errors.New("nil stats function")

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

// gauge01 is 1 for true, 0 for false.
func gauge01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// RegisterRedis exports a Redis store's counters, as <namespace>_redis_*
// (sluice_redis_* by default): calls, failures and timeouts, the decisions
// each failure policy made, the breaker, NOSCRIPT answers, deny-cache hits,
// compensations, clamped clocks, dropped charges and coalesced batches.
// stats is called once per scrape, so the values of one scrape are
// consistent with each other;
// it must be safe for concurrent use (scrapes may overlap). A nil stats,
// or a registry that already holds these series, is an error.
func (m *Metrics) RegisterRedis(stats func() RedisStats) error {
	if stats == nil {
		return fmt.Errorf("metrics: register redis: %w", errNoStats)
	}
	ns := m.namespace + "_redis"
	st := func(f func(RedisStats) uint64) func(RedisStats) float64 {
		return func(x RedisStats) float64 { return float64(f(x)) }
	}
	c := &statsCollector[RedisStats]{stats, []counter[RedisStats]{
		newCounter(ns, "calls_total", "Script calls sent to Redis.", prometheus.CounterValue, st(func(x RedisStats) uint64 { return x.Calls })),
		newCounter(ns, "failures_total", "Calls that got no answer (timeout, transport, Redis unavailable).", prometheus.CounterValue, st(func(x RedisStats) uint64 { return x.Failures })),
		newCounter(ns, "timeouts_total", "Calls that timed out.", prometheus.CounterValue, st(func(x RedisStats) uint64 { return x.Timeouts })),
		newCounter(ns, "fallback_fail_open_total", "Decisions made by the fail_open policy while Redis could not answer.", prometheus.CounterValue, st(func(x RedisStats) uint64 { return x.FailOpen })),
		newCounter(ns, "fallback_fail_closed_total", "Decisions made by the fail_closed policy while Redis could not answer.", prometheus.CounterValue, st(func(x RedisStats) uint64 { return x.FailClosed })),
		newCounter(ns, "fallback_fail_local_total", "Decisions made in process by the fail_local policy while Redis could not answer.", prometheus.CounterValue, st(func(x RedisStats) uint64 { return x.FailLocal })),
		newCounter(ns, "breaker_open", "1 while the breaker is open (Redis is not called).", prometheus.GaugeValue, func(x RedisStats) float64 { return gauge01(x.BreakerOpen) }),
		newCounter(ns, "unreachable", "1 while Redis is unreachable (its last call, or connection attempt, failed for want of Redis): the failure policies decide.", prometheus.GaugeValue, func(x RedisStats) float64 { return gauge01(x.Unreachable) }),
		newCounter(ns, "breaker_opens_total", "Times the breaker opened.", prometheus.CounterValue, st(func(x RedisStats) uint64 { return x.BreakerOpens })),
		newCounter(ns, "noscript_total", "NOSCRIPT replies answered by sending the script.", prometheus.CounterValue, st(func(x RedisStats) uint64 { return x.NoScript })),
		newCounter(ns, "deny_cache_hits_total", "Rejections answered in process by the deny cache.", prometheus.CounterValue, st(func(x RedisStats) uint64 { return x.DenyCacheHits })),
		newCounter(ns, "compensations_total", "Spends undone after a multi-limit call across hash slots was rejected.", prometheus.CounterValue, st(func(x RedisStats) uint64 { return x.Compensations })),
		newCounter(ns, "clock_backwards_total", "Decisions whose Redis clock was behind a key's state.", prometheus.CounterValue, st(func(x RedisStats) uint64 { return x.ClockBackwards })),
		newCounter(ns, "charges_dropped_total", "Charges Redis could not take, under fail_open or fail_closed.", prometheus.CounterValue, st(func(x RedisStats) uint64 { return x.ChargesDropped })),
		newCounter(ns, "batches_total", "Script calls that carried coalesced decisions (counted in calls_total too).", prometheus.CounterValue, st(func(x RedisStats) uint64 { return x.Batches })),
		newCounter(ns, "batched_decisions_total", "Decisions sent in coalesced script calls; divided by batches_total, the mean batch.", prometheus.CounterValue, st(func(x RedisStats) uint64 { return x.Batched })),
	}}
	return m.registry.Register(c)
}

// RegisterMemory exports an in-process store's counters, as
// <namespace>_memory_* (sluice_memory_* by default): keys held, keys
// evicted to stay under MaxKeys, keys expired, clamped clocks. stats is
// called once per scrape and must be safe for concurrent use. A nil stats,
// or a registry that already holds these series, is an error.
func (m *Metrics) RegisterMemory(stats func() MemoryStats) error {
	if stats == nil {
		return fmt.Errorf("metrics: register memory: %w", errNoStats)
	}
	ns := m.namespace + "_memory"
	c := &statsCollector[MemoryStats]{stats, []counter[MemoryStats]{
		newCounter(ns, "keys", "States held now.", prometheus.GaugeValue, func(x MemoryStats) float64 { return float64(x.Keys) }),
		newCounter(ns, "evictions_total", "Keys dropped while they held live state, to stay under MaxKeys (each restarts full).", prometheus.CounterValue, func(x MemoryStats) float64 { return float64(x.Evictions) }),
		newCounter(ns, "expired_total", "Keys forgotten because they were back to full.", prometheus.CounterValue, func(x MemoryStats) float64 { return float64(x.Expired) }),
		newCounter(ns, "clock_backwards_total", "Decisions whose clock reading was behind a key's state.", prometheus.CounterValue, func(x MemoryStats) float64 { return float64(x.ClockBackwards) }),
	}}
	return m.registry.Register(c)
}
