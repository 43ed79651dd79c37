package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Reloads counts configuration reloads by result: ok (the new
// configuration is in force) or refused (it was bad and the previous one
// stayed). It is safe for concurrent use.
type Reloads struct {
	vec *prometheus.CounterVec
}

// RegisterReloads registers <namespace>_config_reloads_total{result}
// (sluice_config_reloads_total by default). A result's series appears at
// its first count. It fails if the registry already holds the metric.
func (m *Metrics) RegisterReloads() (*Reloads, error) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: m.namespace, Name: "config_reloads_total",
		Help: "Configuration reloads, by result (ok, or refused: the file was bad and the previous configuration stayed).",
	}, []string{"result"})
	if err := m.registry.Register(vec); err != nil {
		return nil, fmt.Errorf("metrics: reloads: %w", err)
	}
	return &Reloads{vec: vec}, nil
}

// OK counts a reload that put a new configuration in force.
func (r *Reloads) OK() { r.vec.WithLabelValues("ok").Inc() }

// Refused counts a reload refused: the previous configuration stayed.
func (r *Reloads) Refused() { r.vec.WithLabelValues("refused").Inc() }
