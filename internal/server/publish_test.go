package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/openapi/openapitest"
)

// received is one delivery an endpoint got.
type received struct {
	header http.Header
	body   []byte
	path   string
}

// receiver is a local Standard Webhooks endpoint that records every
// delivery and answers status().
type receiver struct {
	mu     sync.Mutex
	got    []received
	status func() int
	srv    *httptest.Server
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{status: func() int { return 204 }}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, received{req.Header.Clone(), b, req.URL.Path})
		st := r.status
		r.mu.Unlock()
		w.WriteHeader(st())
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) deliveries() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

const endpointSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwMfKQ9r8GKYo="

func publishConfig(storeURL, url string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
store: %s
admin:
  token: %s
endpoints:
  - id: partner
    url: %s
    types: ["invoice.*"]
    secrets: [%s]
    allow_private_networks: true
`, storeURL, adminToken, url, endpointSecret)
}

func (h *harness) publish(key, body string) (int, string, http.Header) {
	h.t.Helper()
	hdr := http.Header{"Authorization": {"Bearer " + adminToken}}
	if key != "" {
		hdr.Set("Idempotency-Key", key)
	}
	return h.post("/api/v1/messages", []byte(body), hdr)
}

// A published message reaches a matching endpoint signed so that the
// Standard Webhooks library verifies it; the Idempotency-Key rules hold.
func TestPublishSmoke(t *testing.T) { stores(t, testPublishSmoke) }

func testPublishSmoke(t *testing.T, storeURL string) {
	rcv := newReceiver(t)
	h := startWith(t, publishConfig(storeURL, rcv.srv.URL+"/hooks/in"))

	code, body, _ := h.publish("", `{"type":"invoice.paid","data":{"id":"in_1"}}`)
	if code != 400 || !strings.Contains(body, "Idempotency-Key") {
		t.Fatalf("no key: %d %s, want 400 naming Idempotency-Key", code, body)
	}
	code, body, _ = h.publish("k1", `{"type":"invoice.paid","data":{"id":"in_1","amount":100}}`)
	if code != 202 {
		t.Fatalf("publish: %d %s", code, body)
	}
	var first struct{ ID string }
	if err := json.Unmarshal([]byte(body), &first); err != nil || !strings.HasPrefix(first.ID, "msg_") {
		t.Fatalf("publish answer %s: %v", body, err)
	}
	// The same payload written otherwise is the same request.
	code, body, hdr := h.publish("k1", `{"data":{"amount":100, "id":"in_1"}, "type":"invoice.paid"}`)
	if code != 202 || !strings.Contains(body, first.ID) || hdr.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s %v, want 202 with %s and Idempotent-Replayed", code, body, hdr, first.ID)
	}
	// The draft's form of the key, a Structured Field string, is the same key.
	code, body, hdr = h.publish(`"k1"`, `{"type":"invoice.paid","data":{"id":"in_1","amount":100}}`)
	if code != 202 || !strings.Contains(body, first.ID) || hdr.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("quoted key: %d %s, want the replay of %s", code, body, first.ID)
	}
	for _, bad := range []string{`"k1`, `"k1" x`, "effect:orders:o1:r1:tell"} {
		if code, body, _ := h.publish(bad, `{"type":"invoice.paid","data":{"id":"in_1"}}`); code != 400 || !strings.Contains(body, "Idempotency-Key") {
			t.Fatalf("key %q: %d %s, want 400 about the Idempotency-Key", bad, code, body)
		}
	}
	code, body, _ = h.publish("k1", `{"type":"invoice.paid","data":{"id":"in_2"}}`)
	if code != 422 {
		t.Fatalf("other payload under the same key: %d %s, want 422", code, body)
	}
	// Not matching the endpoint's filter: stored, sent nowhere.
	if code, body, _ = h.publish("k2", `{"type":"customer.created","data":{"id":"cus_1"}}`); code != 202 {
		t.Fatalf("publish unmatched: %d %s", code, body)
	}

	waitFor(t, "the delivery", func() bool { return len(rcv.deliveries()) >= 1 })
	got := rcv.deliveries()[0]
	if got.path != "/hooks/in" {
		t.Fatalf("delivered to %q, want the endpoint's url as written (/hooks/in)", got.path)
	}
	if id := got.header.Get("webhook-id"); id != first.ID {
		t.Fatalf("webhook-id %q, want the message id %q", id, first.ID)
	}
	wh, err := standardwebhooks.NewWebhook(endpointSecret)
	if err != nil {
		t.Fatal(err)
	}
	// The server runs on a fake clock, so the library's tolerance check
	// against the real time is skipped; the signature is not.
	if err := wh.VerifyIgnoringTimestamp(got.body, got.header); err != nil {
		t.Fatalf("the reference library refuses the delivery: %v\nheaders %v\nbody %s", err, got.header, got.body)
	}
	tampered := append([]byte(nil), got.body...)
	tampered[len(tampered)-2] ^= 1
	if err := wh.VerifyIgnoringTimestamp(tampered, got.header); err == nil {
		t.Fatal("a tampered body verified")
	}
	var payload struct {
		Type string
		Data map[string]any
	}
	if err := json.Unmarshal(got.body, &payload); err != nil || payload.Type != "invoice.paid" || payload.Data["id"] != "in_1" {
		t.Fatalf("payload %s: %v", got.body, err)
	}
	if n := len(rcv.deliveries()); n != 1 {
		t.Fatalf("%d deliveries, want 1 (the replay and the unmatched type send nothing)", n)
	}
}

// setStatus makes the receiver answer code from now on.
func (r *receiver) setStatus(code int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status = func() int { return code }
}

// startAt is startWith with the server's fake clock starting at now
// instead of t0: for checks made against the real time (the reference
// JavaScript verifier's timestamp tolerance).
func startAt(t *testing.T, yaml string, now time.Time) *harness {
	t.Helper()
	return startConfig(t, parseConfig(t, yaml), now)
}

func parseConfig(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("e2e.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// startConfig runs a server of a config already loaded, at now.
func startConfig(t *testing.T, cfg *config.Config, now time.Time) *harness {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(now)
	logs := &syncBuffer{}
	srv := New(cfg, Options{Clock: clk, Listener: ln, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("server did not start: %v", err)
	}
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server stopped with %v, want a clean stop", err)
		}
	})
	t.Cleanup(stop)
	return &harness{t: t, base: "http://" + srv.Addr(), cfg: cfg, clk: clk, logs: logs, stop: stop, srv: srv,
		client: &http.Client{Transport: openapitest.Transport(t, nil)}}
}

// An Idempotency-Key outlives the process: after a restart on the same
// store the same request is answered with the first message, another
// payload under it is still 422, and the endpoint got one delivery.
func TestPublishKeySurvivesRestart(t *testing.T) { stores(t, testPublishKeySurvivesRestart) }

func testPublishKeySurvivesRestart(t *testing.T, storeURL string) {
	rcv := newReceiver(t)
	yaml := publishConfig(storeURL, rcv.srv.URL+"/in")
	h := startWith(t, yaml)
	const msg = `{"type":"invoice.paid","data":{"id":"in_7"}}`
	code, body, _ := h.publish("restart-key", msg)
	if code != 202 {
		t.Fatalf("publish: %d %s", code, body)
	}
	waitFor(t, "the delivery", func() bool { return len(rcv.deliveries()) == 1 })
	h.stop()

	h2 := startWith(t, yaml)
	code, again, hdr := h2.publish("restart-key", msg)
	if code != 202 || again != body || hdr.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after a restart: %d %s %v, want the first answer %s replayed", code, again, hdr, body)
	}
	if code, body, _ := h2.publish("restart-key", `{"type":"invoice.paid","data":{"id":"in_8"}}`); code != 422 {
		t.Fatalf("another payload after a restart: %d %s, want 422", code, body)
	}
	if n := len(rcv.deliveries()); n != 1 {
		t.Fatalf("%d deliveries, want 1", n)
	}
}

// call sends an admin API request with the bearer token (none when token
// is empty) and returns the status, body and headers.
func (h *harness) call(method, path, body, token string) (int, []byte, http.Header) {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, h.base+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// publishID publishes and returns the new message's id, failing unless
// the answer is 202.
func (h *harness) publishID(key, body string) string {
	h.t.Helper()
	code, resp, _ := h.publish(key, body)
	if code != 202 {
		h.t.Fatalf("publish %s: %d %s, want 202", key, code, resp)
	}
	var m api.MessageJSON
	if err := json.Unmarshal([]byte(resp), &m); err != nil || !strings.HasPrefix(m.ID, "msg_") {
		h.t.Fatalf("publish answer %s: %v", resp, err)
	}
	return m.ID
}

// effectList lists effects through the admin API (query: its filters).
func (h *harness) effectList(query string) []api.EffectJSON {
	h.t.Helper()
	code, b := h.get("/api/v1/effects?"+query, adminToken)
	if code != 200 {
		h.t.Fatalf("effects API %s: %d %s", query, code, b)
	}
	var out struct{ Effects []api.EffectJSON }
	if err := json.Unmarshal(b, &out); err != nil {
		h.t.Fatalf("effects API JSON: %v: %s", err, b)
	}
	return out.Effects
}

// endpoint reads one endpoint through the admin API.
func (h *harness) endpoint(id string) api.EndpointJSON {
	h.t.Helper()
	code, b := h.get("/api/v1/endpoints/"+id, adminToken)
	if code != 200 {
		h.t.Fatalf("GET endpoint %s: %d %s", id, code, b)
	}
	var e api.EndpointJSON
	if err := json.Unmarshal(b, &e); err != nil {
		h.t.Fatalf("endpoint JSON: %v: %s", err, b)
	}
	return e
}

// metric reads one unlabelled series from /metrics (-1 when absent).
func (h *harness) metric(name string) float64 {
	h.t.Helper()
	code, b := h.get("/metrics", "")
	if code != 200 {
		h.t.Fatalf("/metrics: %d", code)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				h.t.Fatalf("metric line %q: %v", line, err)
			}
			return f
		}
	}
	return -1
}

// published lists the stored published messages (events of source publish).
func (h *harness) published() []api.EventJSON {
	h.t.Helper()
	code, b := h.get("/api/v1/events?source=publish&limit=100", adminToken)
	if code != 200 {
		h.t.Fatalf("events API: %d %s", code, b)
	}
	var out api.EventListJSON
	if err := json.Unmarshal(b, &out); err != nil {
		h.t.Fatalf("events API JSON: %v: %s", err, b)
	}
	return out.Events
}

// Disabling an endpoint parks its messages that wait for a retry at once,
// not when that retry comes due hours later; enabling delivers them.
func TestPublishDisableParksWaitingRetries(t *testing.T) {
	stores(t, testPublishDisableParksWaitingRetries)
}

func testPublishDisableParksWaitingRetries(t *testing.T, storeURL string) {
	rcv := newReceiver(t)
	rcv.setStatus(500)
	h := startWith(t, publishConfig(storeURL, rcv.srv.URL+"/in"))
	id := h.publishID("wait-1", `{"type":"invoice.paid","data":{"id":"in_1"}}`)
	waitFor(t, "the first failed attempt", func() bool {
		es := h.effectList("destination=endpoint:partner&state=retry_wait")
		return len(es) == 1
	})
	// The clock stands still: the retry is 5 s away and never comes due.
	if code, b, _ := h.call("PATCH", "/api/v1/endpoints/partner", `{"enabled": false}`, adminToken); code != 200 {
		t.Fatalf("disable: %d %s", code, b)
	}
	waitFor(t, "the waiting message to park", func() bool {
		es := h.effectList("destination=endpoint:partner&state=dead")
		return len(es) == 1 && strings.HasPrefix(es[0].Reason, "parked: ")
	})
	if e := h.endpoint("partner"); e.Parked == nil || *e.Parked != 1 || e.Pending == nil || *e.Pending != 0 {
		t.Fatalf("endpoint after disabling: parked %v pending %v, want 1 and 0", e.Parked, e.Pending)
	}
	calls := len(rcv.deliveries())
	rcv.setStatus(204)
	if code, b, _ := h.call("PATCH", "/api/v1/endpoints/partner", `{"enabled": true}`, adminToken); code != 200 {
		t.Fatalf("enable: %d %s", code, b)
	}
	waitFor(t, "the delivery after enabling", func() bool {
		es := h.effectList("destination=endpoint:partner&state=done")
		return len(es) == 1
	})
	got := rcv.deliveries()
	if len(got) != calls+1 || got[len(got)-1].header.Get("webhook-id") != id {
		t.Fatalf("%d calls after enabling (had %d), want one more with webhook-id %s", len(got), calls, id)
	}
}

// An endpoint with parked messages cannot be deleted: a parked message of a
// deleted endpoint could be retried towards an address no process serves.
// Resolved, the endpoint deletes.
func TestPublishDeleteKeepsParkedMessagesInSight(t *testing.T) {
	rcv := newReceiver(t)
	rcv.setStatus(410)
	h := startWith(t, publishConfig(sqliteURL(t), rcv.srv.URL+"/in"))
	ep := h.createEndpoint(`{"id":"gone","url":"` + rcv.srv.URL + `/gone","allow_private_networks":true}`)
	h.publishID("del-1", `{"type":"invoice.paid","data":{"id":"in_1"}}`)
	var parked []api.EffectJSON
	waitFor(t, "the 410 to disable the endpoint and park the message", func() bool {
		parked = h.effectList("destination=endpoint:" + ep.ID + "&state=dead")
		return len(parked) == 1 && !h.endpoint(ep.ID).Enabled
	})
	code, b, _ := h.call("DELETE", "/api/v1/endpoints/"+ep.ID, "", adminToken)
	if code != 409 || !strings.Contains(string(b), "resolve its parked messages") {
		t.Fatalf("delete with a parked message: %d %s, want 409 saying how to clear it", code, b)
	}
	if code, b, _ := h.call("POST", fmt.Sprintf("/api/v1/effects/%d/resolve", parked[0].ID), `{"note":"the partner left"}`, adminToken); code != 200 {
		t.Fatalf("resolve: %d %s", code, b)
	}
	if code, b, _ := h.call("DELETE", "/api/v1/endpoints/"+ep.ID, "", adminToken); code != 204 {
		t.Fatalf("delete after resolving: %d %s, want 204", code, b)
	}
}

// An endpoint removed from the config file while it still has messages to
// deliver is disabled, not deleted, so they park in sight; once they are
// resolved, the next start deletes it.
func TestPublishEndpointRemovedFromConfigKeepsItsMessages(t *testing.T) {
	rcv := newReceiver(t)
	rcv.setStatus(500)
	storeURL := sqliteURL(t)
	h := startWith(t, publishConfig(storeURL, rcv.srv.URL+"/in"))
	h.publishID("rm-1", `{"type":"invoice.paid","data":{"id":"in_1"}}`)
	waitFor(t, "the first failed attempt", func() bool {
		return len(h.effectList("destination=endpoint:partner&state=retry_wait")) == 1
	})
	h.stop()

	without := fmt.Sprintf("listen: 127.0.0.1:0\nstore: %s\nadmin:\n  token: %s\n", storeURL, adminToken)
	h2 := startWith(t, without)
	e := h2.endpoint("partner")
	if e.Enabled || !strings.Contains(e.DisabledReason, "removed from the config file") {
		t.Fatalf("endpoint after its removal: %+v, want it kept, disabled, saying why", e)
	}
	var parked []api.EffectJSON
	waitFor(t, "the message to park", func() bool {
		parked = h2.effectList("destination=endpoint:partner&state=dead")
		return len(parked) == 1
	})
	if code, b, _ := h2.call("POST", fmt.Sprintf("/api/v1/effects/%d/resolve", parked[0].ID), `{"note":"partner gone"}`, adminToken); code != 200 {
		t.Fatalf("resolve: %d %s", code, b)
	}
	h2.stop()

	h3 := startWith(t, without)
	if code, b := h3.get("/api/v1/endpoints/partner", adminToken); code != 404 {
		t.Fatalf("endpoint after its messages were resolved and a restart: %d %s, want 404", code, b)
	}
}
