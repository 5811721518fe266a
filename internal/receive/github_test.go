package receive_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A github source is kind and secrets alone.
const githubConfig = `listen: 127.0.0.1:0
store: sqlite:unused
sources:
  - name: gh
    kind: github
    secrets: ["It's a Secret to Everybody"]
`

// githubRequest is what GitHub posts: X-Hub-Signature-256 is computed here
// with the standard library as GitHub documents it (HMAC-SHA256 of the
// body, hex, after sha256=), independently of the code under test.
func githubRequest(t *testing.T, r *rig, delivery, event string, body []byte) *http.Request {
	t.Helper()
	m := hmac.New(sha256.New, []byte("It's a Secret to Everybody"))
	m.Write(body)
	req, err := http.NewRequest("POST", r.srv.URL+"/hooks/gh", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "GitHub-Hookshot/044aadd")
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(m.Sum(nil)))
	req.Header.Set("X-GitHub-Delivery", delivery)
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Hook-ID", "292430182")
	return req
}

// The event is named by X-GitHub-Delivery and typed by X-GitHub-Event; a
// redelivery (same GUID) is a duplicate of the same event, another GUID is
// another event, and the GitHub headers are kept as evidence.
func TestGitHubThroughTheReceiver(t *testing.T) {
	r := newRig(t, githubConfig, nil)
	body := []byte(`{"action":"opened","issue":{"number":1347},"repository":{"full_name":"octo/hello"},"installation":{"id":42}}`)
	const guid = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
	code, resp, _ := do(t, githubRequest(t, r, guid, "issues", body))
	if code != 200 {
		t.Fatalf("github delivery: got %d %s", code, resp)
	}
	code, resp, _ = do(t, githubRequest(t, r, guid, "issues", body))
	if code != 200 || !strings.Contains(resp, `"duplicates":1`) {
		t.Fatalf("redelivery: got %d %s, want a duplicate", code, resp)
	}
	code, resp, _ = do(t, githubRequest(t, r, "8b1c0a8e-cc78-11e3-81ab-4c9367dc0958", "issues", body))
	if code != 200 || strings.Contains(resp, "duplicates") {
		t.Fatalf("second event: got %d %s", code, resp)
	}
	evs := r.events()
	if len(evs) != 2 {
		t.Fatalf("stored %d events, want 2", len(evs))
	}
	ds := r.deliveries("gh", guid)
	if len(ds) != 2 || ds[0].Type != "issues" || ds[0].Account != "42" {
		t.Fatalf("deliveries of %s = %+v", guid, ds)
	}
	if h := ds[0].Headers; h["X-GitHub-Delivery"] != guid || h["X-GitHub-Event"] != "issues" || h["X-GitHub-Hook-ID"] != "292430182" {
		t.Errorf("kept headers = %v", h)
	}
	if _, ok := ds[0].Headers["X-Hub-Signature-256"]; ok {
		t.Error("the signature was kept")
	}
}

// Refusals: the SHA-1 header alone is no signature (401), a body changed
// after signing fails (401), and a delivery without X-GitHub-Event breaks
// GitHub's contract (400 naming the header).
func TestGitHubRefusals(t *testing.T) {
	r := newRig(t, githubConfig, nil)
	body := []byte(`{"zen":"Keep it logically awesome."}`)

	sha1Only := githubRequest(t, r, "d1", "ping", body)
	sha1Only.Header.Del("X-Hub-Signature-256")
	sha1Only.Header.Set("X-Hub-Signature", "sha1=0000000000000000000000000000000000000000")
	if code, resp, _ := do(t, sha1Only); code != 401 || !strings.Contains(resp, "X-Hub-Signature-256") {
		t.Errorf("sha1 only: got %d %s, want 401 naming X-Hub-Signature-256", code, resp)
	}

	signed := githubRequest(t, r, "d2", "ping", body)
	tampered, err := http.NewRequest("POST", signed.URL.String(), bytes.NewReader([]byte(`{"zen":"Keep it logically awesome!"}`)))
	if err != nil {
		t.Fatal(err)
	}
	tampered.Header = signed.Header
	if code, resp, _ := do(t, tampered); code != 401 {
		t.Errorf("changed body: got %d %s, want 401", code, resp)
	}

	noEvent := githubRequest(t, r, "d3", "ping", body)
	noEvent.Header.Del("X-GitHub-Event")
	if code, resp, _ := do(t, noEvent); code != 400 || !strings.Contains(resp, "header:X-GitHub-Event: is required") {
		t.Errorf("no X-GitHub-Event: got %d %s, want 400 naming it", code, resp)
	}
	if evs := r.events(); len(evs) != 0 {
		t.Fatalf("stored %d events after refusals", len(evs))
	}
}

// fields: still override the kind's paths: a github source can name its
// entity and occurrence time from the payload of the events it subscribes.
func TestGitHubFieldsOverride(t *testing.T) {
	r := newRig(t, githubConfig+"    fields: {entity: issue.number, occurred_at: issue.updated_at}\n", nil)
	body := []byte(`{"action":"edited","issue":{"number":1347,"updated_at":"2026-11-03T08:59:00Z"}}`)
	if code, resp, _ := do(t, githubRequest(t, r, "g1", "issues", body)); code != 200 {
		t.Fatalf("got %d %s", code, resp)
	}
	ds := r.deliveries("gh", "g1")
	if len(ds) != 1 || ds[0].Entity != "1347" || !ds[0].OccurredAt.Equal(t0.Add(-time.Minute)) || ds[0].Type != "issues" {
		t.Fatalf("delivery = %+v", ds)
	}
}
