package metrics

import (
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RelayQueueStats are one relay queue's figures, read at each scrape (a
// relay.QueueStats, flattened): the same numbers the relay's API and
// console show.
type RelayQueueStats struct {
	// Depth, Ready, Scheduled, InFlight and Dead are the queue's tasks
	// now; OldestAge the wait of the oldest ready one.
	Depth, Ready, Scheduled, InFlight, Dead int64
	OldestAge                               time.Duration
	// EffectiveRate is the cost released per second (last 5 s); Limit
	// the target's rate in use (+Inf: not known yet).
	EffectiveRate, Limit float64
	// ETA is how long the backlog will take; ETAKnown false when no
	// rate is known (exported as NaN).
	ETA      time.Duration
	ETAKnown bool
	// MeanWait is the mean time from ready to the first delivery.
	MeanWait time.Duration
	// Counters since the relay started.
	Delivered, Throttled, Failed, DeadLettered uint64
	// Paused: the queue's deliveries are paused.
	Paused bool
}

// RegisterRelayQueue exports one relay queue's figures, labelled
// queue=queue and target=target — never a task or a key, so the series
// are bounded by the configuration. stats is called once per scrape and
// says false when it cannot read the figures (nothing is exported then).
// The series are <namespace>_relay_ followed by depth, ready, scheduled,
// in_flight, dead, oldest_age_seconds, effective_rate, rate_limit,
// eta_seconds, mean_wait_seconds, paused (gauges) and delivered_total,
// throttled_total, failed_total, dead_lettered_total (counters).
func (m *Metrics) RegisterRelayQueue(queue, target string, stats func() (RelayQueueStats, bool)) error {
	if !validTarget(queue) || !validTarget(target) {
		return fmt.Errorf("%w: queue %q, target %q", ErrInvalidTarget, queue, target)
	}
	if stats == nil {
		return fmt.Errorf("metrics: register relay queue %q: %w", queue, errNoStats)
	}
	labels := prometheus.Labels{"queue": queue, "target": target}
	ns := m.namespace + "_relay"
	c := func(n, help string, kind prometheus.ValueType, value func(RelayQueueStats) float64) counter[RelayQueueStats] {
		return counter[RelayQueueStats]{prometheus.NewDesc(prometheus.BuildFQName(ns, "", n), help, nil, labels), kind, value}
	}
	gauge, count := prometheus.GaugeValue, prometheus.CounterValue
	rc := &relayCollector{stats: stats, counters: []counter[RelayQueueStats]{
		c("depth", "Tasks not finished: ready, scheduled and in flight.", gauge, func(x RelayQueueStats) float64 { return float64(x.Depth) }),
		c("ready", "Tasks ready to be delivered.", gauge, func(x RelayQueueStats) float64 { return float64(x.Ready) }),
		c("scheduled", "Tasks waiting for their not-before or retry instant.", gauge, func(x RelayQueueStats) float64 { return float64(x.Scheduled) }),
		c("in_flight", "Tasks taken out for delivery.", gauge, func(x RelayQueueStats) float64 { return float64(x.InFlight) }),
		c("dead", "Dead-lettered tasks kept.", gauge, func(x RelayQueueStats) float64 { return float64(x.Dead) }),
		c("oldest_age_seconds", "How long the oldest ready task has waited.", gauge, func(x RelayQueueStats) float64 { return x.OldestAge.Seconds() }),
		c("effective_rate", "Cost released per second, over the last five seconds.", gauge, func(x RelayQueueStats) float64 { return x.EffectiveRate }),
		c("rate_limit", "The target's rate in use, in cost per second; +Inf when it is not known yet.", gauge, func(x RelayQueueStats) float64 { return x.Limit }),
		c("eta_seconds", "How long the backlog will take at the queue's share of the limit; NaN when no rate is known.", gauge, func(x RelayQueueStats) float64 {
			if !x.ETAKnown {
				return math.NaN()
			}
			return x.ETA.Seconds()
		}),
		c("mean_wait_seconds", "Mean time from ready to the first delivery.", gauge, func(x RelayQueueStats) float64 { return x.MeanWait.Seconds() }),
		c("paused", "1 when the queue's deliveries are paused.", gauge, func(x RelayQueueStats) float64 { return gauge01(x.Paused) }),
		c("delivered_total", "Deliveries sent.", count, func(x RelayQueueStats) float64 { return float64(x.Delivered) }),
		c("throttled_total", "Deliveries the target throttled: 429, or 503 with Retry-After.", count, func(x RelayQueueStats) float64 { return float64(x.Throttled) }),
		c("failed_total", "Deliveries that failed: 5xx, timeouts, refused connections, retried 4xx.", count, func(x RelayQueueStats) float64 { return float64(x.Failed) }),
		c("dead_lettered_total", "Tasks dead-lettered by this relay.", count, func(x RelayQueueStats) float64 { return float64(x.DeadLettered) }),
	}}
	if err := m.registry.Register(rc); err != nil {
		return fmt.Errorf("metrics: register relay queue %q: %w", queue, err)
	}
	return nil
}

type relayCollector struct {
	stats    func() (RelayQueueStats, bool)
	counters []counter[RelayQueueStats]
}

func (c *relayCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range c.counters {
		ch <- x.desc
	}
}

func (c *relayCollector) Collect(ch chan<- prometheus.Metric) {
	s, ok := c.stats()
	if !ok {
		return
	}
	for _, x := range c.counters {
		ch <- prometheus.MustNewConstMetric(x.desc, x.kind, x.value(s))
	}
}
