package console

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// TestEntityPageDeadLetterAndBound: a dead-lettered event stays in the
// history after the applied and stale ones, with its reason; the history
// read is bounded and says when it is cut.
func TestEntityPageDeadLetterAndBound(t *testing.T) {
	f, con, srv := startConsole(t, 0)
	ctx := context.Background()
	res, err := f.st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "req_9", Source: "stripe", EventID: "evt_9", Type: "customer.subscription.deleted", Entity: "sub_1",
		ReceivedAt: f.clk.Now(), Body: []byte(`{}`),
	}}}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("store evt_9: %v %v", err, res)
	}
	pk := res[0].Items[0].EventPK
	if err := f.st.EventRoute(ctx, &store.EventRouteParams{Now: f.clk.Now(), Decisions: []*store.RouteDecision{
		{EventPK: pk, Routes: []store.Route{{Flow: "billing_to_crm", Entity: "sub_1", OrderKey: "3"}}}}}); err != nil {
		t.Fatal(err)
	}
	leases, err := f.st.EntityClaim(ctx, &store.EntityClaimParams{Owner: "test", Now: f.clk.Now(), LeaseFor: time.Minute, Limit: 10})
	if err != nil || len(leases) != 1 {
		t.Fatalf("claim: %v %v", leases, err)
	}
	work, err := f.st.WorkListPending(ctx, &store.WorkListPendingParams{Flow: "billing_to_crm", Entity: "sub_1", Limit: 10})
	if err != nil || len(work) != 1 {
		t.Fatalf("pending: %v %v", work, err)
	}
	if _, err := f.st.FlowApply(ctx, &store.FlowApplyParams{Lease: leases[0], Now: f.clk.Now(), WorkID: work[0].ID, EventPK: pk,
		Actor: "worker", Fail: "refetch: 404 subscription not found"}); err != nil {
		t.Fatal(err)
	}
	if err := f.st.EntityRelease(ctx, &store.EntityReleaseParams{Lease: leases[0], Now: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}

	c := newClient(t, srv)
	c.login()
	_, body := c.get("/entity?flow=billing_to_crm&entity=sub_1")
	i1, i2, i9 := strings.Index(body, ">evt_1<"), strings.Index(body, ">evt_2<"), strings.Index(body, ">evt_9<")
	if i1 < 0 || i2 < i1 || i9 < i2 {
		t.Errorf("history order evt_1 %d, evt_2 %d, evt_9 %d: want 1, 2, 9", i1, i2, i9)
	}
	if !strings.Contains(body, ">dead_lettered<") || !strings.Contains(body, "refetch: 404 subscription not found") {
		t.Errorf("dead-lettered event or its reason missing")
	}
	if strings.Contains(body, "more events than one page shows") {
		t.Errorf("three events reported as cut")
	}

	pr, err := f.st.ProjectionGet(ctx, &store.ProjectionGetParams{Flow: "billing_to_crm", Entity: "sub_1"})
	if err != nil {
		t.Fatal(err)
	}
	evs, more, err := con.entityHistory(ctx, pr, "billing_to_crm", "sub_1", 2)
	if err != nil || !more || len(evs) != 2 || evs[0].EventID != "evt_1" || !evs[0].Applied || evs[1].Applied {
		t.Fatalf("bounded history: %d items, more %v, %v", len(evs), more, err)
	}
}

// sortKey encodes n as the flow engine's order keys do, so that byte
// order is numeric order.
func sortKey(n int64) string { return fmt.Sprintf("%020d", uint64(n)^(1<<63)) }

// seedEntity stores one event of entity in flowName and applies it with
// the flow engine's encoded order key and version sort key; it returns
// the event's primary key. effects are inserted with the apply.
func seedEntity(t *testing.T, f *fixture, flowName, entity, eventID, orderKey, version, versionSort string, effects ...*store.EffectInsert) int64 {
	t.Helper()
	ctx := context.Background()
	res, err := f.st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "req_" + eventID, Source: "shop", EventID: eventID, Type: "order.updated", Entity: entity,
		OccurredAt: t0, ReceivedAt: f.clk.Now(), Body: []byte(`{}`),
	}}}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("store %s: %v %v", eventID, err, res)
	}
	pk := res[0].Items[0].EventPK
	if err := f.st.EventRoute(ctx, &store.EventRouteParams{Now: f.clk.Now(), Decisions: []*store.RouteDecision{
		{EventPK: pk, Routes: []store.Route{{Flow: flowName, Entity: entity, OrderKey: orderKey}}}}}); err != nil {
		t.Fatal(err)
	}
	leases, err := f.st.EntityClaim(ctx, &store.EntityClaimParams{Owner: "test", Now: f.clk.Now(), LeaseFor: time.Minute, Limit: 10})
	if err != nil || len(leases) != 1 {
		t.Fatalf("claim: %v %v", leases, err)
	}
	work, err := f.st.WorkListPending(ctx, &store.WorkListPendingParams{Flow: flowName, Entity: entity, Limit: 10})
	if err != nil || len(work) != 1 {
		t.Fatalf("pending: %v %v", work, err)
	}
	if _, err := f.st.FlowApply(ctx, &store.FlowApplyParams{Lease: leases[0], Now: f.clk.Now(), WorkID: work[0].ID, EventPK: pk,
		Actor: "worker", Ordered: true, Version: version, VersionSort: versionSort, State: []byte(`{"status":"paid"}`),
		Effects: effects}); err != nil {
		t.Fatal(err)
	}
	if err := f.st.EntityRelease(ctx, &store.EntityReleaseParams{Lease: leases[0], Now: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	return pk
}

// The entity page shows the order and the applied version as the flow
// names them (r1, an occurrence time and tie-break, an arrival), never
// the encoded keys the store sorts by, which stay in a tooltip.
func TestEntityPageShowsBusinessVersions(t *testing.T) {
	f, con, srv := startConsole(t, 0)
	con.Attach(Attachments{VersionModes: map[string]string{"by_rev": "revision", "by_time": "occurred_at", "by_fetch": "refetch"}})
	occurred := sortKey(t0.UnixMicro()) + "|evt_A1"
	seedEntity(t, f, "by_rev", "o1", "evt_R", sortKey(1), "r1", sortKey(1))
	seedEntity(t, f, "by_time", "o2", "evt_A1", occurred, "t2026-11-03T09:00:00Z/evt_A1", occurred)
	// A refetching flow orders by arrival: its order key is the event's
	// place in the order of receipt.
	seedEntity(t, f, "by_fetch", "o3", "evt_F", sortKey(12), "r7", sortKey(7))

	c := newClient(t, srv)
	c.login()
	for _, tc := range []struct{ flow, entity, order, version, raw string }{
		{"by_rev", "o1", "r1", "r1", sortKey(1)},
		{"by_time", "o2", "t2026-11-03T09:00:00Z/evt_A1", "t2026-11-03T09:00:00Z/evt_A1", occurred},
		{"by_fetch", "o3", "arrival #12", "r7", sortKey(7)},
	} {
		_, body := c.get("/entity?flow=" + tc.flow + "&entity=" + tc.entity)
		order := regexp.MustCompile(`<td class="order-key long" title="[^"]*">([^<]*)</td>`).FindStringSubmatch(body)
		version := regexp.MustCompile(`<td class="version-applied long"[^>]*>([^<]*)</td>`).FindStringSubmatch(body)
		if order == nil || order[1] != tc.order || version == nil || version[1] != tc.version {
			t.Errorf("%s: order %q, version %q; want %q and %q", tc.flow, order, version, tc.order, tc.version)
		}
		if text := regexp.MustCompile(`<[^>]*>`).ReplaceAllString(body, ""); strings.Contains(text, tc.raw) {
			t.Errorf("%s: the page's text shows the encoded key %s", tc.flow, tc.raw)
		}
	}
}
