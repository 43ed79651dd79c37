package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TLSStats is what a TLS listener's certificate files say at scrape time.
type TLSStats struct {
	// NotAfter is the expiry of the certificate in force.
	NotAfter time.Time
	// Reloads and Refused count the reloads of its files that put new
	// ones in force, and those refused (the old ones stayed).
	Reloads, Refused uint64
}

// RegisterTLS exports a certificate's state, labelled certificate=name
// (the listeners that present it): <namespace>_tls_certificate_expiry_timestamp_seconds
// (alert on it minus time()) and <namespace>_tls_reloads_total{result="ok"|"refused"}.
// stats is called once per scrape and must be safe for concurrent use. A
// nil stats, or a name already registered, is an error.
func (m *Metrics) RegisterTLS(name string, stats func() TLSStats) error {
	if stats == nil {
		return fmt.Errorf("metrics: register TLS %s: %w", name, errNoStats)
	}
	labels := prometheus.Labels{"certificate": name}
	desc := func(metric, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(m.namespace, "tls", metric), help, variable, labels)
	}
	c := &tlsCollector{
		stats:   stats,
		expiry:  desc("certificate_expiry_timestamp_seconds", "When the certificate in force expires, in Unix seconds."),
		reloads: desc("reloads_total", "Reloads of the TLS files, by result (ok: the new files are in force; refused: they were bad, and the certificate in force stayed).", "result"),
	}
	if err := m.registry.Register(c); err != nil {
		return fmt.Errorf("metrics: register TLS %s: %w", name, err)
	}
	return nil
}

// HandshakeFailures returns the counter of a TLS listener's failed
// handshakes (a client without an acceptable certificate under mTLS, an
// old TLS version, a scanner): <namespace>_tls_handshake_failures_total{listener}.
// Its Inc is safe for concurrent use.
func (m *Metrics) HandshakeFailures(listener string) (prometheus.Counter, error) {
	m.handshakesOnce.Do(func() {
		m.handshakes = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: m.namespace, Subsystem: "tls", Name: "handshake_failures_total",
			Help: "TLS handshakes that failed, by listener: a client without an acceptable certificate, an old TLS version, a scanner.",
		}, []string{"listener"})
		m.handshakesErr = m.registry.Register(m.handshakes)
	})
	if m.handshakesErr != nil {
		return nil, fmt.Errorf("metrics: handshake failures: %w", m.handshakesErr)
	}
	return m.handshakes.WithLabelValues(listener), nil
}

type tlsCollector struct {
	stats           func() TLSStats
	expiry, reloads *prometheus.Desc
}

func (c *tlsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.expiry
	ch <- c.reloads
}

func (c *tlsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	ch <- prometheus.MustNewConstMetric(c.expiry, prometheus.GaugeValue, float64(s.NotAfter.Unix()))
	ch <- prometheus.MustNewConstMetric(c.reloads, prometheus.CounterValue, float64(s.Reloads), "ok")
	ch <- prometheus.MustNewConstMetric(c.reloads, prometheus.CounterValue, float64(s.Refused), "refused")
}
