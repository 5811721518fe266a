package receive_test

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// svixRequest is what a Svix-powered sender posts: a signature made by the
// Standard Webhooks library, under the svix-* header names.
func svixRequest(t *testing.T, r *rig, id string, body []byte) *http.Request {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	sig, err := wh.Sign(id, t0, body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest("POST", r.srv.URL+"/hooks/app", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("svix-id", id)
	req.Header.Set("svix-timestamp", strconv.FormatInt(t0.Unix(), 10))
	req.Header.Set("svix-signature", sig)
	return req
}

// A Svix-signed request is accepted by a standard-webhooks source: the
// event is named by svix-id, a retry of it (same svix-id, new attempt) is a
// duplicate of the same event, another message is another event, and the
// svix id and timestamp are kept as evidence while the signature is not.
func TestSvixHeadersThroughTheReceiver(t *testing.T) {
	r := newRig(t, baseConfig, nil)
	body := swBody("msg_svix_1", "user.created")
	code, resp, _ := do(t, svixRequest(t, r, "msg_svix_1", body))
	if code != 200 {
		t.Fatalf("svix request: got %d %s, want 200", code, resp)
	}
	code, resp, _ = do(t, svixRequest(t, r, "msg_svix_1", body))
	if code != 200 || !strings.Contains(resp, `"duplicates":1`) {
		t.Fatalf("svix retry: got %d %s, want 200 with one duplicate", code, resp)
	}
	code, resp, _ = do(t, svixRequest(t, r, "msg_svix_2", swBody("msg_svix_2", "user.created")))
	if code != 200 {
		t.Fatalf("second svix message: got %d %s", code, resp)
	}
	evs := r.events()
	if len(evs) != 2 {
		t.Fatalf("stored %d events, want 2 (one per svix-id)", len(evs))
	}
	ds := r.deliveries("app", "msg_svix_1")
	if len(ds) != 2 {
		t.Fatalf("msg_svix_1 has %d deliveries, want 2 (both attempts recorded)", len(ds))
	}
	h := ds[0].Headers
	if h["Svix-Id"] != "msg_svix_1" || h["Svix-Timestamp"] != strconv.FormatInt(t0.Unix(), 10) {
		t.Errorf("kept headers = %v, want Svix-Id and Svix-Timestamp", h)
	}
	if _, ok := h["Svix-Signature"]; ok {
		t.Errorf("the signature was kept: %v", h)
	}
}

// A request that mixes the two header sets is refused with 401 and a
// message naming both headers, and nothing is stored.
func TestMixedHeaderSetsRefusedByTheReceiver(t *testing.T) {
	r := newRig(t, baseConfig, nil)
	body := swBody("msg_mix", "user.created")
	req := svixRequest(t, r, "msg_mix", body)
	req.Header.Del("svix-id")
	req.Header.Set("webhook-id", "msg_mix")
	code, resp, _ := do(t, req)
	if code != 401 || !strings.Contains(resp, "mixes two header sets (webhook-id with svix-timestamp)") {
		t.Fatalf("mixed sets: got %d %s, want 401 naming webhook-id and svix-timestamp", code, resp)
	}
	if evs := r.events(); len(evs) != 0 {
		t.Fatalf("stored %d events after a refusal", len(evs))
	}
}
