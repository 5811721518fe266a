package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

// A prefilled history is what the store itself would hold after its
// events were taken through: every planted effect reads back done after
// one successful attempt, each entity at its event's revision, the
// stage stamps read as a run's do, and what the store writes next takes
// keys above the planted ones (the e2e ledger counts from there).
func TestPrefill(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "prefill.db")
		prefillRoundTrip(t, "sqlite", "sqlite:"+path, func(ctx context.Context, n int, start time.Time) error {
			return prefillSQLite(ctx, path, n, start)
		})
	})
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.NewDatabase(t)
		prefillRoundTrip(t, "postgres", url, func(ctx context.Context, n int, start time.Time) error {
			return prefillPostgres(ctx, url, n, start)
		})
	})
}

func prefillRoundTrip(t *testing.T, driver, url string, plant func(ctx context.Context, n int, start time.Time) error) {
	ctx := context.Background()
	st, err := storeopen.Open(ctx, url)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	const n = 30
	start := time.Now()
	if err := plant(ctx, n, start); err != nil {
		t.Fatalf("prefill: %v", err)
	}

	effects, err := st.EffectList(ctx, &store.EffectListParams{Limit: 100})
	if err != nil || len(effects) != n {
		t.Fatalf("EffectList: %v, %d effects, want %d", err, len(effects), n)
	}
	for _, e := range effects {
		if e.State != store.EffectDone || e.Flow != "invoices" || e.Destination != "loopback" || e.Attempts != 1 {
			t.Fatalf("planted effect %d: state %s, flow %s, destination %s, attempts %d", e.ID, e.State, e.Flow, e.Destination, e.Attempts)
		}
		if !e.CreatedAt.Before(start.Add(-time.Hour + time.Second)) {
			t.Fatalf("planted effect %d created at %s, not an hour before the run's start %s", e.ID, e.CreatedAt, start)
		}
	}
	attempts, err := st.AttemptList(ctx, effects[0].ID)
	if err != nil || len(attempts) != 1 || attempts[0].Status != 200 {
		t.Fatalf("AttemptList(%d): %v %+v", effects[0].ID, err, attempts)
	}
	proj, err := st.ProjectionGet(ctx, &store.ProjectionGetParams{Flow: "invoices", Entity: effects[0].Entity})
	if err != nil || proj == nil || proj.Version != effects[0].Version || !store.JSONEqual(proj.State, []byte(`{"amount":4900,"status":"paid"}`)) {
		t.Fatalf("ProjectionGet(%s): %v %+v", effects[0].Entity, err, proj)
	}

	audit, err := st.AuditList(ctx, &store.AuditListParams{EventID: effects[0].Entity[len("in_"):], Limit: 10})
	if err != nil || len(audit) != 4 {
		t.Fatalf("AuditList of %s: %v, %d rows, want a webhook's 4", effects[0].Entity, err, len(audit))
	}
	for i, want := range []string{"effect_approved", "work_settled", "disposition", "effect_done"} {
		if audit[i].Action != want || audit[i].Entity != effects[0].Entity {
			t.Fatalf("audit row %d: %s of %s, want %s", i, audit[i].Action, audit[i].Entity, want)
		}
	}

	rows, err := readStamps(ctx, driver, url)
	if err != nil || len(rows) != n {
		t.Fatalf("readStamps: %v, %d rows, want %d", err, len(rows), n)
	}
	for _, r := range rows {
		if !planted(r.eventID) || r.received >= r.routed || r.routed > r.applied || r.created > r.called {
			t.Fatalf("planted stamps out of order: %+v", r)
		}
	}

	res, err := st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "req-run", Source: "stripe", EventID: e2eEventID(1), Type: "invoice.paid", Entity: "in_" + e2eEventID(1),
		ReceivedAt: time.Now(), Body: []byte(`{"id":"evt_e2e_1"}`)}}}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("InboxCommit after the prefill: %v %+v", err, res)
	}
	if it := res[0].Items[0]; it.Duplicate || it.EventPK != n+1 {
		t.Fatalf("the run's first event: pk %d, duplicate %v; want pk %d, new", it.EventPK, it.Duplicate, n+1)
	}
	var r e2eResult
	if err := e2eLedger(ctx, url, n, &r); err != nil || r.ledgerTotal != 0 {
		t.Fatalf("e2eLedger past the planted effects: %v, %d counted, want 0", err, r.ledgerTotal)
	}
	if err := e2eLedger(ctx, url, 0, &r); err != nil || r.ledgerTotal != n {
		t.Fatalf("e2eLedger of every effect: %v, %d counted, want %d", err, r.ledgerTotal, n)
	}
}

// The stage breakdown measures the run's own events after its warm-up:
// a planted event's made-up stamps, with no acknowledgement the run saw,
// would count as stages of their own.
func TestRunStamps(t *testing.T) {
	rows := []stampRow{{eventID: prefillPrefix + "7"}, {eventID: e2eEventID(0)}, {eventID: e2eEventID(5)}, {eventID: prefillPrefix + "8"}}
	got := runStamps(rows, 2)
	if len(got) != 1 || got[0].eventID != e2eEventID(5) {
		t.Fatalf("runStamps kept %+v, want only %s", got, e2eEventID(5))
	}
}
