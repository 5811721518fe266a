package server

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/deliver"
)

// forwardConfig forwards a Standard Webhooks source three ways: every
// event of the given types to app (signed, with a bearer token), charges
// to a destination that is down, and subscriptions in occurrence order
// per subscription.
func forwardConfig(storeURL, events string, app, down, ordered *receiver) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
store: %s
admin:
  token: %s
sources:
  - name: billing
    kind: standard-webhooks
    secrets: [%s]
flows:
  - name: to_app
    source: billing
%s    forward: {destination: app}
  - name: to_down
    source: billing
    events: ["charge.*"]
    forward: {destination: down}
  - name: ordered
    source: billing
    events: ["subscription.*"]
    forward: {destination: ordered_app}
    order_by: occurrence
    entity: event.data.id
destinations:
  - name: app
    base_url: %s/hooks/in
    allow_private_networks: true
    auth: {bearer: app-token}
    signing:
      secrets: [%s]
  - name: down
    base_url: %s
    allow_private_networks: true
    retry: {base: 1s, cap: 1s, attempts: 2, redrive: []}
  - name: ordered_app
    base_url: %s
    allow_private_networks: true
`, storeURL, adminToken, swSecret, events, app.srv.URL, endpointSecret, down.srv.URL, ordered.srv.URL) + fastPoll
}

// swPost signs body as a Standard Webhooks sender and posts it with the
// given Content-Type.
func swPost(t *testing.T, h *harness, msgID, contentType, body string) {
	t.Helper()
	sig, err := verifier(t, swSecret).Sign(msgID, t0, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest("POST", h.base+"/hooks/billing", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = http.Header{"Webhook-Id": {msgID}, "Webhook-Timestamp": {fmt.Sprint(t0.Unix())}, "Webhook-Signature": {sig},
		"Content-Type": {contentType}}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("inbound %s: %d %s", msgID, resp.StatusCode, b)
	}
}

func subscriptionEvent(minute int) string {
	return fmt.Sprintf(`{"type":"subscription.updated","timestamp":"2026-11-03T08:%02d:00Z","data":{"id":"sub_1","minute":%d}}`, minute, minute)
}

// Forwarding end to end: the destination gets the event's body byte for
// byte with its Content-Type, the destination's auth and a Standard
// Webhooks signature its library verifies; a duplicate delivery is one
// call; a destination that keeps failing is retried, then the forward is
// dead in the exception queue; in occurrence order an older event never
// reaches the destination after a newer one; and a replay forwards what
// was never forwarded, and nothing twice.
func TestForward(t *testing.T) { stores(t, testForward) }

func testForward(t *testing.T, storeURL string) {
	app, down, ordered := newReceiver(t), newReceiver(t), newReceiver(t)
	down.setStatus(503)
	h := startWith(t, forwardConfig(storeURL, "    events: [\"invoice.*\"]\n", app, down, ordered))

	// Spacing, key order and escapes a re-encoding would change.
	const invoice = "{\"type\":\"invoice.paid\",  \"timestamp\":\"2026-11-03T08:59:00Z\",\n \"data\":{\"z\":1,\"a\":\"caf\\u00e9 <b>\",\"n\":1.50}}"
	const ct = "application/json; charset=utf-8"
	swPost(t, h, "msg_1", ct, invoice)
	waitFor(t, "the forward", func() bool { return len(app.deliveries()) == 1 })
	got := app.deliveries()[0]
	if string(got.body) != invoice {
		t.Fatalf("forwarded body\n%q\nwant the event's body byte for byte\n%q", got.body, invoice)
	}
	if got.header.Get("Content-Type") != ct || got.header.Get("Authorization") != "Bearer app-token" || got.path != "/hooks/in" {
		t.Fatalf("forwarded with Content-Type %q, Authorization %q to %s; want %q, the bearer token, /hooks/in",
			got.header.Get("Content-Type"), got.header.Get("Authorization"), got.path, ct)
	}
	if err := verifier(t, endpointSecret).VerifyIgnoringTimestamp(got.body, got.header); err != nil {
		t.Fatalf("the forward's signature does not verify: %v", err)
	}
	const key = "to_app:msg_1:r0:forward"
	if id, ts := got.header.Get("webhook-id"), got.header.Get("webhook-timestamp"); id != deliver.MessageID(key) || ts != fmt.Sprint(t0.Unix()) {
		t.Fatalf("webhook-id %q, timestamp %q; want %q (from the episode key), %d", id, ts, deliver.MessageID(key), t0.Unix())
	}
	waitFor(t, "the forward to be done", func() bool {
		effs := h.effectList("flow=to_app")
		return len(effs) == 1 && effs[0].State == "done" && effs[0].EpisodeKey == key
	})

	// The same delivery again: one event, two deliveries, one call.
	swPost(t, h, "msg_1", ct, invoice)
	waitFor(t, "the second delivery", func() bool {
		ev := h.events("billing", "msg_1")
		return len(ev) == 1 && ev[0].Deliveries == 2
	})
	// A type no flow takes is stored unrouted.
	const customer = `{"type":"customer.created","timestamp":"2026-11-03T08:59:30Z","data":{"id":"cus_1"}}`
	swPost(t, h, "msg_2", "application/json", customer)
	if d := settled(t, h, "billing", "msg_2"); d != "unrouted" {
		t.Fatalf("customer.created %s, want unrouted", d)
	}

	// A destination that keeps failing: retried, then dead.
	const charge = `{"type":"charge.refunded","timestamp":"2026-11-03T08:58:00Z","data":{"id":"ch_1"}}`
	swPost(t, h, "msg_3", "application/json", charge)
	waitFor(t, "the first attempt", func() bool { return len(down.deliveries()) == 1 })
	waitFor(t, "the retry to be scheduled", func() bool { return len(h.effectList("flow=to_down&state=retry_wait")) == 1 })
	h.clk.Advance(10 * time.Second)
	waitFor(t, "the forward to be dead", func() bool { return len(h.effectList("flow=to_down&state=dead")) == 1 })
	if n := len(down.deliveries()); n != 2 {
		t.Fatalf("%d calls to the failing destination, want 2 (retry.attempts)", n)
	}
	for _, d := range down.deliveries() {
		if string(d.body) != charge || d.header.Get("webhook-signature") != "" {
			t.Fatalf("attempt %q with signature %q, want the event's body, unsigned (no signing secret)", d.body, d.header.Get("webhook-signature"))
		}
	}
	if dead := h.effectList("flow=to_down&state=dead")[0]; !strings.Contains(dead.Reason, "503") {
		t.Fatalf("dead forward's reason %q, want the destination's 503", dead.Reason)
	}

	// Occurrence order: the older event that arrives after a newer one
	// was forwarded is stale, and the destination never sees it.
	swPost(t, h, "sub_b", "application/json", subscriptionEvent(50))
	waitFor(t, "the newer subscription event", func() bool { return len(ordered.deliveries()) == 1 })
	swPost(t, h, "sub_a", "application/json", subscriptionEvent(40))
	if d := settled(t, h, "billing", "sub_a"); d != "stale" {
		t.Fatalf("older subscription event %s, want stale", d)
	}
	swPost(t, h, "sub_c", "application/json", subscriptionEvent(55))
	waitFor(t, "the newest subscription event", func() bool { return len(ordered.deliveries()) == 2 })
	if o := ordered.deliveries(); string(o[0].body) != subscriptionEvent(50) || string(o[1].body) != subscriptionEvent(55) {
		t.Fatalf("ordered destination got %q then %q, want minute 50 then 55", o[0].body, o[1].body)
	}
	if effs := h.effectList("flow=ordered"); len(effs) != 2 || effs[0].Entity != "sub_1" {
		t.Fatalf("ordered forwards %+v, want two for entity sub_1", effs)
	}

	// The app now takes every type; a replay forwards the routed events
	// it never got, each once, and the invoice it got already not again.
	// Restarted later, as a real restart is: the leases the first
	// process held have run out.
	later := h.clk.Now().Add(time.Hour)
	h.stop()
	h = startAt(t, forwardConfig(storeURL, "", app, down, ordered), later)
	code, b := h.callReplay(`{"source":"billing","wait_seconds":30}`)
	if code != 200 {
		t.Fatalf("replay: %d %s", code, b)
	}
	waitFor(t, "the replayed forwards", func() bool { return len(app.deliveries()) == 5 })
	seen := map[string]int{}
	for _, d := range app.deliveries() {
		seen[string(d.body)]++
		if err := verifier(t, endpointSecret).VerifyIgnoringTimestamp(d.body, d.header); err != nil {
			t.Fatalf("a replayed forward does not verify: %v", err)
		}
	}
	for _, body := range []string{invoice, charge, subscriptionEvent(40), subscriptionEvent(50), subscriptionEvent(55)} {
		if seen[body] != 1 {
			t.Errorf("app got %q %d times, want once", body, seen[body])
		}
	}
	// Replay re-runs routed events only: one stored unrouted stays so.
	if seen[customer] != 0 {
		t.Errorf("app got the unrouted %q: a replay routes no event that no flow took when it came", customer)
	}
	if n := len(down.deliveries()); n != 2 {
		t.Errorf("the dead forward was called %d times, want still 2: a replay does not create an effect twice", n)
	}
	if n := len(ordered.deliveries()); n != 2 {
		t.Errorf("ordered destination got %d calls, want still 2", n)
	}
}

// callReplay posts a replay through the admin API.
func (h *harness) callReplay(body string) (int, string) {
	h.t.Helper()
	code, b, _ := h.call("POST", "/api/v1/replays", body, adminToken)
	return code, string(b)
}
