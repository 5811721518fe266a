package deliver_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/deliver/delivertest"
	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/store"
)

// metricValue sums the samples of one family whose labels include want
// (a histogram's sample count).
func metricValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// The worker and the engine, instrumented as the server wires them, count
// settled events, effect transitions, calls by class and their latency.
func TestMetricsCountCallsAndTransitions(t *testing.T) {
	x := newWorld(t, setup{})
	reg := prometheus.NewRegistry()
	dm := deliver.NewMetrics(reg)
	w, err := deliver.New(x.cfg, x.st, deliver.Options{Workers: 4, LeaseFor: x.cfg.Delivery.Lease.D(), Clock: x.clk,
		Rand: func() float64 { return jitter }, Owner: "worker-a", Metrics: dm, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	x.w = w
	x.eng = flow.New(x.cfg, x.st, flow.Options{Clock: x.clk, LeaseFor: 10 * time.Second, Metrics: flow.NewMetrics(reg, dm.Transitions)})

	ok := x.order("o1", 1)
	bad := x.order("o2", 1)
	x.dest.Script(bad.EpisodeKey, delivertest.Fail400)
	x.drain()
	x.wantState(x.get(ok.ID), store.EffectDone)
	x.wantState(x.get(bad.ID), store.EffectDead)

	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"hookledger_events_settled_total", map[string]string{"disposition": "applied"}, 2},
		{"hookledger_effect_transitions_total", map[string]string{"to": "approved"}, 2},
		{"hookledger_effect_transitions_total", map[string]string{"to": "submitting"}, 2},
		{"hookledger_effect_transitions_total", map[string]string{"to": "done"}, 1},
		{"hookledger_effect_transitions_total", map[string]string{"to": "dead"}, 1},
		{"hookledger_delivery_attempts_total", map[string]string{"destination": "dest", "class": "ok"}, 1},
		{"hookledger_delivery_attempts_total", map[string]string{"destination": "dest", "class": "permanent"}, 1},
		{"hookledger_delivery_duration_seconds", map[string]string{"destination": "dest"}, 2},
	} {
		if got := metricValue(t, reg, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %g, want %g", c.name, c.labels, got, c.want)
		}
	}
}

// An escalated deadline reaches the notification webhook with the
// deadline and a repair.
func TestNotifyEscalated(t *testing.T) {
	x := newWorld(t, setup{})
	e := x.order("o1", 1)
	e.DeadlineAt = t0.Add(time.Hour)
	e.State = store.EffectDead
	x.w.NotifyEscalated(x.ctx, []*store.Effect{e})
	x.drain()
	texts := x.hook.all()
	if len(texts) != 1 || !strings.Contains(texts[0], "business deadline 2026-11-03T10:00:00Z passed") ||
		!strings.Contains(texts[0], e.EpisodeKey) || !strings.Contains(texts[0], "resolve") {
		t.Fatalf("notifications %q", texts)
	}
}
