package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pace"
)

// ErrInvalidTarget is returned, wrapped with the name, by RegisterPace for a
// target name that is not 1 to 64 bytes of [a-zA-Z0-9_.:-].
var ErrInvalidTarget = errors.New("metrics: invalid pace target name")

// RegisterPace exports a pace.Transport's counters, its Pacer's and its
// breaker's, labelled target=name: name is the operator's name for the
// target, 1 to 64 bytes of [a-zA-Z0-9_.:-] (else ErrInvalidTarget). The
// Transport's Stats are read once per scrape, so the values of one scrape are
// consistent with each other. The series are <namespace>_pace_ (by
// default sluice_pace_) followed by:
//
//   - effective_rate, rate_limit, queued, in_flight: the Pacer now (gauges);
//   - wait_seconds_total and granted_total: their ratio is the mean wait;
//   - requests_total, tries_total, retries_total, throttled_total,
//     failures_total, retry_after_capped_total,
//     retry_budget_exhausted_total, gave_up_total: the Transport;
//   - holds_total, learned_total: the Pacer's holds (Retry-After, or a field
//     saying nothing is left until a reset) and the policies it learned;
//   - breaker_state (0 closed, 1 open, 2 half-open), breaker_opens_total,
//     breaker_rejected_total: the breaker.
//
// Registering a second Transport under a name already registered, or a nil
// t, fails with an error naming the target. Transports that share a Pacer
// each export that Pacer's series, so those are not to be summed across them.
func (m *Metrics) RegisterPace(name string, t *pace.Transport) error {
	if !validTarget(name) {
		return fmt.Errorf("%w: %q", ErrInvalidTarget, name)
	}
	if t == nil {
		return fmt.Errorf("metrics: register pace target %q: nil Transport", name)
	}
	labels := prometheus.Labels{"target": name}
	ns := m.namespace + "_pace"
	c := func(n, help string, kind prometheus.ValueType, value func(pace.TransportStats) float64) counter[pace.TransportStats] {
		return counter[pace.TransportStats]{prometheus.NewDesc(prometheus.BuildFQName(ns, "", n), help, nil, labels), kind, value}
	}
	u := func(f func(pace.TransportStats) uint64) func(pace.TransportStats) float64 {
		return func(x pace.TransportStats) float64 { return float64(f(x)) }
	}
	gauge, count := prometheus.GaugeValue, prometheus.CounterValue
	sc := &statsCollector[pace.TransportStats]{t.Stats, []counter[pace.TransportStats]{
		c("effective_rate", "Cost granted per second by the pacer, measured over the last second.", gauge, func(x pace.TransportStats) float64 { return x.Pacer.EffectiveRate }),
		c("rate_limit", "Rate in use, in cost per second: the slowest of the configured, learned and adaptive limits; +Inf when there is none.", gauge, func(x pace.TransportStats) float64 { return x.Pacer.Rate }),
		c("queued", "Reservations waiting for the pacer now.", gauge, func(x pace.TransportStats) float64 { return float64(x.Pacer.Queued) }),
		c("in_flight", "Granted reservations not yet done now (counted only under MaxInFlight).", gauge, func(x pace.TransportStats) float64 { return float64(x.Pacer.InFlight) }),
		c("wait_seconds_total", "Time granted reservations spent queued, in seconds; divided by granted_total, the mean wait.", count, func(x pace.TransportStats) float64 { return x.Pacer.Waited.Seconds() }),
		c("granted_total", "Reservations the pacer granted (one per try).", count, u(func(x pace.TransportStats) uint64 { return x.Pacer.Granted })),
		c("requests_total", "Requests the transport was given.", count, u(func(x pace.TransportStats) uint64 { return x.Requests })),
		c("tries_total", "Tries sent to the target, first tries and retries.", count, u(func(x pace.TransportStats) uint64 { return x.Tries })),
		c("retries_total", "Tries after a request's first.", count, u(func(x pace.TransportStats) uint64 { return x.Retries })),
		c("throttled_total", "Throttled answers: 429, or 503 with Retry-After.", count, u(func(x pace.TransportStats) uint64 { return x.Throttled })),
		c("failures_total", "Failed tries: 5xx answers and round-trip errors.", count, u(func(x pace.TransportStats) uint64 { return x.Failures })),
		c("retry_after_capped_total", "Retry-After waits cut to MaxRetryAfter.", count, u(func(x pace.TransportStats) uint64 { return x.RetryAfterCapped })),
		c("retry_budget_exhausted_total", "Retries refused by the retry budget.", count, u(func(x pace.TransportStats) uint64 { return x.BudgetSpent })),
		c("gave_up_total", "Requests that stopped retrying and returned their last answer or error.", count, u(func(x pace.TransportStats) uint64 { return x.GaveUp })),
		c("holds_total", "Times the pacer's hold on every request was lengthened: a Retry-After, or a RateLimit or X-RateLimit-* field saying nothing is left until a reset.", count, u(func(x pace.TransportStats) uint64 { return x.Pacer.Holds })),
		c("learned_total", "Policies of the target (RateLimit-Policy) learned or changed.", count, u(func(x pace.TransportStats) uint64 { return x.Pacer.Learned })),
		c("breaker_state", "Circuit breaker state: 0 closed, 1 open, 2 half-open.", gauge, func(x pace.TransportStats) float64 { return breakerState(x.Breaker.State) }),
		c("breaker_opens_total", "Times the circuit breaker opened.", count, u(func(x pace.TransportStats) uint64 { return x.Breaker.Opens })),
		c("breaker_rejected_total", "Requests the circuit breaker refused.", count, u(func(x pace.TransportStats) uint64 { return x.Breaker.Rejected })),
	}}
	if err := m.registry.Register(sc); err != nil {
		return fmt.Errorf("metrics: register pace target %q: %w", name, err)
	}
	return nil
}

// breakerState is the exported value of a breaker state, fixed here rather
// than taken from the order of pace's constants; a state this package does
// not know is exported as its own number.
func breakerState(s pace.BreakerState) float64 {
	switch s {
	case pace.BreakerClosed:
		return 0
	case pace.BreakerOpen:
		return 1
	case pace.BreakerHalfOpen:
		return 2
	default:
		return float64(s)
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
