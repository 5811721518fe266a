package flow

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookledger/hookledger/internal/store"
)

// Metrics are the flow engine's Prometheus collectors. Label values come
// from closed sets (store.Dispositions, store.EffectStates). A nil
// *Metrics records nothing.
type Metrics struct {
	settled *prometheus.CounterVec
	// transitions is shared with the delivery worker, which counts the
	// states it moves effects to.
	transitions *prometheus.CounterVec
}

// NewMetrics registers the engine's collectors with reg. transitions is
// the effect transitions counter (label "to") that the delivery worker
// registered (deliver.Metrics.Transitions); nil leaves them uncounted.
func NewMetrics(reg prometheus.Registerer, transitions *prometheus.CounterVec) *Metrics {
	m := &Metrics{
		settled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookledger_events_settled_total",
			Help: "Events settled, by disposition: one per flow an event was routed to, one for an event no flow takes (unrouted).",
		}, []string{"disposition"}),
		transitions: transitions,
	}
	if reg != nil {
		reg.MustRegister(m.settled)
	}
	return m
}

// applied counts one FlowApply: the route's disposition and the effects
// it approved or superseded.
func (m *Metrics) applied(res *store.FlowApplyResult) {
	if m == nil || res == nil {
		return
	}
	m.settled.WithLabelValues(string(res.Disposition)).Inc()
	if m.transitions != nil {
		if res.EffectsInserted > 0 {
			m.transitions.WithLabelValues(string(store.EffectApproved)).Add(float64(res.EffectsInserted))
		}
		if res.Superseded > 0 {
			m.transitions.WithLabelValues(string(store.EffectSuperseded)).Add(float64(res.Superseded))
		}
	}
}

// routed counts the events routing settled at once: unrouted when no flow
// takes one, dead_lettered for each flow whose routing expressions failed.
func (m *Metrics) routed(ds []*store.RouteDecision) {
	if m == nil {
		return
	}
	for _, d := range ds {
		if len(d.Routes) == 0 {
			m.settled.WithLabelValues(string(store.DispositionUnrouted)).Inc()
		}
		for _, r := range d.Routes {
			if r.Failed != "" {
				m.settled.WithLabelValues(string(store.DispositionDeadLettered)).Inc()
			}
		}
	}
}
