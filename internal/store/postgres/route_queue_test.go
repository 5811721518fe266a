package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
)

// TestRouteQueue: an event that needs routing is queued once, by either
// inbox path, and never again for a repeated delivery; an event unrouted
// at receipt is not queued; an event an earlier version stored with
// routed = false (no queue row) is routed too, before the queued ones; and
// every waiting event is routed exactly once (0015_route_queue).
func TestRouteQueue(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	sub := func(id string, unrouted bool) *store.Submission {
		return &store.Submission{Deliveries: []*store.DeliveryInput{{
			RequestID: "r-" + id, Source: "shop", EventID: id, Type: "order.updated", Entity: "o-" + id,
			ReceivedAt: at, Unrouted: unrouted, Body: []byte(`{"n":1}`)}}}
	}
	commit := func(subs ...*store.Submission) []store.SubmissionResult {
		t.Helper()
		res, err := h.InboxCommit(ctx, &store.InboxCommitParams{Submissions: subs})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	pkOf := func(id string) int64 {
		t.Helper()
		var pk int64
		if err := h.pool.QueryRow(ctx, `SELECT pk FROM events WHERE source = 'shop' AND event_id = $1`, id).Scan(&pk); err != nil {
			t.Fatalf("event %s: %v", id, err)
		}
		return pk
	}

	// An event an earlier version received: routed = false, no queue row.
	legacyEvent(t, h, at, "old")
	// The fast path: two new events, one unrouted at receipt, one repeat in
	// the group.
	commit(sub("a", false), sub("b", false), sub("a", false), sub("u", true))
	// A repeat in a later group.
	if res := commit(sub("b", false)); !res[0].Items[0].Duplicate {
		t.Fatalf("repeat of b: %+v, want a duplicate", res[0].Items[0])
	}
	if n := h.inboxCareful.Load(); n != 0 {
		t.Fatalf("valid groups fell back to the careful path %d times", n)
	}
	// The careful path, which a refused submission sends the group down:
	// a new event and a repeat.
	bad := sub("x", false)
	bad.Deliveries[0].EventID = ""
	before := h.inboxCareful.Load()
	res := commit(sub("c", false), bad, sub("a", false))
	if h.inboxCareful.Load() != before+1 || res[1].Err == nil || res[0].Err != nil || res[2].Err != nil {
		t.Fatalf("group with a refused submission: %d fallbacks, results %+v", h.inboxCareful.Load()-before, res)
	}

	var queued []int64
	rows, err := h.pool.Query(ctx, `SELECT pk FROM route_queue ORDER BY pk`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var pk int64
		if err := rows.Scan(&pk); err != nil {
			t.Fatal(err)
		}
		queued = append(queued, pk)
	}
	rows.Close()
	if want := []int64{pkOf("a"), pkOf("b"), pkOf("c")}; !slices.Equal(queued, want) {
		t.Fatalf("queued %v, want a, b and c %v", queued, want)
	}
	if n, err := h.WorkCount(ctx); err != nil || n != 4 {
		t.Fatalf("WorkCount = %d, %v; want 4 (three queued, one left unrouted by an earlier version)", n, err)
	}

	// Pages of two: the earlier version's event first, then the queue in
	// pk order; each event once.
	var routedIDs []string
	decide := func(evs []*store.RoutableEvent) []*store.RouteDecision {
		var ds []*store.RouteDecision
		for _, e := range evs {
			routedIDs = append(routedIDs, e.EventID)
			ds = append(ds, &store.RouteDecision{EventPK: e.PK, Routes: []store.Route{{Flow: "orders", Entity: e.Entity, OrderKey: e.EventID}}})
		}
		return ds
	}
	for page := 0; ; page++ {
		routed, err := h.EventRouteNext(ctx, &store.EventRouteNextParams{Limit: 2, Now: at, Decide: decide})
		n := routed.Events
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if n > 2 || page > 3 {
			t.Fatalf("page %d of %d events with a limit of 2", page, n)
		}
	}
	if want := []string{"old", "a", "b", "c"}; !slices.Equal(routedIDs, want) {
		t.Fatalf("routed %v, want %v", routedIDs, want)
	}
	var left, legacy int
	if err := h.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM route_queue), (SELECT count(*) FROM events WHERE NOT routed)`).Scan(&left, &legacy); err != nil {
		t.Fatal(err)
	}
	if left != 0 || legacy != 0 {
		t.Fatalf("after routing: %d queued, %d with routed = false; want none", left, legacy)
	}
	if n, err := h.WorkCount(ctx); err != nil || n != 4 {
		t.Fatalf("WorkCount = %d, %v; want the 4 work items", n, err)
	}
	var work int
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM work`).Scan(&work); err != nil || work != 4 {
		t.Fatalf("%d work rows (%v), want one per routed event", work, err)
	}
	// The event unrouted at receipt was never waiting.
	var disp string
	if err := h.pool.QueryRow(ctx, `SELECT disposition FROM events WHERE event_id = 'u'`).Scan(&disp); err != nil || disp != "unrouted" {
		t.Fatalf("u: %q (%v), want unrouted", disp, err)
	}

	// The list-then-route path (EventListUnrouted, EventRoute) sees and
	// takes both kinds as well.
	legacyEvent(t, h, at, "old2")
	commit(sub("d", false))
	evs, err := h.EventListUnrouted(ctx, &store.EventListUnroutedParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, e := range evs {
		listed = append(listed, e.EventID)
	}
	if want := []string{"old2", "d"}; !slices.Equal(listed, want) {
		t.Fatalf("listed %v, want %v", listed, want)
	}
	routedIDs = nil
	if err := h.EventRoute(ctx, &store.EventRouteParams{Now: at, Decisions: decide(evs)}); err != nil {
		t.Fatal(err)
	}
	if evs, err := h.EventListUnrouted(ctx, &store.EventListUnroutedParams{Limit: 10}); err != nil || len(evs) != 0 {
		t.Fatalf("after EventRoute: %d events still listed (%v)", len(evs), err)
	}
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM work`).Scan(&work); err != nil || work != 6 {
		t.Fatalf("%d work rows (%v), want 6", work, err)
	}
}

// legacyEvent stores event id as an earlier version's inbox did:
// routed = false, and no queue row.
func legacyEvent(t *testing.T, h *handle, at time.Time, id string) {
	t.Helper()
	if _, err := h.pool.Exec(context.Background(), `WITH e AS (INSERT INTO events (source, event_id, type, entity, account, received_at, deliveries, disposition, routed)
		VALUES ('shop', $2, 'order.updated', 'o-' || $2, '', $1, 1, 'accepted', false) RETURNING pk)
		INSERT INTO deliveries (event_pk, request_id, batch_index, source, event_id, type, entity, account, received_at, headers, body)
		SELECT pk, 'r-' || $2, 0, 'shop', $2, 'order.updated', 'o-' || $2, '', $1, '{}', '{}' FROM e`, at, id); err != nil {
		t.Fatal(err)
	}
}
