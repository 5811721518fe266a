package retention

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const day = 24 * time.Hour

// seed stores n unrouted events of source, received at `at`, each with
// two deliveries, and routes them (unrouted is terminal).
func seed(t *testing.T, st store.Store, source string, n int, at time.Time) {
	t.Helper()
	ctx := context.Background()
	var subs []*store.Submission
	for i := range n {
		for k := range 2 {
			subs = append(subs, &store.Submission{Deliveries: []*store.DeliveryInput{{
				RequestID: fmt.Sprintf("r-%s-%d-%d", source, i, k), Source: source, EventID: fmt.Sprintf("%s-%d-%d", source, at.Unix(), i),
				Type: "t", Entity: "e", ReceivedAt: at, Headers: map[string]string{}, Body: []byte(`{}`)}}})
		}
	}
	res, err := st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: subs})
	if err != nil {
		t.Fatalf("InboxCommit: %v", err)
	}
	var ds []*store.RouteDecision
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("submission %d: %v", i, r.Err)
		}
		if i%2 == 0 {
			ds = append(ds, &store.RouteDecision{EventPK: r.Items[0].EventPK})
		}
	}
	if err := st.EventRoute(ctx, &store.EventRouteParams{Now: at, Decisions: ds}); err != nil {
		t.Fatalf("EventRoute: %v", err)
	}
}

func openStore(t *testing.T) store.Store {
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

func countEvents(t *testing.T, st store.Store, source string) int {
	t.Helper()
	r, err := st.EventList(context.Background(), &store.EventListParams{Source: source, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(r.Events)
}

// A pass walks the store batch by batch, pausing between batches, deletes
// what is past each source's retention and counts it per table.
func TestPassBatchesPausesAndCounts(t *testing.T) {
	st := openStore(t)
	clk := clock.NewFake(t0)
	seed(t, st, "stripe", 7, t0.Add(-40*day)) // past 30 days: deleted
	seed(t, st, "crm", 3, t0.Add(-40*day))    // kept 60 days
	seed(t, st, "stripe", 2, t0.Add(-day))    // inside the retention

	reg := prometheus.NewRegistry()
	var pauses int
	svc := New(st, Policy{Sources: map[string]time.Duration{"stripe": 30 * day, "crm": 60 * day}, Default: 60 * day,
		BatchSize: 2, Pause: time.Millisecond}, Options{Clock: clk, Registerer: reg,
		Wait: func(ctx context.Context, d time.Duration) error { pauses++; clk.Advance(d); return nil }})

	var batches int
	for more := true; more; {
		var err error
		if more, err = svc.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		if batches++; batches > 100 {
			t.Fatal("pass does not end")
		}
	}
	last := svc.Last()
	if last == nil || last.Events != 7 || last.Deliveries != 14 || last.Audit != 7 || last.Batches != batches {
		t.Fatalf("last pass = %+v after %d steps, want 7 events, 14 deliveries and their 7 audit rows", last, batches)
	}
	if batches < 4 || pauses != batches-1 {
		t.Errorf("%d batches of 2 over 12 events with %d pauses, want at least 4 and one pause between each two", batches, pauses)
	}
	if last.Duration != time.Duration(pauses)*time.Millisecond {
		t.Errorf("duration %v, want the fake clock's %d pauses", last.Duration, pauses)
	}
	if n := countEvents(t, st, "stripe"); n != 2 {
		t.Errorf("stripe events left = %d, want the 2 fresh ones", n)
	}
	if n := countEvents(t, st, "crm"); n != 3 {
		t.Errorf("crm events left = %d, want 3", n)
	}
	deleted := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "hookledger_retention_deleted_rows_total" {
			for _, m := range mf.GetMetric() {
				deleted[label(m, "table")] = m.GetCounter().GetValue()
			}
		}
	}
	want := map[string]float64{tableEvents: 7, tableDeliveries: 14, tableWork: 0, tableLoopVisits: 0, tableAudit: 7,
		tableEffects: 0, tableAttempts: 0}
	if fmt.Sprint(deleted) != fmt.Sprint(want) {
		t.Errorf("hookledger_retention_deleted_rows_total = %v, want %v", deleted, want)
	}

	// Idempotent: a second pass, later, deletes nothing new until the
	// crm events pass their 60 days.
	clk.Advance(10 * day)
	r, err := svc.Pass(context.Background())
	if err != nil || r.Deleted() != 0 {
		t.Fatalf("second pass = %+v, %v; want nothing deleted", r, err)
	}
	clk.Advance(15 * day)
	if r, err = svc.Pass(context.Background()); err != nil || r.Events != 3 {
		t.Fatalf("pass after 65 days = %+v, %v; want the 3 crm events", r, err)
	}
}

// PolicyOf reads each source's retention, and rows of no configured
// source are kept as long as the longest one.
func TestPolicyOf(t *testing.T) {
	cfg, err := config.Parse("h.yaml", []byte(`sources:
  - name: stripe
    kind: stripe
    secrets: [whsec_x]
  - name: crm
    kind: pipedrive
    secrets: ["u:p"]
    retention: 90d
retention:
  batch_size: 100
  interval: 10m
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	p := PolicyOf(cfg)
	if p.Sources["stripe"] != 30*day || p.Sources["crm"] != 90*day || p.Default != 90*day || p.BatchSize != 100 || p.Interval != 10*time.Minute {
		t.Errorf("policy = %+v", p)
	}
	params := p.Params(t0)
	if !params.Cutoffs["stripe"].Equal(t0.Add(-30*day)) || !params.DefaultCutoff.Equal(t0.Add(-90*day)) {
		t.Errorf("params = %+v", params)
	}
}

// observed tells when the loop ran its first batch.
type observed struct {
	store.Store
	first chan struct{}
}

func (o *observed) RetentionPrune(ctx context.Context, p *store.RetentionPruneParams) (*store.RetentionPruneResult, error) {
	select {
	case o.first <- struct{}{}:
	default:
	}
	return o.Store.RetentionPrune(ctx, p)
}

// Start runs a pass at once in the background and Stop ends the loop.
func TestStartStop(t *testing.T) {
	st := openStore(t)
	seed(t, st, "stripe", 3, t0.Add(-40*day))
	obs := &observed{Store: st, first: make(chan struct{}, 1)}
	svc := New(obs, Policy{Sources: map[string]time.Duration{"stripe": 30 * day}, Default: 30 * day}, Options{Clock: clock.NewFake(t0)})
	ctx := context.Background()
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-obs.first:
	case <-time.After(10 * time.Second):
		t.Fatal("no batch ran after Start")
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := svc.Stop(stopCtx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := svc.Stop(stopCtx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := svc.Start(ctx); err == nil {
		t.Error("a second Start started again")
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
