package console

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// t0 is the fake clock's start; every stored time is relative to it.
var t0 = time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)

const testToken = "console-test-token"

// scriptBody is an event body that would run if the console put it into
// the page as markup.
const scriptBody = `{"id":"evt_1","data":{"name":"<script>window.__pwned=1</script>"}}`

// fixture is a real SQLite store with a small history made through the
// store contract, as the pipeline would make it:
//
//   - stripe evt_1 (sub_1, occurred t0, revision r2): applied, caused the
//     effect upsert_deal, which a 429 with Retry-After and then a 422 left
//     dead in the exception queue;
//   - stripe evt_2 (sub_1, occurred an hour before, revision r1): arrived
//     after evt_1, so stale; delivered twice;
//   - stripe evt_3: unrouted;
//   - fillers ping_00.. (source app, type ping): unrouted, for paging.
type fixture struct {
	st      *sqlite.Store
	clk     *clock.Fake
	deadID  int64
	fillers int
}

func newFixture(t *testing.T, fillers int) *fixture {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "console.db"))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	f := &fixture{st: st, clk: clock.NewFake(t0), fillers: fillers}

	deliver := func(reqID, source, id, typ, entity string, occurred time.Time, body string) int64 {
		t.Helper()
		res, err := st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
			RequestID: reqID, Source: source, EventID: id, Type: typ, Entity: entity, OccurredAt: occurred,
			ReceivedAt: f.clk.Now(), Headers: map[string]string{"Content-Type": "application/json", "User-Agent": "Stripe/1.0"},
			Body: []byte(body),
		}}}}})
		if err != nil || res[0].Err != nil {
			t.Fatalf("store %s: %v %v", id, err, res)
		}
		f.clk.Advance(time.Second)
		return res[0].Items[0].EventPK
	}
	pk1 := deliver("req_1", "stripe", "evt_1", "customer.subscription.updated", "sub_1", t0, scriptBody)
	pk2 := deliver("req_2", "stripe", "evt_2", "customer.subscription.updated", "sub_1", t0.Add(-time.Hour), `{"id":"evt_2"}`)
	deliver("req_3", "stripe", "evt_2", "customer.subscription.updated", "sub_1", t0.Add(-time.Hour), `{"id":"evt_2"}`)
	pk3 := deliver("req_4", "stripe", "evt_3", "invoice.created", "in_9", time.Time{}, `{"id":"evt_3"}`)
	decisions := []*store.RouteDecision{
		{EventPK: pk1, Routes: []store.Route{{Flow: "billing_to_crm", Entity: "sub_1", OrderKey: "1"}}},
		{EventPK: pk2, Routes: []store.Route{{Flow: "billing_to_crm", Entity: "sub_1", OrderKey: "2"}}},
		{EventPK: pk3},
	}
	for i := range fillers {
		pk := deliver(fmt.Sprintf("req_p%02d", i), "app", fmt.Sprintf("ping_%02d", i), "ping", "", time.Time{}, `{}`)
		decisions = append(decisions, &store.RouteDecision{EventPK: pk})
	}
	if err := st.EventRoute(ctx, &store.EventRouteParams{Now: f.clk.Now(), Decisions: decisions}); err != nil {
		t.Fatalf("route: %v", err)
	}

	leases, err := st.EntityClaim(ctx, &store.EntityClaimParams{Owner: "test", Now: f.clk.Now(), LeaseFor: time.Minute, Limit: 10})
	if err != nil || len(leases) != 1 {
		t.Fatalf("claim entity: %v %v", leases, err)
	}
	work, err := st.WorkListPending(ctx, &store.WorkListPendingParams{Flow: "billing_to_crm", Entity: "sub_1", Limit: 10})
	if err != nil || len(work) != 2 {
		t.Fatalf("pending work: %v %v", work, err)
	}
	for i, w := range work {
		ap := &store.FlowApplyParams{Lease: leases[0], Now: f.clk.Now(), WorkID: w.ID, EventPK: w.Event.PK, Actor: "worker", Ordered: true}
		if i == 0 { // evt_1, revision 2
			ap.Version, ap.VersionSort, ap.State = "r2", "0000000002", []byte(`{"status":"active","seats":3}`)
			ap.Effects = []*store.EffectInsert{{EpisodeKey: "billing_to_crm:sub_1:r2:upsert_deal", Effect: "upsert_deal",
				Destination: "crm", Request: []byte(`{"deal":"sub_1","seats":3}`)}}
		} else { // evt_2, revision 1: older than what is applied
			ap.Version, ap.VersionSort, ap.State = "r1", "0000000001", []byte(`{"status":"trialing"}`)
		}
		if _, err := st.FlowApply(ctx, ap); err != nil {
			t.Fatalf("apply %s: %v", w.Event.EventID, err)
		}
	}
	if err := st.EntityRelease(ctx, &store.EntityReleaseParams{Lease: leases[0], Now: f.clk.Now()}); err != nil {
		t.Fatalf("release: %v", err)
	}

	// Two calls: a 429 that asked for 120 s, then a permanent 422.
	call := func(state store.EffectState, a *store.Attempt, class store.ErrorClass, reason string, next time.Time) {
		t.Helper()
		cs, err := st.EffectClaim(ctx, &store.EffectClaimParams{Owner: "d", Now: f.clk.Now(), LeaseFor: time.Minute, Limit: 10})
		if err != nil || len(cs) != 1 {
			t.Fatalf("claim effect: %v %v", cs, err)
		}
		f.deadID = cs[0].ID
		a.StartedAt = f.clk.Now()
		if err := st.EffectSettle(ctx, &store.EffectSettleParams{EffectID: cs[0].ID, Token: cs[0].Token, Now: f.clk.Now(),
			Actor: "worker", Attempt: a, State: state, NextAttemptAt: next, AddAttempt: true, Class: class, Reason: reason,
			LastResponse: a.Response}); err != nil {
			t.Fatalf("settle: %v", err)
		}
	}
	call(store.EffectRetryWait, &store.Attempt{Duration: 80 * time.Millisecond, Status: 429, Class: store.ClassQuota,
		Error: "rate limited", RetryAfter: "120", RetryAfterUnit: "seconds", Wait: 2 * time.Minute},
		store.ClassQuota, "429 from destination", f.clk.Now())
	f.clk.Advance(2 * time.Minute)
	call(store.EffectDead, &store.Attempt{Duration: 95 * time.Millisecond, Status: 422, Class: store.ClassPermanent,
		Error: "unprocessable", Response: `{"error":"seats must be <= 2"}`}, store.ClassPermanent, "422 from destination", time.Time{})
	f.clk.Advance(time.Minute)
	return f
}

func (f *fixture) effect(t *testing.T, id int64) *store.Effect {
	t.Helper()
	e, err := f.st.EffectGet(context.Background(), id)
	if err != nil || e == nil {
		t.Fatalf("effect %d: %v %v", id, e, err)
	}
	return e
}
