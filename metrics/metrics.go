// Package metrics is the Prometheus side of enforcement: an
// enforce.Observer that counts decisions by rule and outcome (never by key),
// times them, and keeps the heaviest tenants — by the cost they spent and
// by the number of their rejections, never by a cost they asked for and
// were refused — in bounded sketches (package topk) for an operator's view
// of concentration (TopTenants, TenantsHandler); and collectors that export
// a component's own counters at scrape time: a store's (RegisterRedis,
// RegisterMemory: fallbacks, failures, breaker, evictions) and a
// client-side target's pacing and retries (RegisterPace).
//
// Collectors take the stats they read: each is given a function returning
// a snapshot struct of this package (RedisStats, MemoryStats, PaceStats),
// so metrics imports no store and no client, and a program compiles only
// the components it uses. Counters of the services themselves have small
// types of their own (Refused, Reloads), so no other package of sluice
// imports client_golang.
package metrics

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/enforce"
	"github.com/sluicehq/sluice/topk"
)

// Options configures Metrics; every zero field means its default.
type Options struct {
	// Registry receives the metrics. Default: a new registry, which
	// Handler serves (with the Go runtime and process collectors).
	Registry *prometheus.Registry
	// Namespace prefixes every metric name, the store and pace collectors'
	// included (sluice_decisions_total, sluice_redis_calls_total,
	// sluice_pace_tries_total): two Metrics of different namespaces can
	// share one Registry. Default "sluice".
	Namespace string
	// Buckets of the decision latency histogram, in seconds. Default: 50 µs
	// to 1 s, for a limiter in process (µs) or over the network (ms).
	Buckets []float64
	// Tenants is the number of tenants each heaviest-tenants sketch keeps
	// (its error is at most total/Tenants). Default 1000; at most 1<<20.
	Tenants int
}

// DefaultBuckets are the latency buckets, in seconds.
var DefaultBuckets = []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1}

// Metrics observes decisions. It is safe for concurrent use.
type Metrics struct {
	registry  *prometheus.Registry
	namespace string // Options.Namespace, or "sluice"
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	errors    *prometheus.CounterVec

	rules   atomic.Pointer[map[string]*ruleSeries] // copy on write
	rulesMu sync.Mutex

	// spent counts the cost allowed requests spent, rejections the
	// number of rejections, by tenant.
	spent, rejections *topk.Sketch
	since             atomic.Int64 // Unix ns: when the sketches started

	// handshakes are the TLS listeners' failed handshakes, registered by
	// the first HandshakeFailures.
	handshakesOnce sync.Once
	handshakes     *prometheus.CounterVec
	handshakesErr  error
}

// ruleSeries are one rule's series, looked up once per rule.
type ruleSeries struct {
	outcomes [5]prometheus.Counter // by enforce.Outcome
	latency  prometheus.Observer
	errors   prometheus.Counter
}

// New returns Metrics registered in opts.Registry.
func New(opts Options) (*Metrics, error) {
	ns := cmp.Or(opts.Namespace, "sluice")
	k := cmp.Or(opts.Tenants, 1000)
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	buckets := opts.Buckets
	if len(buckets) == 0 {
		buckets = DefaultBuckets
	}
	m := &Metrics{
		registry:  reg,
		namespace: ns,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "decisions_total",
			Help: "Requests decided, by rule and outcome (allowed, rejected, shadow_rejected: would have been rejected in shadow mode, failed: the limiter failed and the rule's on_error answered, invalid: the request's cost could not be taken).",
		}, []string{"rule", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "decision_seconds",
			Help:    "Time the limiter took to decide, by rule.",
			Buckets: buckets,
		}, []string{"rule"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "limiter_errors_total",
			Help: "Limiter calls that failed with an error rather than a decision, by rule.",
		}, []string{"rule"}),
	}
	var err error
	if m.spent, err = topk.New(k); err != nil {
		return nil, fmt.Errorf("metrics: Tenants: %w", err)
	}
	m.rejections, _ = topk.New(k)
	m.since.Store(time.Now().UnixNano())
	for _, c := range []prometheus.Collector{m.decisions, m.latency, m.errors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	empty := map[string]*ruleSeries{}
	m.rules.Store(&empty)
	return m, nil
}

// Registry is where the metrics are registered, the collectors of
// RegisterRedis, RegisterMemory, RegisterPace, RegisterRefused and
// RegisterReloads included.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{Registry: m.registry})
}

var _ enforce.Observer = (*Metrics)(nil)

// Observe counts one decision; see enforce.Observer.
func (m *Metrics) Observe(e enforce.Event) {
	s := m.series(e.Rule)
	if int(e.Outcome) < len(s.outcomes) {
		s.outcomes[e.Outcome].Inc()
	}
	s.latency.Observe(e.Latency.Seconds())
	if e.Outcome == enforce.Failed {
		s.errors.Inc()
	}
	if e.Tenant == "" {
		return
	}
	switch e.Outcome {
	case enforce.Allowed:
		// What the limiter took: a rejection spends nothing, so the cost
		// it asked for, however large, never weighs here.
		m.spent.Add(e.Tenant, e.Cost)
	case enforce.Rejected, enforce.ShadowRejected:
		m.rejections.Add(e.Tenant, 1) // one rejection, whatever it asked for
	}
}

func (m *Metrics) series(rule string) *ruleSeries {
	if s, ok := (*m.rules.Load())[rule]; ok {
		return s
	}
	m.rulesMu.Lock()
	defer m.rulesMu.Unlock()
	old := *m.rules.Load()
	if s, ok := old[rule]; ok {
		return s
	}
	s := &ruleSeries{latency: m.latency.WithLabelValues(rule), errors: m.errors.WithLabelValues(rule)}
	for _, o := range enforce.Outcomes {
		s.outcomes[o] = m.decisions.WithLabelValues(rule, o.String())
	}
	next := make(map[string]*ruleSeries, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[rule] = s
	m.rules.Store(&next)
	return s
}

// Tenant is one of the heaviest tenants of a ranking.
type Tenant struct {
	Tenant string  `json:"tenant"`
	Weight float64 `json:"weight"` // at most this much (cost spent, or rejections)
	Error  float64 `json:"error"`  // and at least Weight − Error
	Share  float64 `json:"share"`  // Weight / the ranking's total
}

// Tenants is the operator's view of concentration since Since, in two
// rankings that a client cannot inflate with what it was refused:
//
//   - BySpent ranks tenants by the cost their allowed requests spent (the
//     first limit's cost); Spent is all of it. A rejected request spends
//     nothing and adds nothing here, whatever cost it asked for; a request
//     let through because the limiter failed (fail-open) spent nothing
//     either.
//   - ByRejections ranks them by the number of their rejections (shadow
//     rejections included), each counting 1 whatever its cost; Rejections
//     is all of them.
//
// Each ranking is a bounded sketch (package topk) of Options.Tenants
// counters, whose Error is at most its total / Tenants.
type Tenants struct {
	Since        time.Time `json:"since"`
	Spent        float64   `json:"spent_total"`      // cost spent by allowed requests
	Rejections   float64   `json:"rejections_total"` // rejections counted
	BySpent      []Tenant  `json:"by_spent"`
	ByRejections []Tenant  `json:"by_rejections"`
}

// TopTenants returns the n heaviest tenants by cost spent and by
// rejections (see Tenants). Tenants are the pseudonyms (or labels) the
// middleware gave. It is safe for concurrent use.
func (m *Metrics) TopTenants(n int) Tenants {
	return Tenants{
		Since:        time.Unix(0, m.since.Load()).UTC(),
		Spent:        m.spent.Total(),
		Rejections:   m.rejections.Total(),
		BySpent:      top(m.spent, n),
		ByRejections: top(m.rejections, n),
	}
}

// ResetTenants starts a new period of the heaviest-tenants view.
func (m *Metrics) ResetTenants() {
	m.spent.Reset()
	m.rejections.Reset()
	m.since.Store(time.Now().UnixNano())
}

func top(s *topk.Sketch, n int) []Tenant {
	total := s.Total()
	out := []Tenant{}
	for _, e := range s.Top(n) {
		out = append(out, Tenant{Tenant: e.Key, Weight: e.Count, Error: e.Error, Share: e.Count / total})
	}
	return out
}

// DefaultTopTenants and MaxTopTenants bound ?n= of TenantsHandler.
const (
	DefaultTopTenants = 20
	MaxTopTenants     = 1000
)

// TenantsHandler serves TopTenants as JSON (Cache-Control: no-store):
// ?n= is the number of tenants of each ranking, 1 to MaxTopTenants,
// default DefaultTopTenants; any other n is refused with 400 and
// {"error": "..."} saying why. It answers every method it is mounted
// under (mount it under GET) and does no authentication: put it behind
// the admin token. Both sluice serve and sluice gateway serve it as
// GET /admin/tenants.
func (m *Metrics) TenantsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Type", "application/json")
		refuse := func(msg string) {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf("%s: give ?n= once, a whole number from 1 to %d (tenants in each ranking; default %d)", msg, MaxTopTenants, DefaultTopTenants)})
		}
		n := DefaultTopTenants
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil { // r.URL.Query would drop the bad pair ("n=1;x") and answer the default
			refuse(fmt.Sprintf("the query string: %v", err))
			return
		}
		if vs := q["n"]; len(vs) > 1 {
			refuse(fmt.Sprintf("n given %d times", len(vs)))
			return
		} else if len(vs) == 1 {
			if n, err = strconv.Atoi(vs[0]); err != nil || n < 1 || n > MaxTopTenants {
				refuse(fmt.Sprintf("n %q", vs[0]))
				return
			}
		}
		_ = json.NewEncoder(w).Encode(m.TopTenants(n))
	})
}

// ResetTenantsHandler calls ResetTenants and answers 204 No Content; mount
// it under POST, behind the admin token (POST /admin/tenants/reset).
func (m *Metrics) ResetTenantsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		m.ResetTenants()
		w.WriteHeader(http.StatusNoContent)
	})
}
