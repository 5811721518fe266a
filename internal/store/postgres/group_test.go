package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
)

// TestApplyGroupOneTransaction: a group of valid pages settles in one
// transaction, not by the fallback that settles each page alone (which
// gives the same answers, so the conformance case cannot tell them
// apart).
func TestApplyGroupOneTransaction(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	const n = 8
	var subs []*store.Submission
	for i := range n {
		subs = append(subs, &store.Submission{Deliveries: []*store.DeliveryInput{{
			RequestID: fmt.Sprintf("r%d", i), Source: "shop", EventID: fmt.Sprintf("e%d", i), Type: "order.updated",
			Entity: fmt.Sprintf("o%d", i), ReceivedAt: at, Headers: map[string]string{}, Body: []byte(`{}`)}}})
	}
	out, err := h.InboxCommit(ctx, &store.InboxCommitParams{Submissions: subs})
	if err != nil {
		t.Fatal(err)
	}
	route := &store.EventRouteParams{Now: at}
	for i, o := range out {
		route.Decisions = append(route.Decisions, &store.RouteDecision{EventPK: o.Items[0].EventPK,
			Routes: []store.Route{{Flow: "orders", Entity: fmt.Sprintf("o%d", i), OrderKey: "k1"}}})
	}
	if err := h.EventRoute(ctx, route); err != nil {
		t.Fatal(err)
	}
	leases, err := h.EntityClaim(ctx, &store.EntityClaimParams{Owner: "w", Now: at, LeaseFor: time.Minute, Limit: n})
	if err != nil || len(leases) != n {
		t.Fatalf("claimed %d: %v", len(leases), err)
	}
	var group [][]*store.FlowApplyParams
	for _, l := range leases {
		ws, err := h.WorkListPending(ctx, &store.WorkListPendingParams{Flow: l.Flow, Entity: l.Entity})
		if err != nil || len(ws) != 1 {
			t.Fatalf("pending of %s: %d, %v", l.Entity, len(ws), err)
		}
		group = append(group, []*store.FlowApplyParams{{Lease: l, Now: at, WorkID: ws[0].ID, EventPK: ws[0].Event.PK, Actor: "w",
			Version: "r1", VersionSort: "1", Ordered: true, State: []byte(`{}`), ReleaseIfDrained: true,
			Effects: []*store.EffectInsert{{EpisodeKey: "k-" + l.Entity, Effect: "sync", Destination: "d", Request: []byte(`{}`)}}}})
	}
	outs := h.FlowApplyGroup(ctx, group)
	for i, o := range outs {
		if o.Err != nil || len(o.Results) != 1 || o.Results[0].Disposition != store.DispositionApplied ||
			o.Results[0].EffectsInserted != 1 || !o.Results[0].Released {
			t.Fatalf("submission %d: %+v %v", i, o.Results, o.Err)
		}
	}
	if got := h.groupsAlone.Load(); got != 0 {
		t.Fatalf("the group was settled page by page (%d fallbacks), want one transaction", got)
	}
	if n, err := h.WorkCount(ctx); err != nil || n != 0 {
		t.Fatalf("WorkCount = %d, %v", n, err)
	}
}
