package metrics

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrInvalidTarget is returned, wrapped with the name, by RegisterPace for a
// target name that is not 1 to 64 bytes of [a-zA-Z0-9_.:-].
var ErrInvalidTarget = errors.New("metrics: invalid pace target name")

// PaceStats are the counters RegisterPace exports for one client-side
// target, read at each scrape: a pace.Transport's, its Pacer's and its
// breaker's (pace.TransportStats, flattened), e.g.
//
//	func() metrics.PaceStats {
//		s := tr.Stats()
//		return metrics.PaceStats{Requests: s.Requests, /* … */
//			EffectiveRate: s.Pacer.EffectiveRate, /* … */
//			Breaker: s.Breaker.State.String(), BreakerOpens: s.Breaker.Opens, BreakerRejected: s.Breaker.Rejected}
//	}
type PaceStats struct {
	// The Transport: requests it was given; tries sent (first tries and
	// retries); tries after a request's first; throttled answers (429, 503
	// with Retry-After); failed tries (5xx, round-trip errors); Retry-After
	// waits cut to MaxRetryAfter; retries the retry budget refused;
	// requests that stopped retrying and returned their last answer; 409
	// answers to tries fenced by a fleet's share (pace.TransportOptions.Share).
	Requests, Tries, Retries, Throttled, Failures, RetryAfterCapped, BudgetSpent, GaveUp, Fenced uint64

	// EffectiveRate is the cost granted per second, measured over the last
	// second; Rate the rate in use, in cost per second (+Inf: no limit).
	EffectiveRate, Rate float64
	// Queued and InFlight are the reservations waiting and the granted
	// ones not yet done, now.
	Queued, InFlight int
	// Waited is the time granted reservations spent queued, in all.
	Waited time.Duration
	// Granted counts granted reservations; Holds the times the pacer's hold
	// was lengthened; Learned the target's policies learned or changed.
	Granted, Holds, Learned uint64

	// Breaker is the circuit breaker's state, as pace.BreakerState's
	// String names it: "closed", "open" or "half_open" (exported as 0, 1
	// and 2; anything else as -1). BreakerOpens counts the times it
	// opened, BreakerRejected the requests it refused.
	Breaker                       string
	BreakerOpens, BreakerRejected uint64
}

// RegisterPace exports a client-side target's counters, labelled
// target=name: name is the operator's name for the target, 1 to 64 bytes
// of [a-zA-Z0-9_.:-] (else ErrInvalidTarget). stats is called once per
// scrape, so the values of one scrape are consistent with each other; it
// must be safe for concurrent use. The series are <namespace>_pace_ (by
// default sluice_pace_) followed by:
//
//   - effective_rate, rate_limit, queued, in_flight: the Pacer now (gauges);
//   - wait_seconds_total and granted_total: their ratio is the mean wait;
//   - requests_total, tries_total, retries_total, throttled_total,
//     failures_total, retry_after_capped_total,
//     retry_budget_exhausted_total, gave_up_total, fenced_total: the
//     Transport;
//   - holds_total, learned_total: the Pacer's holds (Retry-After, or a field
//     saying nothing is left until a reset) and the policies it learned;
//   - breaker_state (0 closed, 1 open, 2 half-open), breaker_opens_total,
//     breaker_rejected_total: the breaker.
//
// Registering a second target under a name already registered, or a nil
// stats, fails with an error naming the target. Transports that share a
// Pacer each export that Pacer's series, so those are not to be summed
// across them.
func (m *Metrics) RegisterPace(name string, stats func() PaceStats) error {
	if !validTarget(name) {
		return fmt.Errorf("%w: %q", ErrInvalidTarget, name)
	}
	if stats == nil {
		return fmt.Errorf("metrics: register pace target %q: %w", name, errNoStats)
	}
	labels := prometheus.Labels{"target": name}
	ns := m.namespace + "_pace"
	c := func(n, help string, kind prometheus.ValueType, value func(PaceStats) float64) counter[PaceStats] {
		return counter[PaceStats]{prometheus.NewDesc(prometheus.BuildFQName(ns, "", n), help, nil, labels), kind, value}
	}
	u := func(f func(PaceStats) uint64) func(PaceStats) float64 {
		return func(x PaceStats) float64 { return float64(f(x)) }
	}
	gauge, count := prometheus.GaugeValue, prometheus.CounterValue
	sc := &statsCollector[PaceStats]{stats, []counter[PaceStats]{
		c("effective_rate", "Cost granted per second by the pacer, measured over the last second.", gauge, func(x PaceStats) float64 { return x.EffectiveRate }),
		c("rate_limit", "Rate in use, in cost per second: the slowest of the configured, learned and adaptive limits; +Inf when there is none.", gauge, func(x PaceStats) float64 { return x.Rate }),
		c("queued", "Reservations waiting for the pacer now.", gauge, func(x PaceStats) float64 { return float64(x.Queued) }),
		c("in_flight", "Granted reservations not yet done now (counted only under MaxInFlight).", gauge, func(x PaceStats) float64 { return float64(x.InFlight) }),
		c("wait_seconds_total", "Time granted reservations spent queued, in seconds; divided by granted_total, the mean wait.", count, func(x PaceStats) float64 { return x.Waited.Seconds() }),
		c("granted_total", "Reservations the pacer granted (one per try).", count, u(func(x PaceStats) uint64 { return x.Granted })),
		c("requests_total", "Requests the transport was given.", count, u(func(x PaceStats) uint64 { return x.Requests })),
		c("tries_total", "Tries sent to the target, first tries and retries.", count, u(func(x PaceStats) uint64 { return x.Tries })),
		c("retries_total", "Tries after a request's first.", count, u(func(x PaceStats) uint64 { return x.Retries })),
		c("throttled_total", "Throttled answers: 429, or 503 with Retry-After.", count, u(func(x PaceStats) uint64 { return x.Throttled })),
		c("failures_total", "Failed tries: 5xx answers and round-trip errors.", count, u(func(x PaceStats) uint64 { return x.Failures })),
		c("retry_after_capped_total", "Retry-After waits cut to MaxRetryAfter.", count, u(func(x PaceStats) uint64 { return x.RetryAfterCapped })),
		c("retry_budget_exhausted_total", "Retries refused by the retry budget.", count, u(func(x PaceStats) uint64 { return x.BudgetSpent })),
		c("gave_up_total", "Requests that stopped retrying and returned their last answer or error.", count, u(func(x PaceStats) uint64 { return x.GaveUp })),
		c("fenced_total", "409 answers to tries fenced by the fleet's share: the partition had a newer holder.", count, u(func(x PaceStats) uint64 { return x.Fenced })),
		c("holds_total", "Times the pacer's hold on every request was lengthened: a Retry-After, or a RateLimit or X-RateLimit-* field saying nothing is left until a reset.", count, u(func(x PaceStats) uint64 { return x.Holds })),
		c("learned_total", "Policies of the target (RateLimit-Policy) learned or changed.", count, u(func(x PaceStats) uint64 { return x.Learned })),
		c("breaker_state", "Circuit breaker state: 0 closed, 1 open, 2 half-open.", gauge, func(x PaceStats) float64 { return breakerState(x.Breaker) }),
		c("breaker_opens_total", "Times the circuit breaker opened.", count, u(func(x PaceStats) uint64 { return x.BreakerOpens })),
		c("breaker_rejected_total", "Requests the circuit breaker refused.", count, u(func(x PaceStats) uint64 { return x.BreakerRejected })),
	}}
	if err := m.registry.Register(sc); err != nil {
		return fmt.Errorf("metrics: register pace target %q: %w", name, err)
	}
	return nil
}

// breakerState is the exported value of a breaker state, fixed here by
// name rather than taken from the order of pace's constants; a state this
// package does not know is -1.
func breakerState(s string) float64 {
	switch s {
	case "closed":
		return 0
	case "open":
		return 1
	case "half_open":
		return 2
	default:
		return -1
	}
}

// validTarget reports whether name is 1 to 64 bytes of [a-zA-Z0-9_.:-].
func validTarget(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for i := range len(name) {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '.', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}
