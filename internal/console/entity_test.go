package console

import (
	"context"
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
