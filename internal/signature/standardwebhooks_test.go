package signature

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// swSecret is the secret used in the Standard Webhooks reference tests.
const swSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// testWhsk returns a deterministic whsk_ seed key for tests.
func testWhsk(n byte) string {
	return "whsk_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{n}, ed25519.SeedSize))
}

func testWhpk(n byte) string {
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{n}, ed25519.SeedSize))
	return "whpk_" + base64.StdEncoding.EncodeToString(priv.Public().(ed25519.PublicKey))
}

func swReq(id string, ts time.Time, sig string, body []byte) *Request {
	r := newReq()
	r.Body = body
	r.Header.Set(WebhookIDHeader, id)
	r.Header.Set(WebhookTimestampHeader, strconv.FormatInt(ts.Unix(), 10))
	r.Header.Set(WebhookSignatureHeader, sig)
	return r
}

// Signatures made by the Standard Webhooks Go library verify with ours.
func TestStandardWebhooksOracleTheirsVerifiesWithOurs(t *testing.T) {
	wh, err := standardwebhooks.NewWebhook(swSecret)
	if err != nil {
		t.Fatal(err)
	}
	s := mustNew(t, Options{Kind: KindStandardWebhooks, Secrets: []string{swSecret}})
	body := []byte(`{"type":"contact.created","timestamp":"2026-01-01T00:00:00Z","data":{"id":"c_1"}}`)
	sig, err := wh.Sign("msg_p5jXN8AQM9LWM0D4loKWxJek", t0, body)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(swReq("msg_p5jXN8AQM9LWM0D4loKWxJek", t0, sig, body), t0.Add(time.Minute)); err != nil {
		t.Fatalf("library signature refused: %v", err)
	}
	// A list carrying an unknown version and a stale key still verifies.
	other, _ := standardwebhooks.NewWebhook("whsec_dGhpcyBpcyBhIHNlY29uZCB0ZXN0IGtleSEh")
	stale, _ := other.Sign("msg_p5jXN8AQM9LWM0D4loKWxJek", t0, body)
	list := "v2,AAAA " + stale + " " + sig
	if err := s.Verify(swReq("msg_p5jXN8AQM9LWM0D4loKWxJek", t0, list, body), t0); err != nil {
		t.Fatalf("signature list refused: %v", err)
	}
	wantReason(t, s.Verify(swReq("msg_other", t0, sig, body), t0), reasonMismatch)
	wantReason(t, s.Verify(swReq("msg_p5jXN8AQM9LWM0D4loKWxJek", t0.Add(time.Second), sig, body), t0), reasonMismatch)
}

// Our v1 signatures verify with the library (its timestamp check reads the
// wall clock, so the ignoring-timestamp variant is used).
func TestStandardWebhooksOracleOursVerifiesWithTheirs(t *testing.T) {
	wh, err := standardwebhooks.NewWebhook(swSecret)
	if err != nil {
		t.Fatal(err)
	}
	s := mustNew(t, Options{Kind: KindStandardWebhooks, Secrets: []string{swSecret}})
	req := newReq()
	h, err := s.Sign(req, t0, "msg_2Lq3bX")
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.VerifyIgnoringTimestamp(req.Body, h); err != nil {
		t.Fatalf("library refused our signature: %v", err)
	}
	req.Body = append(req.Body, ' ')
	if err := wh.VerifyIgnoringTimestamp(req.Body, h); err == nil {
		t.Fatal("library accepted a tampered body")
	}
}

func TestStandardWebhooksV1a(t *testing.T) {
	signer := mustNew(t, Options{Kind: KindStandardWebhooks, Secrets: []string{testWhsk(7)}})
	verifier := mustNew(t, Options{Kind: KindStandardWebhooks, Secrets: []string{testWhpk(7)}})
	req := newReq()
	h, err := signer.Sign(req, t0, "msg_a")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h.Get(WebhookSignatureHeader), "v1a,") {
		t.Fatalf("whsk_ should sign v1a, got %q", h.Get(WebhookSignatureHeader))
	}
	req.Header = h
	if err := verifier.Verify(req, t0); err != nil {
		t.Fatalf("v1a refused: %v", err)
	}
	// A public-key-only source refuses a v1 (HMAC) signature: it has no
	// symmetric key, so v1 is not a scheme it verifies.
	v1 := signed(t, Options{Kind: KindStandardWebhooks, Secrets: []string{swSecret}}, t0)
	wantReason(t, verifier.Verify(v1, t0), ReasonMissing)
	// And an HMAC-only source ignores v1a entries.
	hmacOnly := mustNew(t, Options{Kind: KindStandardWebhooks, Secrets: []string{swSecret}})
	wantReason(t, hmacOnly.Verify(req, t0), ReasonMissing)
	// A whpk_ key cannot sign.
	if _, err := verifier.Sign(newReq(), t0, "msg_a"); err == nil {
		t.Fatal("whpk_ signed")
	}
	// A 64-byte whsk_ key works as well as a seed.
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	long := mustNew(t, Options{Kind: KindStandardWebhooks, Secrets: []string{"whsk_" + base64.StdEncoding.EncodeToString(priv)}})
	h2, _ := long.Sign(newReq(), t0, "msg_a")
	if h2.Get(WebhookSignatureHeader) != h.Get(WebhookSignatureHeader) {
		t.Fatal("seed and expanded whsk_ keys sign differently")
	}
}

func TestStandardWebhooksSignNeedsEventID(t *testing.T) {
	s := mustNew(t, Options{Kind: KindStandardWebhooks, Secrets: []string{swSecret}})
	if _, err := s.Sign(newReq(), t0, ""); err == nil {
		t.Fatal("signed without an event id")
	}
}

func TestStandardWebhooksHeaderShapes(t *testing.T) {
	s := mustNew(t, Options{Kind: KindStandardWebhooks, Secrets: []string{swSecret}})
	good := signed(t, Options{Kind: KindStandardWebhooks, Secrets: []string{swSecret}}, t0)
	cases := []struct {
		name   string
		mutate func(h http.Header)
		reason Reason
	}{
		{"non-numeric timestamp", func(h http.Header) { h.Set(WebhookTimestampHeader, "2026-01-01T00:00:00Z") }, reasonTimestamp},
		{"bad base64", func(h http.Header) { h.Set(WebhookSignatureHeader, "v1,***") }, reasonMalformed},
		{"no comma entries", func(h http.Header) { h.Set(WebhookSignatureHeader, "v1") }, ReasonMissing},
		{"unknown version only", func(h http.Header) {
			h.Set(WebhookSignatureHeader, "v2,"+base64.StdEncoding.EncodeToString([]byte("x")))
		}, ReasonMissing},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := signed(t, Options{Kind: KindStandardWebhooks, Secrets: []string{swSecret}}, t0)
			c.mutate(req.Header)
			wantReason(t, s.Verify(req, t0), c.reason)
		})
	}
	if err := s.Verify(good, t0); err != nil {
		t.Fatal(err)
	}
}
