package deliver

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookledger/hookledger/internal/store"
)

// Metrics are the delivery worker's Prometheus collectors. Every label
// value comes from a closed set: destination names from the config,
// classes from store.ErrorClasses (and "ok"), states from
// store.EffectStates. A nil *Metrics records nothing, so tests and tools
// that drive the worker need none.
type Metrics struct {
	duration *prometheus.HistogramVec
	attempts *prometheus.CounterVec
	// Transitions counts effects entering a state; the flow engine adds
	// its own (approved, superseded) to the same counter.
	Transitions *prometheus.CounterVec
}

// classOK labels a call that succeeded.
const classOK = "ok"

// NewMetrics registers the delivery collectors with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hookledger_delivery_duration_seconds",
			Help:    "Duration of one call to a destination (lookups to reconcile excluded), by destination.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 13),
		}, []string{"destination"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookledger_delivery_attempts_total",
			Help: "Calls to destinations (lookups to reconcile excluded), by destination and class: ok, or the failure's class.",
		}, []string{"destination", "class"}),
		Transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookledger_effect_transitions_total",
			Help: "Effects entering a state, by the state entered (operators' actions are in the audit trail instead).",
		}, []string{"to"}),
	}
	if reg != nil {
		reg.MustRegister(m.duration, m.attempts, m.Transitions)
	}
	return m
}

// claimed counts effects the worker moved to submitting.
func (m *Metrics) claimed(n int) {
	if m == nil || n == 0 {
		return
	}
	m.Transitions.WithLabelValues(string(store.EffectSubmitting)).Add(float64(n))
}

// settled counts one settlement: the state entered and, when a call was
// made, its class and duration.
func (m *Metrics) settled(destination string, p *store.EffectSettleParams) {
	if m == nil {
		return
	}
	m.Transitions.WithLabelValues(string(p.State)).Inc()
	if a := p.Attempt; a != nil && !a.Reconcile {
		class := string(a.Class)
		if a.Class == store.ClassNone {
			class = classOK
		}
		m.attempts.WithLabelValues(destination, class).Inc()
		m.duration.WithLabelValues(destination).Observe(a.Duration.Seconds())
	}
}
