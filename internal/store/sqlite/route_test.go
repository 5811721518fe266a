package sqlite

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// A routing page that settles in its write transaction lists, on the one
// writer, the work of only the leased entities it routed to: an entity
// leased beside them (ready from before) has no work of the page's, and
// its listing would hold the writer for nothing.
func TestRoutingListsOnlyThePagesEntities(t *testing.T) {
	ctx := context.Background()
	var listings atomic.Int32
	s := faulty(t, func(q string) bool {
		if strings.Contains(q, "replay_id, event_pk FROM work") {
			listings.Add(1)
		}
		return false
	})
	now := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	if _, err := s.InboxCommit(ctx, inboxGroup(4)); err != nil {
		t.Fatal(err)
	}
	toOwnEntity := func(evs []*store.RoutableEvent) []*store.RouteDecision {
		var ds []*store.RouteDecision
		for _, ev := range evs {
			ds = append(ds, &store.RouteDecision{EventPK: ev.PK, Routes: []store.Route{{Flow: "deals", Entity: "d_" + ev.EventID, OrderKey: ev.EventID}}})
		}
		return ds
	}
	// Three events routed without a lease: three ready entities.
	if page, err := s.EventRouteNext(ctx, &store.EventRouteNextParams{Limit: 3, Now: now, Decide: toOwnEntity}); err != nil || page.Events != 3 {
		t.Fatalf("first page: %d events, %v; want 3", page.Events, err)
	}
	var seen []*store.Lease
	page, err := s.EventRouteNext(ctx, &store.EventRouteNextParams{Limit: 10, Now: now, Decide: toOwnEntity, SettleMax: 8,
		Claim: &store.EntityClaimParams{Owner: "router", Now: now, LeaseFor: time.Minute, Limit: 10, List: 5},
		Settle: func(_ context.Context, leases []*store.Lease) store.RouteSettle {
			seen = leases
			return store.RouteSettle{}
		}})
	if err != nil || page.Events != 1 || len(page.Leases) != 4 {
		t.Fatalf("second page: %d events, %d leases, %v; want 1 event and all 4 entities leased", page.Events, len(page.Leases), err)
	}
	if n := listings.Load(); n != 1 {
		t.Errorf("%d entities' work listed on the writer for a page routing one event among 4 leases, want 1", n)
	}
	if len(seen) != 1 || seen[0].Entity != "d_evt_3" || len(seen[0].Pending) != 1 || seen[0].Pending[0].Event.EventID != "evt_3" {
		t.Errorf("Settle saw %+v, want the page's entity d_evt_3 with its one item", seen)
	}
}
