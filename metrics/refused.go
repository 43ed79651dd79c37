package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Refused counts the requests a transport refused as bad input (a path
// that cannot be normalised, a header refused by policy, a body over its
// bound), by reason: a short fixed code, never a value from the request.
// It is safe for concurrent use.
type Refused struct {
	vec *prometheus.CounterVec
}

// RegisterRefused registers <namespace>_requests_refused_total{reason}
// (sluice_requests_refused_total by default). It fails if the registry
// already holds the metric.
func (m *Metrics) RegisterRefused() (*Refused, error) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: m.namespace, Name: "requests_refused_total",
		Help: "Requests refused as bad input, by reason: a path or header that cannot be normalised (400, before any rule applied, so none is named), a body over its bound (413).",
	}, []string{"reason"})
	if err := m.registry.Register(vec); err != nil {
		return nil, fmt.Errorf("metrics: refused: %w", err)
	}
	return &Refused{vec: vec}, nil
}

// Inc counts one refusal for reason.
func (r *Refused) Inc(reason string) { r.vec.WithLabelValues(reason).Inc() }
