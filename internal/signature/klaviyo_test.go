package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"testing"
	"time"
)

// klaviyoReference computes the construction documented in
// docs/signatures.md independently of the scheme: hex HMAC-SHA256 of the
// body followed by the Klaviyo-Timestamp value.
func klaviyoReference(secret, body, ts string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(body + ts))
	return hex.EncodeToString(m.Sum(nil))
}

const klaviyoBody = `{"data":[{"topic":"event:klaviyo.received_email","external_id":"5A2vDqkEKH","payload":{"data":{"type":"event","id":"5A2vDqkEKH","attributes":{"timestamp":1767225599,"datetime":"2025-12-31T23:59:59+00:00"},"relationships":{"profile":{"data":{"type":"profile","id":"01JG8ZP3QK"}}}}}}],"meta":{"klaviyo_webhook_id":"01KP4928STE8FKCWB6WDHZ4ZB7","klaviyo_account_id":"WBhXHN","timestamp":"2026-01-01T00:00:00+00:00","version":"2024-10-15"}}`

func TestKlaviyoConstruction(t *testing.T) {
	const secret = "klaviyo-webhook-secret-16"
	s := mustNew(t, Options{Kind: KindKlaviyo, Secrets: []string{secret}})
	// Each timestamp form reported for Klaviyo-Timestamp verifies; the
	// signature covers the header text verbatim.
	for _, ts := range []string{
		"Thu, 01 Jan 2026 00:00:00 GMT",
		"2026-01-01T00:00:00+00:00",
		"2026-01-01T00:00:00.123456Z",
		"1767225600",
		"1767225600000",
	} {
		req := &Request{Method: "POST", Header: http.Header{}, Body: []byte(klaviyoBody)}
		req.Header.Set(klaviyoTimestampHeader, ts)
		req.Header.Set(klaviyoSignatureHeader, klaviyoReference(secret, klaviyoBody, ts))
		if err := s.Verify(req, t0.Add(time.Minute)); err != nil {
			t.Errorf("timestamp %q: %v", ts, err)
		}
		// Timestamp first, or base64, or upper-case hex of the wrong
		// order: all refused.
		req.Header.Set(klaviyoSignatureHeader, klaviyoReference(secret, ts, klaviyoBody))
		wantReason(t, s.Verify(req, t0), reasonMismatch)
	}
	// Upper-case hex is the same signature.
	req := &Request{Method: "POST", Header: http.Header{}, Body: []byte(klaviyoBody)}
	req.Header.Set(klaviyoTimestampHeader, "1767225600")
	sig := klaviyoReference(secret, klaviyoBody, "1767225600")
	upper := []byte(sig)
	for i, c := range upper {
		if c >= 'a' && c <= 'f' {
			upper[i] = c - 'a' + 'A'
		}
	}
	req.Header.Set(klaviyoSignatureHeader, string(upper))
	if err := s.Verify(req, t0); err != nil {
		t.Fatalf("upper-case hex: %v", err)
	}
	req.Header.Set(klaviyoTimestampHeader, "next tuesday")
	req.Header.Set(klaviyoSignatureHeader, klaviyoReference(secret, klaviyoBody, "next tuesday"))
	wantReason(t, s.Verify(req, t0), reasonTimestamp)
	req.Header.Set(klaviyoSignatureHeader, "zz")
	wantReason(t, s.Verify(req, t0), reasonMalformed)

	// Sign writes an HTTP date and the reference construction.
	h, err := s.Sign(&Request{Body: []byte(klaviyoBody)}, t0, "")
	if err != nil {
		t.Fatal(err)
	}
	if h.Get(klaviyoTimestampHeader) != "Thu, 01 Jan 2026 00:00:00 GMT" {
		t.Fatalf("timestamp %q", h.Get(klaviyoTimestampHeader))
	}
	if h.Get(klaviyoSignatureHeader) != klaviyoReference(secret, klaviyoBody, "Thu, 01 Jan 2026 00:00:00 GMT") {
		t.Fatal("Sign does not follow the documented construction")
	}
}

func TestParseKlaviyoTimestamp(t *testing.T) {
	for in, want := range map[string]time.Time{
		"1767225600":                    t0,
		"1767225600000":                 t0,
		"Thu, 01 Jan 2026 00:00:00 GMT": t0,
		"2026-01-01T01:00:00+01:00":     t0,
	} {
		got, ok := parseKlaviyoTimestamp(in)
		if !ok || !got.Equal(want) {
			t.Errorf("ParseKlaviyoTimestamp(%q) = %v %v", in, got, ok)
		}
	}
	for _, in := range []string{"", "-1", "1e9", "99999999999999999999", "Jan 1"} {
		if _, ok := parseKlaviyoTimestamp(in); ok {
			t.Errorf("ParseKlaviyoTimestamp(%q) accepted", in)
		}
	}
}
