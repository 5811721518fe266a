package flow

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/replay"
	"github.com/hookledger/hookledger/internal/store"
)

const outcomeSources = `destinations:
  - name: crm
    base_url: http://127.0.0.1:1
    allow_private_networks: true
  - name: mail
    base_url: http://127.0.0.1:1
    allow_private_networks: true
sources:
  - name: shop
    kind: hmac
    secrets: [x]
    hmac: {header: X-Sig}
`

// sendOccurred commits one event with the given occurrence time (zero: the
// sender gave none).
func (f *fixture) sendOccurred(eventID, body string, occurred time.Time) {
	f.t.Helper()
	f.n++
	res, err := f.st.InboxCommit(context.Background(), &store.InboxCommitParams{Submissions: []*store.Submission{{
		Deliveries: []*store.DeliveryInput{{
			RequestID: fmt.Sprint("req-", f.n), Source: "shop", EventID: eventID, Type: "order.updated",
			OccurredAt: occurred, ReceivedAt: f.clk.Now(), Body: []byte(body),
		}},
	}}})
	if err != nil || res[0].Err != nil {
		f.t.Fatalf("commit: %v %v", err, res)
	}
}

// prepared routes the pending events and computes, without applying it,
// what the first pending event of the first claimed entity would insert.
func (f *fixture) prepared() (*store.FlowApplyParams, error) {
	f.t.Helper()
	ctx := context.Background()
	if _, err := f.eng.RouteOnce(ctx); err != nil {
		f.t.Fatal(err)
	}
	leases, err := f.st.EntityClaim(ctx, &store.EntityClaimParams{Owner: "t", Now: f.clk.Now(), LeaseFor: time.Minute, Limit: 1})
	if err != nil || len(leases) != 1 {
		f.t.Fatalf("claim: %v %v", leases, err)
	}
	l := leases[0]
	defer func() {
		_ = f.st.EntityRelease(ctx, &store.EntityReleaseParams{Lease: l, Now: f.clk.Now()})
	}()
	items, err := f.st.WorkListPending(ctx, &store.WorkListPendingParams{Flow: l.Flow, Entity: l.Entity, Limit: 1})
	if err != nil || len(items) != 1 {
		f.t.Fatalf("work: %v %v", items, err)
	}
	return f.eng.prepare(ctx, f.eng.flows[l.Flow], l, items[0], nil)
}

func deadlineFlow(deadline, onDeadline string) string {
	return outcomeSources + `flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.rev}
    state: event
    effects:
      - name: confirm
        destination: mail
        deadline: "` + deadline + `"
        on_deadline: "` + onDeadline + `"
        request: {path: '"/mails"', body: '{"order": entity}'}
`
}

// A duration counts from the event's occurrence time, and deadline_risk
// warns once less than a quarter of the time left at creation remains.
func TestDeadlineAfterOccurrence(t *testing.T) {
	f := newFixture(t, deadlineFlow("2h", "dead"))
	f.sendOccurred("e1", `{"order_id":"o1","rev":1}`, t0)
	f.clk.Advance(30 * time.Minute) // delivered and processed late
	p, err := f.prepared()
	if err != nil {
		t.Fatal(err)
	}
	ins := p.Effects[0]
	wantAt := t0.Add(2 * time.Hour)
	// 90 minutes left at creation: warn in the last quarter of them.
	wantWarn := wantAt.Add(-90 * time.Minute / 4)
	if !ins.DeadlineAt.Equal(wantAt) || !ins.DeadlineWarnAt.Equal(wantWarn) || ins.OnDeadline != "dead" {
		t.Fatalf("deadline %v warn %v on %q; want %v, %v, dead", ins.DeadlineAt, ins.DeadlineWarnAt, ins.OnDeadline, wantAt, wantWarn)
	}
	// Applied, the ledger keeps them.
	f.drain()
	es := f.effectRows()
	if len(es) != 1 || !es[0].DeadlineAt.Equal(wantAt) || !es[0].DeadlineWarnAt.Equal(wantWarn) || es[0].OnDeadline != "dead" {
		t.Fatalf("stored effects %+v", es)
	}
}

// A sender that gives no occurrence time starts the clock at receipt.
func TestDeadlineWithoutOccurrenceStartsAtReceipt(t *testing.T) {
	f := newFixture(t, deadlineFlow("30m", ""))
	received := f.clk.Now()
	f.sendOccurred("e1", `{"order_id":"o1","rev":1}`, time.Time{})
	f.clk.Advance(10 * time.Minute)
	p, err := f.prepared()
	if err != nil {
		t.Fatal(err)
	}
	if ins := p.Effects[0]; !ins.DeadlineAt.Equal(received.Add(30*time.Minute)) || ins.OnDeadline != "" {
		t.Fatalf("deadline %v on %q; want receipt + 30m and keep trying", ins.DeadlineAt, ins.OnDeadline)
	}
}

// An expression gives the deadline as a CEL timestamp or an RFC 3339
// string; null means no deadline; anything else dead-letters the event.
func TestDeadlineExpression(t *testing.T) {
	due := time.Date(2026, 11, 4, 17, 0, 0, 0, time.UTC)
	cases := []struct {
		name, deadline, body string
		want                 time.Time
		err                  string
	}{
		{"timestamp", "timestamp(event.due_at)", `{"order_id":"o1","rev":1,"due_at":"2026-11-04T17:00:00Z"}`, due, ""},
		{"string", "event.due_at", `{"order_id":"o1","rev":1,"due_at":"2026-11-04T18:00:00+01:00"}`, due, ""},
		{"arithmetic", "meta.occurred_at + duration('32h')", `{"order_id":"o1","rev":1}`, due, ""},
		{"null", "has(event.due_at) ? timestamp(event.due_at) : null", `{"order_id":"o1","rev":1}`, time.Time{}, ""},
		{"not a time", "event.due_at", `{"order_id":"o1","rev":1,"due_at":"tomorrow"}`, time.Time{}, "not an RFC 3339 time"},
		{"a number", "event.rev", `{"order_id":"o1","rev":1}`, time.Time{}, "want a timestamp"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, deadlineFlow(tc.deadline, ""))
			f.sendOccurred("e1", tc.body, t0)
			p, err := f.prepared()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "effect confirm: deadline") {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ins := p.Effects[0]
			if !ins.DeadlineAt.Equal(tc.want) {
				t.Fatalf("deadline %v, want %v", ins.DeadlineAt, tc.want)
			}
			if !tc.want.IsZero() && !ins.DeadlineWarnAt.Equal(warnAt(tc.want, t0, defaultDeadlineWarnShare)) {
				t.Errorf("warn at %v", ins.DeadlineWarnAt)
			}
		})
	}
}

func TestWarnAt(t *testing.T) {
	now := t0
	cases := []struct {
		deadline time.Time
		share    float64
		want     time.Time
	}{
		{now.Add(4 * time.Hour), 0.25, now.Add(3 * time.Hour)},
		{now.Add(4 * time.Hour), 1, now},
		{now.Add(4 * time.Hour), 0, now.Add(4 * time.Hour)},
		{now.Add(4 * time.Hour), 7, now}, // clamped to the share 1
		{now.Add(-time.Hour), 0.25, now.Add(-time.Hour)},
	}
	for _, tc := range cases {
		if got := warnAt(tc.deadline, now, tc.share); !got.Equal(tc.want) {
			t.Errorf("WarnAt(%v, share %v) = %v, want %v", tc.deadline.Sub(now), tc.share, got.Sub(now), tc.want.Sub(now))
		}
	}
}

const compensationFlow = outcomeSources + `flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.rev}
    state: '{"status": event.status}'
    effects:
      - name: confirm
        when: state.status == "placed"
        destination: mail
        request: {path: '"/mails"', body: '{"order": entity, "template": "confirmed"}'}
        compensate_when: state.status == "cancelled" && original.state != "resolved"
        compensation:
          method: POST
          path: '"/mails/" + pathEscape(original.destination_ref) + "/retract"'
          body: '{"order": entity, "undo": original.request.body.template, "was": previous != null ? previous.status : null}'
`

// deliverAll claims the flow's due effects and settles each done, as the
// delivery worker would after a 2xx, with the destination's reference.
func (f *fixture) deliverAll() {
	f.t.Helper()
	ctx := context.Background()
	claims, err := f.st.EffectClaim(ctx, &store.EffectClaimParams{Owner: "d", Now: f.clk.Now(), LeaseFor: time.Minute, Limit: 100})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, c := range claims {
		if err := f.st.EffectSettle(ctx, &store.EffectSettleParams{EffectID: c.ID, Token: c.Token, Now: f.clk.Now(), Actor: "d",
			State: store.EffectDone, AddAttempt: true, Attempt: &store.Attempt{Status: 200}, DestinationRef: fmt.Sprint("msg-", c.ID)}); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fixture) effectRows() []*store.Effect {
	f.t.Helper()
	es, err := f.st.EffectList(context.Background(), &store.EffectListParams{Flow: "orders", Limit: 100})
	if err != nil {
		f.t.Fatal(err)
	}
	return es
}

// An order cancelled after its confirmation was sent gets one
// compensation, rendered from the original's stored request and the
// destination's reference; a newer version that still matches the rule,
// and the same version applied again, add none.
func TestCompensateWhenAfterDone(t *testing.T) {
	f := newFixture(t, compensationFlow)
	f.send("shop", "e1", `{"order_id":"o1","rev":1,"status":"placed"}`)
	f.drain()
	f.deliverAll()
	f.send("shop", "e2", `{"order_id":"o1","rev":2,"status":"cancelled"}`)
	f.drain()
	es := f.effectRows()
	if len(es) != 2 {
		t.Fatalf("effects %v, want the confirmation and its compensation", f.effects("orders"))
	}
	orig, comp := es[0], es[1]
	if orig.State != store.EffectDone || comp.Compensates != orig.ID || comp.EpisodeKey != orig.EpisodeKey+":compensate" ||
		comp.Effect != "confirm:compensate" || comp.Destination != "mail" || comp.State != store.EffectApproved {
		t.Fatalf("original %+v\ncompensation %+v", orig, comp)
	}
	want := fmt.Sprintf(`{"method":"POST","path":"/mails/msg-%d/retract","body":{"order":"o1","undo":"confirmed","was":"placed"}}`, orig.ID)
	if string(comp.Request) != want {
		t.Errorf("compensation request %s\nwant %s", comp.Request, want)
	}

	// Still cancelled at a newer version, and the cancellation again
	// under another event id: the compensation exists already.
	f.send("shop", "e3", `{"order_id":"o1","rev":3,"status":"cancelled"}`)
	f.send("shop", "e2-again", `{"order_id":"o1","rev":2,"status":"cancelled"}`)
	f.drain()
	if d := f.disposition("shop", "e3"); d != "applied" {
		t.Fatalf("e3 = %s, want applied", d)
	}
	if got := f.effectRows(); len(got) != 2 {
		t.Fatalf("effects %v, want still one compensation", f.effects("orders"))
	}
	// Replaying every event of the order runs the rule again: the
	// compensation's episode key exists, so nothing is added.
	if res, err := replay.Run(context.Background(), f.st, f.eng, replay.Selection{Source: "shop"}, f.clk.Now()); err != nil || res.Events != 4 {
		t.Fatalf("replay: %+v %v", res, err)
	}
	f.drain()
	if got := f.effectRows(); len(got) != 2 || got[1].Compensates != orig.ID {
		t.Fatalf("after replay: effects %v, want still one compensation", f.effects("orders"))
	}
}

// A confirmation never sent is superseded by the cancellation instead of
// being compensated: nothing reaches the customer at all.
func TestCompensateWhenNeverSent(t *testing.T) {
	f := newFixture(t, compensationFlow)
	f.send("shop", "e1", `{"order_id":"o1","rev":1,"status":"placed"}`)
	f.drain()
	f.send("shop", "e2", `{"order_id":"o1","rev":2,"status":"cancelled"}`)
	f.drain()
	es := f.effectRows()
	if len(es) != 1 || es[0].State != store.EffectSuperseded {
		t.Fatalf("effects %v, want the confirmation superseded and no compensation", f.effects("orders"))
	}
}

// An operator's compensation renders the same template, with the current
// projected state as state; an effect without one cannot be compensated.
func TestRenderCompensationForAnOperator(t *testing.T) {
	f := newFixture(t, compensationFlow)
	f.send("shop", "e1", `{"order_id":"o1","rev":1,"status":"placed"}`)
	f.drain()
	f.deliverAll()
	orig := f.effectRows()[0]
	req, err := f.eng.CompensationRequest(context.Background(), orig)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"method":"POST","path":"/mails/msg-%d/retract","body":{"order":"o1","undo":"confirmed","was":null}}`, orig.ID)
	if string(req) != want {
		t.Errorf("request %s\nwant %s", req, want)
	}
	other := *orig
	other.Effect = "gone"
	if _, err := f.eng.CompensationRequest(context.Background(), &other); !errors.Is(err, ErrNoCompensation) || !strings.Contains(err.Error(), `no effect "gone"`) {
		t.Errorf("unknown effect: %v", err)
	}
	other = *orig
	other.Compensates, other.Effect = orig.ID, "confirm:compensate"
	if _, err := f.eng.CompensationRequest(context.Background(), &other); !errors.Is(err, ErrNoCompensation) {
		t.Errorf("a compensation compensated: %v", err)
	}
}

// The example of docs/flows.md does what the text after it says: the
// confirmation of an order cancelled after it was sent is compensated
// once; one cancelled before it was sent is superseded instead.
func TestOutcomesDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/flows.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "### Example: deadlines and compensation\n\n```yaml\n")
	if !ok {
		t.Fatal("no example in docs/flows.md")
	}
	example, _, _ := strings.Cut(rest, "```")
	example = strings.NewReplacer("${HOOKLEDGER_ADMIN_TOKEN}", "t", "${SHOP_WEBHOOK_SECRET}", "s3cret").Replace(example)
	f := newFixture(t, example)
	f.send("shop", "p1", `{"order_id":"ord-1","revision":1,"status":"placed","email":"a@example.com"}`)
	f.send("shop", "p2", `{"order_id":"ord-2","revision":1,"status":"placed","email":"b@example.com"}`)
	f.drain()
	es, err := f.st.EffectList(context.Background(), &store.EffectListParams{Flow: "orders_mail", Limit: 100})
	if err != nil || len(es) != 4 {
		t.Fatalf("effects %v %v", es, err)
	}
	for _, e := range es {
		if e.Effect == "confirm" && !e.DeadlineAt.Equal(t0.Add(30*time.Minute)) {
			t.Errorf("%s deadline %v, want 30 minutes after the order", e.EpisodeKey, e.DeadlineAt)
		}
	}
	// ord-1's mails go out; ord-2's do not, yet.
	ctx := context.Background()
	claims, err := f.st.EffectClaim(ctx, &store.EffectClaimParams{Owner: "d", Now: f.clk.Now(), LeaseFor: time.Minute, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		p := &store.EffectSettleParams{EffectID: c.ID, Token: c.Token, Now: f.clk.Now(), Actor: "d", State: store.EffectDone, AddAttempt: true, Attempt: &store.Attempt{Status: 200}}
		if c.Entity == "ord-2" {
			p = &store.EffectSettleParams{EffectID: c.ID, Token: c.Token, Now: f.clk.Now(), Actor: "d", State: store.EffectRetryWait, AddAttempt: true,
				Class: store.ClassTransient, Attempt: &store.Attempt{Status: 503, Class: store.ClassTransient}, NextAttemptAt: f.clk.Now().Add(time.Hour)}
		}
		if err := f.st.EffectSettle(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	f.send("shop", "c1", `{"order_id":"ord-1","revision":2,"status":"cancelled","email":"a@example.com"}`)
	f.send("shop", "c2", `{"order_id":"ord-2","revision":2,"status":"cancelled","email":"b@example.com"}`)
	f.drain()
	got := map[string]string{}
	var comp *store.Effect
	es, _ = f.st.EffectList(ctx, &store.EffectListParams{Flow: "orders_mail", Limit: 100})
	for _, e := range es {
		got[e.EpisodeKey] = string(e.State)
		if e.Compensates != 0 {
			comp = e
		}
	}
	want := map[string]string{
		"orders_mail:ord-1:r1:confirm": "done", "orders_mail:ord-1:r1:invoice": "done",
		"orders_mail:ord-1:r1:confirm:compensate": "approved",
		"orders_mail:ord-2:r1:confirm":            "superseded", "orders_mail:ord-2:r1:invoice": "retry_wait",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ledger %v\nwant   %v", got, want)
	}
	if comp == nil || !strings.Contains(string(comp.Request), `"to":"a@example.com"`) || !strings.Contains(string(comp.Request), `"template":"order_cancelled"`) {
		t.Errorf("compensation %+v", comp)
	}
}
