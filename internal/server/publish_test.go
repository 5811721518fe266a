package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
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
