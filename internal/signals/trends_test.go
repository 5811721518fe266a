package signals_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/signals"
	"github.com/hookledger/hookledger/internal/store"
)

// history returns one series' minute buckets as bucket offset from t0 →
// value.
func history(t *testing.T, st store.Outcomes, name string) map[time.Duration]int64 {
	t.Helper()
	pts, err := st.SignalHistoryList(context.Background(), &store.SignalHistoryListParams{Name: name,
		Resolution: store.ResolutionMinute, From: t0.Add(-time.Hour), To: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	out := map[time.Duration]int64{}
	for _, p := range pts {
		if p.Status != signals.StatusOK {
			t.Errorf("%s at %s: status %s, want ok", name, p.Bucket, p.Status)
		}
		out[p.Bucket.Sub(t0)] = p.Value
	}
	return out
}

// The trends come from the registry's counters between two rounds: 2xx
// requests per second, done transitions per second and the ack p99 over
// the interval; the exception queue from the ledger.
func TestMonitorRecordsTrends(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	deadEffect(t, st)
	clk := clock.NewFake(t0)
	reg := prometheus.NewRegistry()
	// The server's collectors, by their names and labels.
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hookledger_receive_requests_total"}, []string{"source", "code"})
	ack := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "hookledger_receive_ack_seconds",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"source"})
	transitions := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hookledger_effect_transitions_total"}, []string{"to"})
	reg.MustRegister(requests, ack, transitions)
	// Traffic before the first round is not part of any interval.
	requests.WithLabelValues("shop", "200").Add(500)
	ack.WithLabelValues("shop").Observe(5)

	m := signals.NewMonitor(st, defaultSignals(t), signals.Options{Clock: clk, Gatherer: reg})
	if _, err := m.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if h := history(t, st, signals.TrendReceived); len(h) != 0 {
		t.Errorf("a rate after the first round: %v, want none (no interval yet)", h)
	}

	requests.WithLabelValues("shop", "200").Add(100)
	requests.WithLabelValues("crm", "202").Add(20)
	requests.WithLabelValues("shop", "401").Add(30) // refused: not received
	transitions.WithLabelValues("done").Add(60)
	transitions.WithLabelValues("dead").Add(10)
	for range 98 {
		ack.WithLabelValues("shop").Observe(0.001)
	}
	ack.WithLabelValues("crm").Observe(0.2)
	ack.WithLabelValues("crm").Observe(0.2)
	// A round before the clock moves records no rate and keeps the
	// baseline: the traffic counts in the next interval.
	if _, err := m.Round(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	if _, err := m.Round(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	if _, err := m.Round(ctx); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name string
		want map[time.Duration]int64
	}{
		// 120 acknowledged in 60 s: 2/s, in thousandths; then none.
		{signals.TrendReceived, map[time.Duration]int64{time.Minute: 2000, 2 * time.Minute: 0}},
		{signals.TrendEffectsDone, map[time.Duration]int64{time.Minute: 1000, 2 * time.Minute: 0}},
		// Rank 99 of 100 falls halfway into the 128–256 ms bucket.
		{signals.TrendAckP99, map[time.Duration]int64{time.Minute: 192, 2 * time.Minute: 0}},
		// The dead effect, settled at t0, waits in the exception queue.
		{signals.TrendExceptions, map[time.Duration]int64{0: 1, time.Minute: 1, 2 * time.Minute: 1}},
		{signals.TrendExceptionsOldest, map[time.Duration]int64{0: 0, time.Minute: 60, 2 * time.Minute: 120}},
	} {
		got := history(t, st, c.name)
		if len(got) != len(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
			continue
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%s: %v, want %v", c.name, got, c.want)
				break
			}
		}
	}
}

// Without a registry the rates are not recorded; the exception queue is.
func TestMonitorTrendsWithoutGatherer(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	clk := clock.NewFake(t0)
	m := signals.NewMonitor(st, defaultSignals(t), signals.Options{Clock: clk})
	for range 2 {
		if _, err := m.Round(ctx); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
	}
	if h := history(t, st, signals.TrendReceived); len(h) != 0 {
		t.Errorf("rates without a registry: %v", h)
	}
	if h := history(t, st, signals.TrendExceptions); len(h) != 2 || h[0] != 0 {
		t.Errorf("exception queue history %v, want 0 at two minutes", h)
	}
}
