package flow

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

const forwardFlows = `sources:
  - name: sms
    kind: hmac
    secrets: [s]
    hmac: {header: X-Sig}
destinations:
  - {name: app, base_url: "https://app.example/in"}
flows:
  - name: sms_to_app
    source: sms
    forward: {destination: app}
  - name: sms_typed
    source: sms
    when: event.kind == "x"
    forward: {destination: app}
`

// sendWith commits one event whose delivery kept the given headers.
func (f *fixture) sendWith(eventID, body string, headers map[string]string) {
	f.t.Helper()
	f.sendSMS(eventID, body, headers, t0)
}

// sendSMS commits one event of source sms that occurred at occurred.
func (f *fixture) sendSMS(eventID, body string, headers map[string]string, occurred time.Time) {
	f.t.Helper()
	f.n++
	res, err := f.st.InboxCommit(context.Background(), &store.InboxCommitParams{Submissions: []*store.Submission{{
		Deliveries: []*store.DeliveryInput{{
			RequestID: fmt.Sprint("req-", f.n), Source: "sms", EventID: eventID, Type: "message.received",
			OccurredAt: occurred, ReceivedAt: f.clk.Now(), Headers: headers, Body: []byte(body),
		}},
	}}})
	if err != nil || res[0].Err != nil {
		f.t.Fatalf("commit: %v %v", err, res)
	}
}

// A forward's request is the body as received with the delivery's
// Content-Type, also when the body is a form that no expression could
// read; a forward flow whose when reads the body dead-letters it as any
// flow would. A delivery without a Content-Type is sent as JSON.
func TestForwardRequestIsTheBodyAsReceived(t *testing.T) {
	f := newFixture(t, forwardFlows)
	const form = "From=%2B15550001&Body=caf%C3%A9+%26+more&MessageSid=SM1"
	f.sendWith("SM1", form, map[string]string{"Content-Type": "application/x-www-form-urlencoded", "User-Agent": "sender"})
	f.sendWith("evt_2", `{"kind": "y"}`, nil)
	f.drain()
	es, err := f.st.EffectList(context.Background(), &store.EffectListParams{Flow: "sms_to_app"})
	if err != nil || len(es) != 2 {
		t.Fatalf("effects %v %v, want one forward per event", es, err)
	}
	want := map[string]struct{ body, ct string }{
		"sms_to_app:SM1:r0:forward":   {form, "application/x-www-form-urlencoded"},
		"sms_to_app:evt_2:r0:forward": {`{"kind": "y"}`, "application/json"},
	}
	for _, e := range es {
		var r Request
		if err := json.Unmarshal(e.Request, &r); err != nil {
			t.Fatal(err)
		}
		w, ok := want[e.EpisodeKey]
		if !ok || string(r.BodyBase64) != w.body || r.Headers["Content-Type"] != w.ct || r.Method != "POST" || r.Path != "" || len(r.Body) != 0 {
			t.Errorf("%s: request %s, want body %q with Content-Type %q", e.EpisodeKey, e.Request, w.body, w.ct)
		}
		if len(r.Headers) != 1 {
			t.Errorf("%s: headers %v, want the Content-Type only (no sender header travels on)", e.EpisodeKey, r.Headers)
		}
	}
	if d := f.disposition("sms", "SM1"); d != "dead_lettered" {
		t.Errorf("the form event is %s, want dead_lettered by sms_typed, whose when reads its body", d)
	}
	if got := f.effects("sms_typed"); len(got) != 0 {
		t.Errorf("sms_typed effects %v, want none: neither event is of kind x", got)
	}
}

// Without order_by every event of a burst is forwarded, each on its own;
// with order_by: occurrence an entity's burst, arriving in any order, is
// applied in occurrence order, and what waits for a call when a newer
// event is applied is superseded by it: no older event's call follows a
// newer one's.
func TestForwardOrderByOccurrence(t *testing.T) {
	f := newFixture(t, `sources:
  - name: sms
    kind: hmac
    secrets: [s]
    hmac: {header: X-Sig}
destinations:
  - {name: app, base_url: "https://app.example/in"}
flows:
  - name: every
    source: sms
    forward: {destination: app}
  - name: ordered
    source: sms
    forward: {destination: app}
    order_by: occurrence
    entity: event.sub
`)
	for _, m := range []int{3, 1, 4, 2} {
		f.sendSMS(fmt.Sprint("e", m), fmt.Sprintf(`{"sub":"s1","m":%d}`, m), nil, t0.Add(time.Duration(m)*time.Minute))
	}
	f.sendSMS("other", `{"sub":"s2","m":0}`, nil, t0)
	f.drain()
	every := f.effects("every")
	slices.Sort(every)
	if want := []string{"every:e1:r0:forward=approved", "every:e2:r0:forward=approved", "every:e3:r0:forward=approved",
		"every:e4:r0:forward=approved", "every:other:r0:forward=approved"}; !slices.Equal(every, want) {
		t.Errorf("every = %v, want one approved forward per event", every)
	}
	ordered := f.effects("ordered")
	slices.Sort(ordered)
	want := []string{
		"ordered:s1:t2026-11-03T09:01:00Z/e1:forward=superseded",
		"ordered:s1:t2026-11-03T09:02:00Z/e2:forward=superseded",
		"ordered:s1:t2026-11-03T09:03:00Z/e3:forward=superseded",
		"ordered:s1:t2026-11-03T09:04:00Z/e4:forward=approved",
		"ordered:s2:t2026-11-03T09:00:00Z/other:forward=approved",
	}
	if !slices.Equal(ordered, want) {
		t.Errorf("ordered = %v\nwant %v", ordered, want)
	}
}
