package flow

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

const occurredFlow = `flows:
  - name: tickets
    source: shop
    events: ["order.*"]
    entity: event.ticket
    version:
      mode: occurred_at
      tie_break: event.seq
    state: event.status
    effects:
      - name: sync
        destination: crm
        request: {path: '"/tickets/" + pathEscape(entity)', body: '{"status": state}'}
`

// sendAt stores one event with its own occurrence time (zero: none).
func (f *fixture) sendAt(eventID string, occurred time.Time, body string) {
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

// Mode occurred_at orders an entity's events by the sender's occurrence
// time, the tie-break settling events of the same instant: a late event
// that happened earlier is stale, and the projection ends at the latest.
func TestOccurredAtOrdersByTimeThenTieBreak(t *testing.T) {
	f := newFixture(t, fmt.Sprintf(sources, "http://127.0.0.1:1")+occurredFlow)
	t1, t2, t3 := t0.Add(-3*time.Minute), t0.Add(-2*time.Minute), t0.Add(-time.Minute)
	// Arrival order: t3 first, then the earlier ones, then two events at
	// the same instant t3 whose tie-break decides.
	f.sendAt("evt-t3", t3, `{"ticket":"T1","status":"closed","seq":"b"}`)
	f.drain()
	f.sendAt("evt-t1", t1, `{"ticket":"T1","status":"open","seq":"a"}`)
	f.sendAt("evt-t2", t2, `{"ticket":"T1","status":"pending","seq":"a"}`)
	f.drain()
	for id, want := range map[string]string{"evt-t3": "applied", "evt-t1": "stale", "evt-t2": "stale"} {
		if d := f.disposition("shop", id); d != want {
			t.Errorf("%s: %s, want %s", id, d, want)
		}
	}
	// Same instant, a tie-break below the applied one: stale; above: applied.
	f.sendAt("evt-t3-a", t3, `{"ticket":"T1","status":"reopened","seq":"a"}`)
	f.sendAt("evt-t3-c", t3, `{"ticket":"T1","status":"archived","seq":"c"}`)
	f.drain()
	if d := f.disposition("shop", "evt-t3-a"); d != "stale" {
		t.Errorf("same instant, lower tie-break: %s, want stale", d)
	}
	if d := f.disposition("shop", "evt-t3-c"); d != "applied" {
		t.Errorf("same instant, higher tie-break: %s, want applied", d)
	}
	p, err := f.st.ProjectionGet(context.Background(), &store.ProjectionGetParams{Flow: "tickets", Entity: "T1"})
	if err != nil || p == nil {
		t.Fatalf("projection: %v %v", p, err)
	}
	wantVersion := "t" + t3.UTC().Format(time.RFC3339Nano) + "/c"
	if p.Version != wantVersion || string(p.State) != `"archived"` {
		t.Fatalf("projection %s %s, want %s archived", p.Version, p.State, wantVersion)
	}
	// The same event delivered again is a duplicate, never a second effect.
	keys := f.effects("tickets")
	f.sendAt("evt-t3-c-again", t3, `{"ticket":"T1","status":"archived","seq":"c"}`)
	f.drain()
	if d := f.disposition("shop", "evt-t3-c-again"); d != "duplicate" {
		t.Errorf("a second event for the same instant and tie-break: %s, want duplicate", d)
	}
	if after := f.effects("tickets"); len(after) != len(keys) {
		t.Errorf("effects %v after a duplicate, want still %v", after, keys)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "tickets:T1:t") {
			t.Errorf("episode key %s does not carry the time version", k)
		}
	}
	// Both applied versions have their effect, the stale ones none.
	if len(keys) != 2 {
		t.Errorf("effects %v, want one per applied version (2)", keys)
	}
}

// An event without an occurrence time cannot be placed in time order: it
// is dead-lettered with the reason, the entity's other events go on.
func TestOccurredAtWithoutTimeDeadLetters(t *testing.T) {
	f := newFixture(t, fmt.Sprintf(sources, "http://127.0.0.1:1")+occurredFlow)
	f.sendAt("evt-none", time.Time{}, `{"ticket":"T2","status":"open","seq":"a"}`)
	f.sendAt("evt-some", t0, `{"ticket":"T2","status":"open","seq":"a"}`)
	f.drain()
	if d := f.disposition("shop", "evt-none"); d != "dead_lettered" {
		t.Fatalf("no occurrence time: %s, want dead_lettered", d)
	}
	if d := f.disposition("shop", "evt-some"); d != "applied" {
		t.Fatalf("the entity's other event: %s, want applied", d)
	}
	rows, _ := f.st.AuditList(context.Background(), &store.AuditListParams{Limit: 100})
	found := false
	for _, a := range rows {
		if a.EventID == "evt-none" && strings.Contains(a.Detail, "carries no occurrence time") {
			found = true
		}
	}
	if !found {
		t.Fatalf("the reason is not in the audit trail: %+v", rows)
	}
}
