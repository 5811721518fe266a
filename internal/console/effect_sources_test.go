package console

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// The effect page names every event that asked for the effect, oldest
// first, each linking to its event page: here the source event evt_1 and
// evt_9, a duplicate with a new id that asked for the same episode key.
func TestEffectPageSourceEvents(t *testing.T) {
	f, _, srv := startConsole(t, 0)
	ctx := context.Background()
	res, err := f.st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "req_9", Source: "stripe", EventID: "evt_9", Type: "customer.subscription.updated", Entity: "sub_9",
		ReceivedAt: f.clk.Now(), Body: []byte(`{"id":"evt_9"}`),
	}}}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("store evt_9: %v %v", err, res)
	}
	pk := res[0].Items[0].EventPK
	if err := f.st.EventRoute(ctx, &store.EventRouteParams{Now: f.clk.Now(), Decisions: []*store.RouteDecision{
		{EventPK: pk, Routes: []store.Route{{Flow: "billing_to_crm", Entity: "sub_9", OrderKey: "1"}}}}}); err != nil {
		t.Fatalf("route: %v", err)
	}
	leases, err := f.st.EntityClaim(ctx, &store.EntityClaimParams{Owner: "test", Now: f.clk.Now(), LeaseFor: time.Minute, Limit: 10})
	if err != nil || len(leases) != 1 {
		t.Fatalf("claim entity: %v %v", leases, err)
	}
	work, err := f.st.WorkListPending(ctx, &store.WorkListPendingParams{Flow: "billing_to_crm", Entity: "sub_9", Limit: 10})
	if err != nil || len(work) != 1 {
		t.Fatalf("pending work: %v %v", work, err)
	}
	r, err := f.st.FlowApply(ctx, &store.FlowApplyParams{Lease: leases[0], Now: f.clk.Now(), WorkID: work[0].ID, EventPK: pk,
		Actor: "worker", Ordered: true, Version: "r2", VersionSort: "0000000002", State: []byte(`{}`),
		Effects: []*store.EffectInsert{{EpisodeKey: "billing_to_crm:sub_1:r2:upsert_deal", Effect: "upsert_deal",
			Destination: "crm", Request: []byte(`{"deal":"sub_1","seats":3}`)}}})
	if err != nil || r.EffectsExisting != 1 {
		t.Fatalf("apply evt_9: %+v %v", r, err)
	}

	c := newClient(t, srv)
	c.login()
	_, body := c.get("/effects/" + strconv.FormatInt(f.deadID, 10))
	start := strings.Index(body, `id="effect-source-events"`)
	if start < 0 {
		t.Fatalf("the effect page lacks the events that asked for it: %s", body)
	}
	row := body[start:]
	row = row[:strings.Index(row, "</dd>")]
	first := strings.Index(row, `<a href="/event?event_id=evt_1&amp;source=stripe">stripe evt_1</a>`)
	second := strings.Index(row, `<a href="/event?event_id=evt_9&amp;source=stripe">stripe evt_9</a>`)
	if first < 0 || second < first {
		t.Errorf("asked for by: %s, want evt_1 then evt_9, each linking to its event page", row)
	}
}

// The attempt timeline numbers calls across an operator's retry, and the
// first call after it says the retry restarted the count; the effect's
// facts count every call.
func TestEffectPageAttemptsAcrossRetry(t *testing.T) {
	f, _, srv := startConsole(t, 0)
	ctx := context.Background()
	if _, err := f.st.EffectOperate(ctx, &store.EffectOperateParams{EffectID: f.deadID, Action: store.OperateRetry,
		Actor: "operator:alice", Note: "seats fixed", Now: f.clk.Now()}); err != nil {
		t.Fatalf("retry: %v", err)
	}
	cs, err := f.st.EffectClaim(ctx, &store.EffectClaimParams{Owner: "d", Now: f.clk.Now(), LeaseFor: time.Minute, Limit: 10})
	if err != nil || len(cs) != 1 {
		t.Fatalf("claim: %v %v", cs, err)
	}
	if err := f.st.EffectSettle(ctx, &store.EffectSettleParams{EffectID: cs[0].ID, Token: cs[0].Token, Now: f.clk.Now(),
		Actor: "worker", Attempt: &store.Attempt{Status: 200, StartedAt: f.clk.Now()}, State: store.EffectDone, AddAttempt: true}); err != nil {
		t.Fatalf("settle: %v", err)
	}
	c := newClient(t, srv)
	c.login()
	_, body := c.get("/effects/" + strconv.FormatInt(f.deadID, 10))
	for _, want := range []string{`<td class="num">3</td>`, "call, restarted by operator retry",
		`<dd id="effect-attempts">3 (1 since the last restart)</dd>`} {
		if !strings.Contains(body, want) {
			t.Errorf("effect page lacks %q", want)
		}
	}
	if strings.Count(body, `<td class="num">1</td>`) > 1 {
		t.Errorf("attempt #1 shown twice: %s", body)
	}
}
