package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// GitHub's documented example: secret "It's a Secret to Everybody", body
// "Hello, World!" (docs.github.com, "Validating webhook deliveries").
func TestHMACGitHubDocumentedExample(t *testing.T) {
	s := mustNew(t, Options{Kind: KindHMAC, Secrets: []string{"It's a Secret to Everybody"}, HMAC: &HMACOptions{Header: "X-Hub-Signature-256", Prefix: "sha256="}})
	req := &Request{Method: "POST", Header: http.Header{}, Body: []byte("Hello, World!")}
	req.Header.Set("X-Hub-Signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
	if err := s.Verify(req, t0); err != nil {
		t.Fatalf("documented GitHub example refused: %v", err)
	}
	// Without the prefix, or the sha1 header only: refused.
	req.Header.Set("X-Hub-Signature-256", "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
	wantReason(t, s.Verify(req, t0), reasonMalformed)
	req.Header.Del("X-Hub-Signature-256")
	req.Header.Set("X-Hub-Signature", "sha1=01dc10d0c83e72ed246219cdd91669667fe2ca59")
	wantReason(t, s.Verify(req, t0), ReasonMissing)
}

func TestHMACShopifyBase64(t *testing.T) {
	const secret = "shpss_app_secret"
	s := mustNew(t, Options{Kind: KindHMAC, Secrets: []string{secret}, HMAC: &HMACOptions{Header: "X-Shopify-Hmac-Sha256", Encoding: "base64"}})
	body := []byte(`{"id":820982911946154508,"email":"jon@example.com"}`)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	req := &Request{Method: "POST", Header: http.Header{}, Body: body}
	req.Header.Set("X-Shopify-Hmac-Sha256", base64.StdEncoding.EncodeToString(m.Sum(nil)))
	if err := s.Verify(req, t0); err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Shopify-Hmac-Sha256", "not base64!")
	wantReason(t, s.Verify(req, t0), reasonMalformed)
}

// A sender that signs "{timestamp}.{body}" with a seconds timestamp header.
func TestHMACTimestampedSender(t *testing.T) {
	const secret = "in-house-secret"
	o := Options{Kind: KindHMAC, Secrets: []string{secret}, HMAC: &HMACOptions{Header: "X-Webhook-Signature", Prefix: "v1=", TimestampHeader: "X-Webhook-Timestamp", Template: "{timestamp}.{body}"}}
	s := mustNew(t, o)
	body := []byte(`{"eventId":"ev_01HZ","type":"subscription.created","occurredAt":"2026-01-01T00:00:00Z"}`)
	ts := strconv.FormatInt(t0.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "." + string(body)))
	req := &Request{Method: "POST", Header: http.Header{}, Body: body}
	req.Header.Set("X-Webhook-Timestamp", ts)
	req.Header.Set("X-Webhook-Signature", "v1="+hexString(m.Sum(nil)))
	if err := s.Verify(req, t0.Add(4*time.Minute)); err != nil {
		t.Fatal(err)
	}
	wantReason(t, s.Verify(req, t0.Add(6*time.Minute)), reasonTimestamp)
	req.Header.Set("X-Webhook-Timestamp", strconv.FormatInt(t0.Unix()+1, 10))
	wantReason(t, s.Verify(req, t0), reasonMismatch)
	req.Header.Set("X-Webhook-Timestamp", "soon")
	wantReason(t, s.Verify(req, t0), reasonTimestamp)
}

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}
