package publish

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hookledger/hookledger/internal/store"
)

// A message goes to every endpoint whose type filter matches it when it
// is published: no filter takes everything, a glob's '*' stops at '/', a
// disabled endpoint gets its copy parked, a deleted one none. Every
// endpoint receives the same bytes, under the message id, signed with its
// own key (checked with the Standard Webhooks library).
func TestFanOutByTypeFilter(t *testing.T) { eachStore(t, testFanOutByTypeFilter) }

func testFanOutByTypeFilter(t *testing.T, storeURL string) {
	// One delivery at a time: each endpoint then receives its messages in
	// publication order, which this checks.
	e := newEnv(t, storeURL, "publish:\n  max_in_flight: 1\n")
	rcv := map[string]*receiver{}
	for id, types := range map[string][]string{
		"all":      nil,
		"invoices": {"invoice.*"},
		"exact":    {"customer.created"},
		"multi":    {"invoice.paid", "customer.*"},
		"off":      {"invoice.*"},
		"gone":     {"invoice.*"},
	} {
		rcv[id] = newReceiver(t)
		e.create(id, rcv[id].srv.URL, types...)
	}
	if _, err := e.s.SetEnabled(e.ctx, "off", false, "by test", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.SetEnabled(e.ctx, "gone", false, "by test", "test"); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Delete(e.ctx, "gone", "test"); err != nil {
		t.Fatal(err)
	}

	wakes := e.wakeCount()
	want := map[string][]string{} // endpoint → message ids, in order
	for i, tc := range []struct {
		typ string
		to  []string
	}{
		{"invoice.paid", []string{"all", "invoices", "multi", "off"}},
		{"invoice.paid.v2", []string{"all", "invoices", "off"}},
		{"invoice.x/y", []string{"all"}}, // '*' does not cross '/'
		{"customer.created", []string{"all", "exact", "multi"}},
		{"customer.deleted", []string{"all", "multi"}},
		{"order.created", []string{"all"}},
	} {
		res := e.publish(fmt.Sprint("k", i), tc.typ, fmt.Sprintf(`{"n":%d}`, i))
		got := slices.Clone(res.Endpoints)
		sort.Strings(got)
		if res.Replayed || !slices.Equal(got, tc.to) {
			t.Fatalf("%s went to %v (replayed %v), want %v", tc.typ, got, res.Replayed, tc.to)
		}
		for _, id := range tc.to {
			want[id] = append(want[id], res.ID)
		}
	}
	if n := e.wakeCount() - wakes; n != 6 {
		t.Fatalf("the worker was woken %d times for 6 messages with endpoints, want 6", n)
	}
	if v := e.counter(e.s.m.fanout); v != 14 {
		t.Fatalf("hookledger_publish_fanout_total = %v, want 14", v)
	}
	e.drain()

	bodies := map[string][]byte{} // message id → the bytes the first endpoint got
	for id, r := range rcv {
		if id == "off" || id == "gone" {
			continue
		}
		if ids := r.ids(); !slices.Equal(ids, want[id]) {
			t.Errorf("%s received %v, want %v", id, ids, want[id])
		}
		wh, err := standardwebhooks.NewWebhook(e.stored(id).Secrets[0].Key)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range r.deliveries() {
			if err := wh.VerifyIgnoringTimestamp(d.body, d.header); err != nil {
				t.Errorf("%s: delivery %s does not verify with its key: %v", id, d.header.Get("webhook-id"), err)
			}
			if d.header.Get("Content-Type") != "application/json" || d.header.Get("webhook-timestamp") != fmt.Sprint(t0.Unix()) {
				t.Errorf("%s: headers %v", id, d.header)
			}
			msg := d.header.Get("webhook-id")
			if first, ok := bodies[msg]; ok && !bytes.Equal(first, d.body) {
				t.Errorf("%s got other bytes for %s: %s, another endpoint %s", id, msg, d.body, first)
			}
			bodies[msg] = d.body
		}
	}
	// A key of one endpoint does not verify another's deliveries.
	wh, _ := standardwebhooks.NewWebhook(e.stored("exact").Secrets[0].Key)
	if d := rcv["invoices"].deliveries()[0]; wh.VerifyIgnoringTimestamp(d.body, d.header) == nil {
		t.Error("the key of endpoint exact verifies a delivery to invoices")
	}
	// The payload is {type, timestamp, data}; PostgreSQL stores it as
	// jsonb, so only its bytes on the wire are one form per message.
	for msg, b := range bodies {
		var p struct {
			Type, Timestamp string
			Data            struct{ N *int }
		}
		if err := json.Unmarshal(b, &p); err != nil || p.Type == "" || p.Timestamp != "2026-12-01T10:00:00Z" || p.Data.N == nil {
			t.Errorf("payload of %s: %s (%v), want type, timestamp and data", msg, b, err)
		}
	}
	if n := len(rcv["off"].deliveries()) + len(rcv["gone"].deliveries()); n != 0 {
		t.Fatalf("disabled and deleted endpoints received %d requests, want none", n)
	}
	parked := e.effects("off", store.EffectDead)
	if len(parked) != 2 || !strings.HasPrefix(parked[0].Reason, "parked: endpoint off is disabled (by test)") ||
		!strings.Contains(parked[0].SuggestedRepair, "PATCH /api/v1/endpoints/off") {
		t.Fatalf("the disabled endpoint's copies %+v, want both parked with the repair", parked)
	}
	if effs := e.effects("gone"); len(effs) != 0 {
		t.Fatalf("the deleted endpoint has %d deliveries, want none", len(effs))
	}

	// A disabled endpoint still gets its copy, parked: when it is
	// enabled it receives what was published meanwhile.
	if _, err := e.s.SetEnabled(e.ctx, "all", false, "by test", "test"); err != nil {
		t.Fatal(err)
	}
	if res := e.publish("later", "order.created", `{"n":9}`); !slices.Equal(res.Endpoints, []string{"all"}) {
		t.Fatalf("order.created went to %v, want the disabled all", res.Endpoints)
	}
	e.drain()
	if n := len(rcv["all"].deliveries()); n != 6 {
		t.Fatalf("all received %d, want the 6 sent before it was disabled", n)
	}
	if _, err := e.s.SetEnabled(e.ctx, "all", true, "by test", "test"); err != nil {
		t.Fatal(err)
	}
	e.drain()
	if ids := rcv["all"].ids(); len(ids) != 7 || ids[6] != e.messages()[6].EventID {
		t.Fatalf("all received %v after being enabled, want the message published meanwhile last", ids)
	}
}

// A message no endpoint subscribes to is stored and answered, and the
// worker is not woken for it.
func TestPublishWithoutEndpoints(t *testing.T) {
	e := newEnv(t, sqliteURLOf(t), "{}")
	res := e.publish("k", "invoice.paid", `{"id":1}`)
	if res.Replayed || len(res.Endpoints) != 0 || !strings.HasPrefix(res.ID, "msg_") || len(res.ID) != 36 {
		t.Fatalf("result %+v, want a new msg_ id and no endpoints", res)
	}
	if n := e.wakeCount(); n != 0 {
		t.Fatalf("woke the worker %d times for a message without endpoints", n)
	}
	if evs := e.messages(); len(evs) != 1 || evs[0].EventID != res.ID || evs[0].Type != "invoice.paid" {
		t.Fatalf("stored messages %+v, want %s", evs, res.ID)
	}
}
