package signature

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// svixReq is swReq with the svix-* header names Svix-powered senders use.
func svixReq(id string, ts time.Time, sig string, body []byte) *Request {
	r := newReq()
	r.Body = body
	r.Header.Set(svixIDHeader, id)
	r.Header.Set(svixTimestampHeader, strconv.FormatInt(ts.Unix(), 10))
	r.Header.Set(svixSignatureHeader, sig)
	return r
}

// A signature made by the Standard Webhooks Go library, sent under the svix
// names, verifies; the same request tampered or late does not, and its
// failures name the svix headers the request used.
func TestStandardWebhooksSvixHeadersOracle(t *testing.T) {
	wh, err := standardwebhooks.NewWebhook(swSecret)
	if err != nil {
		t.Fatal(err)
	}
	s := mustNew(t, Options{Kind: KindStandardWebhooks, Secrets: []string{swSecret}})
	body := []byte(`{"type":"user.created","timestamp":"2026-01-01T00:00:00Z","data":{"id":"user_1"}}`)
	const id = "msg_2abcDEF345ghiJKL678mnoPQR"
	sig, err := wh.Sign(id, t0, body)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(svixReq(id, t0, sig, body), t0.Add(time.Minute)); err != nil {
		t.Fatalf("library signature under svix names refused: %v", err)
	}
	tampered := append([]byte(nil), body...)
	tampered[len(tampered)-3] = 'X'
	wantReason(t, s.Verify(svixReq(id, t0, sig, tampered), t0), reasonMismatch)
	wantReason(t, s.Verify(svixReq("msg_other", t0, sig, body), t0), reasonMismatch)
	wantReason(t, s.Verify(svixReq(id, t0, sig, body), t0.Add(6*time.Minute)), reasonTimestamp)

	missing := svixReq(id, t0, sig, body)
	missing.Header.Del(svixSignatureHeader)
	err = s.Verify(missing, t0)
	wantReason(t, err, ReasonMissing)
	if !strings.Contains(err.Error(), "svix-signature header is missing") {
		t.Errorf("missing svix-signature: %v, want the svix name", err)
	}
	bad := svixReq(id, t0, "v1,not*base64", body)
	if err := s.Verify(bad, t0); err == nil || !strings.Contains(err.Error(), "svix-signature has a v1 entry") {
		t.Errorf("bad svix-signature: %v, want the svix name", err)
	}
}

// A request that mixes the two header sets is refused whichever headers
// are mixed, even when every value would verify: which id belongs with
// which signature is then a guess.
func TestStandardWebhooksMixedHeaderSetsRefused(t *testing.T) {
	s := mustNew(t, Options{Kind: KindStandardWebhooks, Secrets: []string{swSecret}})
	body := []byte(`{"type":"user.created"}`)
	h, err := s.Sign(&Request{Body: body}, t0, "msg_1")
	if err != nil {
		t.Fatal(err)
	}
	webhook := map[string]string{}
	for _, n := range []string{WebhookIDHeader, WebhookTimestampHeader, WebhookSignatureHeader} {
		webhook[n] = h.Get(n)
	}
	svixName := map[string]string{WebhookIDHeader: svixIDHeader, WebhookTimestampHeader: svixTimestampHeader, WebhookSignatureHeader: svixSignatureHeader}
	for _, swapped := range []string{WebhookIDHeader, WebhookTimestampHeader, WebhookSignatureHeader} {
		t.Run(swapped, func(t *testing.T) {
			r := &Request{Header: http.Header{}, Body: body}
			for n, v := range webhook {
				if n == swapped {
					r.Header.Set(svixName[n], v)
				} else {
					r.Header.Set(n, v)
				}
			}
			err := s.Verify(r, t0)
			wantReason(t, err, reasonMalformed)
			if !strings.Contains(err.Error(), "mixes two header sets") || !strings.Contains(err.Error(), svixName[swapped]) {
				t.Errorf("mixed sets: %v, want a message naming the svix header %s", err, svixName[swapped])
			}
		})
	}
	// Both complete sets, with the same values, are still a mix.
	both := &Request{Header: http.Header{}, Body: body}
	for n, v := range webhook {
		both.Header.Set(n, v)
		both.Header.Set(svixName[n], v)
	}
	wantReason(t, s.Verify(both, t0), reasonMalformed)
}

// Sign's headers renamed to the svix set verify, and the rename touches
// only the three Standard Webhooks headers.
func TestHeaderSetRename(t *testing.T) {
	s := mustNew(t, Options{Kind: KindStandardWebhooks, Secrets: []string{swSecret}})
	body := []byte(`{"type":"user.created"}`)
	h, err := s.Sign(&Request{Body: body}, t0, "msg_9")
	if err != nil {
		t.Fatal(err)
	}
	h.Set("X-Other", "kept")
	var svix HeaderSet
	for _, hs := range HeaderSets() {
		if hs.Name == "svix" {
			svix = hs
		}
	}
	renamed := svix.Rename(h)
	if renamed.Get(WebhookIDHeader) != "" || renamed.Get(svixIDHeader) != "msg_9" || renamed.Get("X-Other") != "kept" {
		t.Fatalf("renamed = %v", renamed)
	}
	if err := s.Verify(&Request{Header: renamed, Body: body}, t0); err != nil {
		t.Fatalf("renamed headers refused: %v", err)
	}
	hs, err := requestHeaderSet(renamed)
	if err != nil || hs.Name != "svix" {
		t.Fatalf("RequestHeaderSet = %v, %v; want svix", hs, err)
	}
	var ve *Error
	if _, err := requestHeaderSet(http.Header{"Webhook-Id": {"a"}, "Svix-Signature": {"b"}}); !errors.As(err, &ve) {
		t.Fatalf("mixed: %v, want *Error", err)
	}
}

// FuzzRequestHeaderSet: whatever headers of the two sets a request carries,
// and whatever their values, the choice is the svix set exactly when only
// svix- headers are present, a refusal exactly when both sets are, and the
// webhook set otherwise; a standard-webhooks scheme never accepts a mixed
// request.
func FuzzRequestHeaderSet(f *testing.F) {
	for _, mask := range []uint8{0, 0b000111, 0b111000, 0b001001, 0b100100, 0b111111, 0b010000} {
		f.Add(mask, "msg_1", "1767225600", "v1,AAAA")
	}
	s, err := New(Options{Kind: KindStandardWebhooks, Secrets: []string{swSecret}})
	if err != nil {
		f.Fatal(err)
	}
	names := []string{WebhookIDHeader, WebhookTimestampHeader, WebhookSignatureHeader, svixIDHeader, svixTimestampHeader, svixSignatureHeader}
	f.Fuzz(func(t *testing.T, mask uint8, id, ts, sig string) {
		h := http.Header{}
		values := []string{id, ts, sig, id, ts, sig}
		for i, n := range names {
			if mask&(1<<i) != 0 {
				h.Set(n, values[i])
			}
		}
		hasWebhook, hasSvix := mask&0b000111 != 0, mask&0b111000 != 0
		hs, err := requestHeaderSet(h)
		switch {
		case hasWebhook && hasSvix:
			if err == nil {
				t.Fatalf("mask %06b: mixed sets accepted as %s", mask, hs.Name)
			}
			if s.Verify(&Request{Header: h, Body: []byte(`{}`)}, t0) == nil {
				t.Fatalf("mask %06b: a mixed request verified", mask)
			}
		case hasSvix:
			if err != nil || hs.Name != "svix" {
				t.Fatalf("mask %06b: %v %v, want svix", mask, hs, err)
			}
		default:
			if err != nil || hs.Name != "webhook" {
				t.Fatalf("mask %06b: %v %v, want webhook", mask, hs, err)
			}
		}
	})
}
