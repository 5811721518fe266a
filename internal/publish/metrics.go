package publish

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	requests *prometheus.CounterVec
	fanout   prometheus.Counter
	oversize prometheus.Counter
	disabled prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hookledger_publish_requests_total",
			Help: "Publish requests by outcome: published, replayed, key_mismatch, in_flight, too_large."}, []string{"outcome"}),
		fanout: prometheus.NewCounter(prometheus.CounterOpts{Name: "hookledger_publish_fanout_total",
			Help: "Deliveries created by published messages (one per message and endpoint)."}),
		oversize: prometheus.NewCounter(prometheus.CounterOpts{Name: "hookledger_publish_oversize_total",
			Help: "Messages accepted with a payload over publish.warn_payload_bytes."}),
		disabled: prometheus.NewCounter(prometheus.CounterOpts{Name: "hookledger_endpoints_disabled_total",
			Help: "Endpoints disabled by delivery (410 Gone, or failing for publish.disable_after)."}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.fanout, m.oversize, m.disabled)
	}
	return m
}
