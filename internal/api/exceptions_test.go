package api_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/store"
)

// A dead-lettered route carries its reason and a suggested repair in GET
// /api/v1/events; any other route carries both fields, empty.
func TestEventRoutesCarryRepair(t *testing.T) {
	f := newFixture(t)
	pk := f.event("shop", "e1", "order.created", "")
	f.route(pk, store.Route{Flow: "orders", Entity: "o1", OrderKey: "1"},
		store.Route{Flow: "billing", Failed: "entity: the expression gave an empty id"})
	f.apply("orders", "o1", "crm")
	var got eventList
	if code := f.get("/api/v1/events", &got); code != 200 || len(got.Events) != 1 {
		t.Fatalf("events: %d %+v", code, got)
	}
	want := []api.RouteJSON{
		{Flow: "billing", Disposition: "dead_lettered", Reason: "entity: the expression gave an empty id",
			Repair: store.DeadLetterRepair("entity:")},
		{Flow: "orders", Entity: "o1", Disposition: "applied"},
	}
	if !slices.Equal(got.Events[0].Routes, want) || !strings.Contains(want[0].Repair, "replay") {
		t.Fatalf("routes = %+v, want %+v", got.Events[0].Routes, want)
	}
	_, raw := f.do(http.MethodGet, "/api/v1/events", "")
	var shape struct {
		Events []struct{ Routes []map[string]json.RawMessage }
	}
	if err := json.Unmarshal(raw, &shape); err != nil {
		t.Fatal(err)
	}
	for _, r := range shape.Events[0].Routes {
		for _, k := range []string{"reason", "repair"} {
			if _, ok := r[k]; !ok {
				t.Errorf("route lacks %q (an empty string when there is none): %s", k, raw)
			}
		}
	}
}

// GET /api/v1/exceptions lists the dead effects, then the dead-lettered
// events, each with reason, repair, the configured owner where nobody was
// assigned, and its age; kind narrows it and the cursor pages across.
func TestExceptions(t *testing.T) {
	f := newFixture(t)
	f.h.ServeOwners(store.Owners{Destinations: map[string]string{"crm": "team-crm"},
		Flows: map[string]string{"billing": "team-billing", "orders": "team-orders"}})
	pk := f.event("shop", "e1", "order.created", "")
	f.route(pk, store.Route{Flow: "orders", Entity: "o1", OrderKey: "1"})
	id := f.apply("orders", "o1", "crm")[0]
	f.settle(id, store.EffectDead, store.ClassPermanent)
	// Dead-lettered by billing, processed by orders: billing's owner
	// repairs it, not orders'.
	bad := f.event("shop", "e2", "order.created", "")
	f.route(bad, store.Route{Flow: "billing", Failed: "entity: the expression gave an empty id"},
		store.Route{Flow: "orders", Entity: "o2", OrderKey: "1"})
	f.apply("orders", "o2", "mail")

	var all api.ExceptionListJSON
	if code := f.get("/api/v1/exceptions", &all); code != 200 || len(all.Exceptions) != 2 || all.NextCursor != "" {
		t.Fatalf("exceptions: %d %+v", code, all)
	}
	ef, ev := all.Exceptions[0], all.Exceptions[1]
	// The fixture's clock reads t0 + 1h; both began to wait at t0.
	if ef.Kind != "effect" || ef.ID != "1" || ef.Reason != "HTTP 400" || ef.Owner != "team-crm" || ef.AgeSeconds != 3600 ||
		ef.State != "dead" || ef.Destination != "crm" || !slices.Equal(ef.Flows, []string{"orders"}) || ef.Repair == "" {
		t.Errorf("effect entry = %+v", ef)
	}
	if ev.Kind != "event" || ev.ID != "e2" || ev.Source != "shop" || ev.Owner != "team-billing" || ev.AgeSeconds != 3600 ||
		ev.Reason != "flow billing: entity: the expression gave an empty id" || ev.Repair != store.DeadLetterRepair("entity:") ||
		!slices.Equal(ev.Flows, []string{"billing"}) || ev.State != "dead_lettered" {
		t.Errorf("event entry = %+v", ev)
	}
	// The pinned fields are there for both kinds.
	_, raw := f.do(http.MethodGet, "/api/v1/exceptions", "")
	var shape struct{ Exceptions []map[string]json.RawMessage }
	if err := json.Unmarshal(raw, &shape); err != nil {
		t.Fatal(err)
	}
	for _, x := range shape.Exceptions {
		for _, k := range []string{"kind", "id", "reason", "repair", "owner", "age_seconds"} {
			if _, ok := x[k]; !ok {
				t.Errorf("entry lacks %q: %s", k, raw)
			}
		}
	}

	var page api.ExceptionListJSON
	if code := f.get("/api/v1/exceptions?limit=1", &page); code != 200 || len(page.Exceptions) != 1 || page.NextCursor == "" {
		t.Fatalf("page 1: %d %+v", code, page)
	}
	var next api.ExceptionListJSON
	if code := f.get("/api/v1/exceptions?limit=1&cursor="+page.NextCursor, &next); code != 200 ||
		len(next.Exceptions) != 1 || next.Exceptions[0].Kind != "event" {
		t.Fatalf("page 2: %d %+v", code, next)
	}
	var events api.ExceptionListJSON
	if code := f.get("/api/v1/exceptions?kind=event", &events); code != 200 || len(events.Exceptions) != 1 || events.Exceptions[0].ID != "e2" {
		t.Fatalf("kind=event: %d %+v", code, events)
	}
}
