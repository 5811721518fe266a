package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/api"
)

// padded is prefix, n-len(prefix)-len(suffix) x's and suffix: n bytes.
func padded(t *testing.T, prefix, suffix string, n int) []byte {
	t.Helper()
	pad := n - len(prefix) - len(suffix)
	if pad < 0 {
		t.Fatalf("no room for a %d-byte body", n)
	}
	return []byte(prefix + strings.Repeat("x", pad) + suffix)
}

// postBody posts body to path; with declared false the body's length is
// not declared (chunked), so the server learns it only by reading.
func (h *harness) postBody(path string, body []byte, hdr http.Header, declared bool) (int, string) {
	h.t.Helper()
	var r io.Reader = bytes.NewReader(body)
	if !declared {
		r = io.MultiReader(r) // hides the length from the client
	}
	req, err := http.NewRequest("POST", h.base+path, r)
	if err != nil {
		h.t.Fatal(err)
	}
	if declared != (req.ContentLength == int64(len(body))) {
		h.t.Fatalf("declared %v: Content-Length %d for %d bytes", declared, req.ContentLength, len(body))
	}
	req.Header = hdr.Clone()
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// receive.max_body_bytes is exact: a body of exactly the limit is stored,
// one byte more is 413 and stores nothing, whether the sender declared the
// length or not.
func TestReceiveBodyLimitIsExact(t *testing.T) { stores(t, testReceiveBodyLimitIsExact) }

func testReceiveBodyLimitIsExact(t *testing.T, storeURL string) {
	h := start(t, storeURL)
	limit := int(h.cfg.Receive.MaxBodyBytes)
	if limit != 4096 {
		t.Fatalf("max_body_bytes = %d, want the test config's 4096", limit)
	}
	body := func(id string, n int) []byte {
		return padded(t, fmt.Sprintf(`{"id":%q,"object":"event","type":"invoice.paid","created":1762160000,"data":{"object":{"id":"in_1","memo":"`, id),
			`"}}}`, n)
	}
	for _, declared := range []bool{true, false} {
		exact, over := fmt.Sprintf("evt_exact_%v", declared), fmt.Sprintf("evt_over_%v", declared)
		b := body(exact, limit)
		if code, resp := h.postBody("/hooks/stripe", b, stripeHeader(b, stripeSecret, t0), declared); code != http.StatusOK {
			t.Errorf("a body of exactly %d bytes (length declared %v): %d %s, want 200", limit, declared, code, resp)
		}
		b = body(over, limit+1)
		if code, resp := h.postBody("/hooks/stripe", b, stripeHeader(b, stripeSecret, t0), declared); code != http.StatusRequestEntityTooLarge ||
			!strings.Contains(resp, fmt.Sprintf("exceeds the %d byte limit", limit)) {
			t.Errorf("a body of %d bytes (length declared %v): %d %s, want 413 naming the limit", limit+1, declared, code, resp)
		}
		if evs := h.events("stripe", exact); len(evs) != 1 {
			t.Errorf("%s: %d events stored, want 1", exact, len(evs))
		}
		if evs := h.events("stripe", over); len(evs) != 0 {
			t.Errorf("%s, refused with 413, was stored", over)
		}
	}
}

// The publish API's limits are exact. A message whose payload (what the
// endpoints receive) is exactly publish.max_payload_bytes is published,
// one byte more is 413. The request body may be up to 1 KiB larger than
// that (the request's own JSON around data): a body of exactly that size
// is read, one byte more is 413 before it is parsed.
func TestPublishLimitsAreExact(t *testing.T) { stores(t, testPublishLimitsAreExact) }

func testPublishLimitsAreExact(t *testing.T, storeURL string) {
	const limit = 4096
	rcv := newReceiver(t)
	h := startWith(t, publishConfig(storeURL, rcv.srv.URL)+fastPoll+fmt.Sprintf("publish:\n  max_payload_bytes: %d\n", limit))
	// The payload is the envelope hookledger sends: type, the server's
	// time, data. The delivered body below checks this arithmetic.
	envelope := fmt.Sprintf(`{"type":"invoice.paid","timestamp":%q,"data":`, h.clk.Now().UTC().Format(time.RFC3339Nano))
	message := func(payloadBytes int) string {
		data := padded(t, `{"memo":"`, `"}`, payloadBytes-len(envelope)-len(`}`))
		return `{"type":"invoice.paid","data":` + string(data) + `}`
	}
	tooLarge := func(what string, code int, resp string) {
		t.Helper()
		var p api.Problem
		if err := json.Unmarshal([]byte(resp), &p); code != http.StatusRequestEntityTooLarge || err != nil || !strings.Contains(p.Detail, "max_payload_bytes") {
			t.Errorf("%s: %d %s, want 413 naming max_payload_bytes", what, code, resp)
		}
	}

	code, resp, _ := h.publish("payload-exact", message(limit))
	var exact api.MessageJSON
	if err := json.Unmarshal([]byte(resp), &exact); code != http.StatusAccepted || err != nil {
		t.Fatalf("a payload of exactly %d bytes: %d %s, want 202", limit, code, resp)
	}
	code, resp, _ = h.publish("payload-over", message(limit+1))
	tooLarge(fmt.Sprintf("a payload of %d bytes", limit+1), code, resp)

	// A small message padded with white space after its JSON (which the
	// payload does not keep) to the request body's limit, and one over.
	small := `{"type":"invoice.paid","data":{"id":"in_b"}}`
	bodyLimit := limit + 1024
	code, resp, _ = h.publish("body-exact", small+strings.Repeat(" ", bodyLimit-len(small)))
	var body api.MessageJSON
	if err := json.Unmarshal([]byte(resp), &body); code != http.StatusAccepted || err != nil {
		t.Fatalf("a request body of exactly %d bytes: %d %s, want 202", bodyLimit, code, resp)
	}
	code, resp, _ = h.publish("body-over", small+strings.Repeat(" ", bodyLimit+1-len(small)))
	tooLarge(fmt.Sprintf("a request body of %d bytes", bodyLimit+1), code, resp)

	if msgs := h.published(); len(msgs) != 2 {
		t.Fatalf("stored messages %+v, want the two accepted only", msgs)
	}
	waitFor(t, "both deliveries", func() bool { return len(rcv.deliveries()) == 2 })
	// PostgreSQL keeps the payload as jsonb, which sends it back with a
	// space after each colon and comma; compact, it is what was measured.
	for _, d := range rcv.deliveries() {
		var compact bytes.Buffer
		if err := json.Compact(&compact, d.body); err != nil {
			t.Fatal(err)
		}
		if id := d.header.Get("webhook-id"); id == exact.ID && compact.Len() != limit {
			t.Errorf("the message published at the limit arrived as %d bytes compact, want %d", compact.Len(), limit)
		}
	}
}
