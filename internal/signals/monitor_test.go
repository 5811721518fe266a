package signals_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/signals"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

var t0 = time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)

// applyEffect puts one event through the real store into one effect,
// approved at t0, with the deadline fields of ins.
func applyEffect(t *testing.T, st *sqlite.Store, id string, ins store.EffectInsert) {
	t.Helper()
	ctx := context.Background()
	res, err := st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "r-" + id, Source: "shop", EventID: id, Type: "order.created", ReceivedAt: t0, Body: []byte(`{}`),
	}}}}})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	pk := res[0].Items[0].EventPK
	if err := st.EventRoute(ctx, &store.EventRouteParams{Now: t0, Decisions: []*store.RouteDecision{{EventPK: pk,
		Routes: []store.Route{{Flow: "orders", Entity: id, OrderKey: "1"}}}}}); err != nil {
		t.Fatal(err)
	}
	leases, err := st.EntityClaim(ctx, &store.EntityClaimParams{Owner: "w", Now: t0, LeaseFor: time.Minute, Limit: 1})
	if err != nil || len(leases) != 1 {
		t.Fatal(err, leases)
	}
	work, err := st.WorkListPending(ctx, &store.WorkListPendingParams{Flow: "orders", Entity: id})
	if err != nil || len(work) != 1 {
		t.Fatal(err, work)
	}
	ins.EpisodeKey, ins.Effect, ins.Destination, ins.Request = "orders:"+id+":r1:notify", "notify", "crm", json.RawMessage(`{}`)
	if _, err := st.FlowApply(ctx, &store.FlowApplyParams{Lease: leases[0], Now: t0, WorkID: work[0].ID, EventPK: pk, Actor: "w",
		Version: "r1", VersionSort: "1", Ordered: true, State: json.RawMessage(`{}`), ReleaseIfDrained: true,
		Effects: []*store.EffectInsert{&ins},
	}); err != nil {
		t.Fatal(err)
	}
}

// deadEffect makes one effect and settles it dead at t0.
func deadEffect(t *testing.T, st *sqlite.Store) {
	t.Helper()
	ctx := context.Background()
	applyEffect(t, st, "o1", store.EffectInsert{})
	claims, err := st.EffectClaim(ctx, &store.EffectClaimParams{Owner: "d", Now: t0, LeaseFor: time.Minute, Limit: 1})
	if err != nil || len(claims) != 1 {
		t.Fatal(err, claims)
	}
	if err := st.EffectSettle(ctx, &store.EffectSettleParams{EffectID: claims[0].ID, Token: claims[0].Token, Now: t0, Actor: "d",
		State: store.EffectDead, Class: store.ClassPermanent, Reason: "HTTP 400", AddAttempt: true,
		Attempt: &store.Attempt{StartedAt: t0, Status: 400, Class: store.ClassPermanent}}); err != nil {
		t.Fatal(err)
	}
}

func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

func defaultSignals(t *testing.T) config.Signals {
	t.Helper()
	cfg, err := config.Parse("s.yaml", []byte("# defaults\n"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Signals
}

func gauge(t *testing.T, reg *prometheus.Registry, name, label, value string) (float64, bool) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// A round on a real store: the gauges, the latest report and the history
// follow the dead letter as it ages past its alert age.
func TestMonitorRound(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	clk := clock.NewFake(t0)
	reg := prometheus.NewRegistry()
	var escalated int
	m := signals.NewMonitor(st, defaultSignals(t), signals.Options{Clock: clk, Registerer: reg,
		OnEscalated: func(_ context.Context, es []*store.Effect) { escalated += len(es) }})
	if m.Latest() != nil {
		t.Fatal("a report before the first round")
	}
	if _, err := m.Round(ctx); err != nil {
		t.Fatalf("round on an empty store: %v", err)
	}
	if r := m.Latest(); r == nil || r.Worst() != signals.StatusOK || len(r.Signals) != 9 {
		t.Fatalf("empty store: %+v", r)
	}
	for _, name := range store.SignalNames() {
		if v, ok := gauge(t, reg, "hookledger_signal_status", "signal", name); !ok || v != 0 {
			t.Errorf("status gauge of %s = %g (exported %v), want 0", name, v, ok)
		}
	}

	deadEffect(t, st)
	clk.Set(t0.Add(time.Hour))
	if _, err := m.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := gauge(t, reg, "hookledger_signal_value", "signal", store.SignalDeadLetters); v != 1 {
		t.Errorf("dead_letters value gauge = %g, want 1", v)
	}
	if v, _ := gauge(t, reg, "hookledger_signal_status", "signal", store.SignalDeadLetters); v != 1 {
		t.Errorf("dead_letters status gauge = %g, want 1 (warn)", v)
	}
	clk.Set(t0.Add(25 * time.Hour))
	if _, err := m.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := gauge(t, reg, "hookledger_signal_status", "signal", store.SignalDeadLetters); v != 2 {
		t.Errorf("dead_letters status gauge a day later = %g, want 2 (alert)", v)
	}
	if r := m.Latest(); r.Worst() != signals.StatusAlert || *r.Signals[5].OldestAgeSeconds != 25*3600 {
		t.Errorf("latest = %+v", r.Signals[5])
	}
	if v, ok := gauge(t, reg, "hookledger_queue_depth", "queue", signals.QueueEffects); !ok || v != 0 {
		t.Errorf("effects queue depth = %g (%v), want 0: the only effect is dead", v, ok)
	}
	hourly, err := st.SignalHistoryList(ctx, &store.SignalHistoryListParams{Name: store.SignalDeadLetters,
		Resolution: store.ResolutionHour, From: t0, To: t0.Add(26 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var statuses []string
	for _, p := range hourly {
		statuses = append(statuses, p.Status)
	}
	if strings.Join(statuses, ",") != "ok,warn,alert" {
		t.Errorf("hourly history statuses = %v, want ok,warn,alert", statuses)
	}
	if escalated != 0 {
		t.Errorf("%d escalations without any deadline", escalated)
	}
}

// A deadline near warns; once passed the round escalates the effect once
// (told to OnEscalated) and deadline_risk alerts while it keeps trying; an
// effect whose on_deadline is dead goes to the exception queue instead.
func TestMonitorEscalatesMissedDeadlines(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	applyEffect(t, st, "keep", store.EffectInsert{DeadlineAt: t0.Add(time.Hour), DeadlineWarnAt: t0.Add(45 * time.Minute)})
	applyEffect(t, st, "stop", store.EffectInsert{DeadlineAt: t0.Add(time.Hour), DeadlineWarnAt: t0.Add(45 * time.Minute), OnDeadline: "dead"})
	clk := clock.NewFake(t0.Add(50 * time.Minute))
	var told []*store.Effect
	m := signals.NewMonitor(st, defaultSignals(t), signals.Options{Clock: clk,
		OnEscalated: func(_ context.Context, es []*store.Effect) { told = append(told, es...) }})
	if _, err := m.Round(ctx); err != nil {
		t.Fatal(err)
	}
	dr := m.Latest().Signals[2]
	if dr.Name != store.SignalDeadlineRisk || dr.Value != 2 || dr.Status != signals.StatusWarn || dr.Breakdown["state"]["near"] != 2 || len(told) != 0 {
		t.Fatalf("before the deadline: %+v, told %d", dr, len(told))
	}

	clk.Set(t0.Add(2 * time.Hour))
	if _, err := m.Round(ctx); err != nil {
		t.Fatal(err)
	}
	states := map[string]store.EffectState{}
	for _, e := range told {
		states[e.Entity] = e.State
	}
	if len(told) != 2 || states["keep"] != store.EffectApproved || states["stop"] != store.EffectDead {
		t.Fatalf("escalated %v, want keep approved and stop dead", states)
	}
	r := m.Latest()
	if dr := r.Signals[2]; dr.Value != 1 || dr.Status != signals.StatusAlert || *dr.OldestAgeSeconds != 3600 {
		t.Errorf("after the deadline: deadline_risk %+v, want the one still trying, alert, passed an hour ago", dr)
	}
	if dl := r.Signals[5]; dl.Value != 1 || dl.Status != signals.StatusWarn {
		t.Errorf("after the deadline: dead_letters %+v, want the stopped one", dl)
	}
	// Once each: a later round escalates nothing again.
	clk.Advance(time.Minute)
	if _, err := m.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if len(told) != 2 {
		t.Errorf("escalated again: %d", len(told))
	}
}
