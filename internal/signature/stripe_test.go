package signature

import (
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"
)

const stripeSecret = "whsec_test_3f9a0c7b2e5d4a1f"

func stripeReq(header string, body []byte) *Request {
	r := newReq()
	r.Body = body
	r.Header.Set(stripeSignatureHeader, header)
	return r
}

// Payloads signed by stripe-go's own test signer must verify with ours.
func TestStripeOracleTheirsVerifiesWithOurs(t *testing.T) {
	s := mustNew(t, Options{Kind: KindStripe, Secrets: []string{stripeSecret}})
	for _, body := range [][]byte{[]byte(testBody), []byte(`{}`), []byte("{\n  \"id\": \"evt_9\",\n  \"object\": \"event\"\n}\n")} {
		p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: stripeSecret, Timestamp: t0})
		if err := s.Verify(stripeReq(p.Header, body), t0.Add(time.Minute)); err != nil {
			t.Fatalf("stripe-go signature refused: %v (header %s)", err, p.Header)
		}
		tampered := append([]byte{}, body...)
		tampered[0] = ' '
		wantReason(t, s.Verify(stripeReq(p.Header, tampered), t0), reasonMismatch)
	}
}

// Headers produced by our Sign must pass stripe-go's validator. Its
// tolerance check reads the wall clock, so the ignoring-tolerance variant is
// used and our own fixed-clock tests cover the window.
func TestStripeOracleOursVerifiesWithTheirs(t *testing.T) {
	s := mustNew(t, Options{Kind: KindStripe, Secrets: []string{stripeSecret}})
	req := newReq()
	h, err := s.Sign(req, t0, "")
	if err != nil {
		t.Fatal(err)
	}
	hdr := h.Get(stripeSignatureHeader)
	if err := webhook.ValidatePayloadIgnoringTolerance(req.Body, hdr, stripeSecret); err != nil {
		t.Fatalf("stripe-go refused our signature: %v", err)
	}
	if err := webhook.ValidatePayloadIgnoringTolerance(req.Body, hdr, "whsec_other"); err == nil {
		t.Fatal("stripe-go accepted our signature with the wrong secret")
	}
}

// Stripe sends one v1 per active secret while a secret is rolled, and may
// add other schemes; only v1 counts.
func TestStripeHeaderShapes(t *testing.T) {
	s := mustNew(t, Options{Kind: KindStripe, Secrets: []string{stripeSecret}})
	body := []byte(testBody)
	good := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: stripeSecret, Timestamp: t0})
	other := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: "whsec_old", Timestamp: t0})
	v1 := func(p *webhook.SignedPayload) string { return p.Header[strings.Index(p.Header, "v1="):] }
	ts := good.Header[:strings.Index(good.Header, ",")]

	ok := []string{
		ts + "," + v1(other) + "," + v1(good),
		ts + ",v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39," + v1(good),
		v1(good) + "," + ts,
		ts + ", " + v1(good),
		ts + ",v1a=zzz," + v1(good),
	}
	for _, h := range ok {
		if err := s.Verify(stripeReq(h, body), t0); err != nil {
			t.Errorf("%q refused: %v", h, err)
		}
	}
	refused := []struct {
		header string
		reason Reason
	}{
		{ts + "," + v1(other), reasonMismatch},
		{ts + ",v0=" + strings.TrimPrefix(v1(good), "v1="), ReasonMissing}, // a weaker scheme is never used
		{ts, ReasonMissing},
		{v1(good), reasonMalformed},
		{ts + "," + ts + "," + v1(good), reasonMalformed},
		{ts + ",v1=not-hex", reasonMalformed},
		{"t=abc," + v1(good), reasonTimestamp},
		{"t=-5," + v1(good), reasonTimestamp},
		{"garbage", reasonMalformed},
	}
	for _, c := range refused {
		err := s.Verify(stripeReq(c.header, body), t0)
		wantReason(t, err, c.reason)
		noLeak(t, err, []string{stripeSecret}, stripeReq(c.header, body))
	}
}
