package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
)

// TestLoneWebhookRoutingRoundTrips: routing a lone webhook's page, with
// its entity leased, its work listed and settled in the same transaction,
// costs five round trips: the take; the enqueue with the lease, which
// reads the entity's work in the same statement (leaseListedSQL); the
// settle's fence; its writes; its audit rows with COMMIT. It took seven
// when the enqueue waited for its answer alone and the leased work was
// listed by a statement of its own; every round trip is a wake-up of the
// server and of PostgreSQL (docs/benchmarks-history.md, "Run AF").
func TestLoneWebhookRoutingRoundTrips(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	if _, err := h.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "r-1", Source: "shop", EventID: "evt_1", Type: "order.updated", Entity: "o-1",
		ReceivedAt: at, Body: []byte(`{"n":1}`)}}}}}); err != nil {
		t.Fatal(err)
	}
	var listed []*store.WorkItem
	before := h.pipeTrips.Load()
	page, err := h.EventRouteNext(ctx, &store.EventRouteNextParams{Limit: 10, Now: at, SettleMax: 1,
		Decide: func(evs []*store.RoutableEvent) []*store.RouteDecision {
			ds := make([]*store.RouteDecision, len(evs))
			for i, e := range evs {
				ds[i] = &store.RouteDecision{EventPK: e.PK, Routes: []store.Route{{Flow: "orders", Entity: e.Entity, OrderKey: e.EventID}}}
			}
			return ds
		},
		Claim: &store.EntityClaimParams{Owner: "router", Now: at, LeaseFor: time.Minute, Limit: 4, List: 50},
		Settle: func(_ context.Context, leases []*store.Lease) store.RouteSettle {
			var subs [][]*store.FlowApplyParams
			for _, l := range leases {
				listed = append(listed, l.Pending...)
				for _, it := range l.Pending {
					subs = append(subs, []*store.FlowApplyParams{{Lease: l, WorkID: it.ID, EventPK: it.Event.PK, Now: at,
						Version: "1", VersionSort: "1", State: []byte(`{}`), ReleaseIfDrained: true}})
				}
			}
			return store.RouteSettle{Subs: subs}
		}})
	trips := h.pipeTrips.Load() - before
	if err != nil || page.Events != 1 || len(page.Leases) != 1 || len(page.Settled) != 1 || page.Settled[0].Err != nil {
		t.Fatalf("EventRouteNext = %+v, %v; want the event routed, its entity leased and its item settled", page, err)
	}
	if len(listed) != 1 || listed[0].Event.EventID != "evt_1" || string(listed[0].Event.Body) != `{"n":1}` ||
		listed[0].Flow != "orders" || listed[0].Entity != "o-1" || listed[0].OrderKey != "evt_1" || !listed[0].Event.ReceivedAt.Equal(at) {
		t.Fatalf("the lease carried %+v, want evt_1's item with its event and body", listed)
	}
	if res := page.Settled[0].Results[0]; res.Disposition != store.DispositionApplied || !res.Released {
		t.Fatalf("settled %+v, want applied with the lease freed", res)
	}
	if trips != 5 {
		t.Fatalf("routing a lone webhook took %d round trips, want 5", trips)
	}
}
