package deliver

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hookledger/hookledger/internal/config"
)

const (
	signKeyOld = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwMfKQ9r8GKYo="
	signKeyNew = "whsec_ZGVtby1zdGFuZGFyZC13ZWJob29rcy1zZWNyZXQtY2hhbmdlLW1l"
)

// A stored body_base64 is sent byte for byte with its stored Content-Type,
// and a destination with signing secrets signs exactly those bytes with
// every key: the Standard Webhooks library verifies each, the id is the
// same on every attempt and the timestamp is the attempt's.
func TestSignedCallOfARawBody(t *testing.T) {
	body := []byte("{\"b\": 1,\n \"a\":\"caf\\u00e9\"}")
	raw, err := json.Marshal(map[string]any{"method": "POST", "path": "", "headers": map[string]string{"Content-Type": "application/json; charset=utf-8"}, "body_base64": body})
	if err != nil {
		t.Fatal(err)
	}
	d := &config.Destination{Name: "app", Kind: "http", Signing: &config.Signing{Secrets: []string{signKeyOld, signKeyNew}}}
	const key = "to_app:evt_1:r0:forward"
	sign := func(at time.Time) *Call {
		t.Helper()
		call, err := storedCall(d, key, raw)
		if err != nil {
			t.Fatal(err)
		}
		if err := signCall(call, at); err != nil {
			t.Fatal(err)
		}
		return call
	}
	now := time.Now()
	first, retry := sign(now), sign(now.Add(2*time.Hour))
	if string(first.Body) != string(body) || first.Header.Get("Content-Type") != "application/json; charset=utf-8" {
		t.Fatalf("call body %q with Content-Type %q, want the stored bytes and type", first.Body, first.Header.Get("Content-Type"))
	}
	if first.Header.Get("webhook-id") != MessageID(key) || retry.Header.Get("webhook-id") != MessageID(key) ||
		!strings.HasPrefix(MessageID(key), "msg_") || strings.Contains(MessageID(key), "evt_1") {
		t.Fatalf("webhook-id %q then %q, want %q on every attempt, without the event id", first.Header.Get("webhook-id"), retry.Header.Get("webhook-id"), MessageID(key))
	}
	if first.Header.Get("webhook-timestamp") == retry.Header.Get("webhook-timestamp") {
		t.Fatalf("a retry two hours later kept the timestamp %s", first.Header.Get("webhook-timestamp"))
	}
	if entries := strings.Fields(first.Header.Get("webhook-signature")); len(entries) != 2 {
		t.Fatalf("webhook-signature %q, want one entry per key", first.Header.Get("webhook-signature"))
	}
	for _, k := range []string{signKeyOld, signKeyNew} {
		wh, err := standardwebhooks.NewWebhook(k)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(first.Body, first.Header); err != nil {
			t.Errorf("a receiver knowing one key does not verify: %v", err)
		}
		tampered := http.Header(first.Header.Clone())
		if err := wh.Verify([]byte(strings.Replace(string(body), "1", "2", 1)), tampered); err == nil {
			t.Errorf("an altered body verifies")
		}
	}
	unsigned, err := storedCall(&config.Destination{Name: "plain", Kind: "http"}, key, raw)
	if err != nil || signCall(unsigned, now) != nil || unsigned.Header.Get("webhook-signature") != "" {
		t.Fatalf("a destination without signing sent %v (%v)", unsigned.Header, err)
	}
}
