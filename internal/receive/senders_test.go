package receive_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/signature"
)

// The sender kinds through the real receiver and a real SQLite file, with
// requests made by each sender's own npm library (internal/signature/testdata,
// see scripts/sender-vectors), at the time the vectors were signed.

type senderVector struct {
	Name    string            `json:"name"`
	URL     string            `json:"url"`
	Body    string            `json:"body"`
	Headers map[string]string `json:"headers"`
	Secret  string            `json:"secret"`
	Now     int64             `json:"now"`
	Valid   bool              `json:"valid"`
	Tamper  string            `json:"tamper"`
	// Malleated names the genuine Twilio vector this one was made from by
	// moving a boundary between a parameter name and a value; Twilio's
	// library accepts it with the genuine signature.
	Malleated string `json:"malleated"`
	// Refused says why the scheme refuses a request the library accepts.
	Refused string `json:"refused"`
}

func loadVectors(t *testing.T, kind string) []senderVector {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "signature", "testdata", kind, "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Vectors []senderVector `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Vectors) == 0 {
		t.Fatalf("%s: no vectors", kind)
	}
	return f.Vectors
}

// baseURL is u without its query: what a source's public_url holds.
func baseURL(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p.RawQuery = ""
	return p.String()
}

// senderRig starts a receiver at the vectors' time with one source per
// signed URL the vectors use (one source for the kinds that sign none),
// named kind, kind-1 ..., each with kind, secrets and, where the sender
// signs the URL, public_url; extra is appended to every source.
type senderRig struct {
	*rig
	kind    string
	sources map[string]string // public_url -> source name
}

func newSenderRig(t *testing.T, kind, secret, extra string, vs []senderVector) *senderRig {
	t.Helper()
	sr := &senderRig{kind: kind, sources: map[string]string{}}
	var b strings.Builder
	b.WriteString("listen: 127.0.0.1:0\nstore: sqlite:unused\nsources:\n")
	add := func(pub string) {
		name := kind
		if n := len(sr.sources); n > 0 {
			name = fmt.Sprintf("%s-%d", kind, n)
		}
		sr.sources[pub] = name
		fmt.Fprintf(&b, "  - name: %s\n    kind: %s\n    secrets: [%q]\n", name, kind, secret)
		if pub != "" {
			fmt.Fprintf(&b, "    public_url: %s\n", pub)
		}
		b.WriteString(extra)
	}
	for _, v := range vs {
		pub := ""
		if v.URL != "" {
			pub = baseURL(t, v.URL)
		}
		if _, ok := sr.sources[pub]; !ok {
			add(pub)
		}
	}
	sr.rig = newRigAt(t, b.String(), nil, time.Unix(vs[0].Now, 0).UTC())
	return sr
}

// request posts v the way its sender did: to the source for its signed
// URL, with that URL's query, its headers and its body.
func (sr *senderRig) request(v senderVector) *http.Request {
	t := sr.t
	t.Helper()
	pub, query := "", ""
	if v.URL != "" {
		pub = baseURL(t, v.URL)
		u, _ := url.Parse(v.URL)
		if u.RawQuery != "" {
			query = "?" + u.RawQuery
		}
	}
	req, err := http.NewRequest("POST", sr.srv.URL+"/hooks/"+sr.sources[pub]+query, bytes.NewReader([]byte(v.Body)))
	if err != nil {
		t.Fatal(err)
	}
	for k, val := range v.Headers {
		req.Header.Set(k, val)
	}
	return req
}

func vectorNamed(t *testing.T, vs []senderVector, name string) senderVector {
	t.Helper()
	for _, v := range vs {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no vector %q", name)
	return senderVector{}
}

// The mailgun vectors' account and message.
const (
	mailgunAccount = "1234567890303a4bd1f33898"
	mailgunMessage = "20260101000000.000be97f99f8cea1@sample.mailgun.com"
)

// stored is one stored event's identity.
type stored struct{ id, typ, account, entity string }

func (sr *senderRig) stored() map[string]stored {
	out := map[string]stored{}
	for _, e := range sr.events() {
		s := stored{e.EventID, e.Type, "", e.Entity}
		// The first delivery's account: a later duplicate may be another
		// body under the same id (the github vectors reuse one GUID).
		if ds := sr.deliveries(e.Source, e.EventID); len(ds) > 0 {
			s.account = ds[0].Account
		}
		out[e.EventID] = s
	}
	return out
}

// Every library vector gets the answer its verdict calls for: a signed
// request is stored (200), a tampered one is refused (401) and stores
// nothing; and the stored identities are exactly the sender's stable
// event ids, so the vectors that are retries of one event (a new
// X-Shopify-Webhook-Id, X-Slack-Retry-Num: 1, a second h1 in a rotation,
// the same form posted to the URL with its port) are duplicates.
func TestSenderKindsLibraryVectorsThroughTheReceiver(t *testing.T) {
	for _, c := range []struct {
		kind string
		// special answers by vector name: a status code, 0 for 200.
		special map[string]int
		want    map[string]stored
	}{
		{kind: "github", want: map[string]stored{
			"72d3162e-cc78-11e3-81ab-4c9367dc0958": {typ: "pull_request", account: "9876"},
		}},
		{kind: "shopify", want: map[string]stored{
			"98880550-7158-44d4-b7cd-2c97c8a091b5": {typ: "orders/create", account: "example.myshopify.com", entity: "gid://shopify/Order/820982911946154508"},
		}},
		{kind: "slack", special: map[string]int{
			// A slash command is a form without event_id: no Events API
			// event (see docs/signatures.md).
			"slash command (form body)": http.StatusBadRequest,
		}, want: map[string]stored{
			"Ev0PV52K21": {typ: "message", account: "T061EG9R6"},
		}},
		{kind: "twilio", special: map[string]int{
			// twilio's own example of repeated names is no request
			// Twilio sends: no AccountSid, a CallSid of 17 characters.
			"repeated parameter names": http.StatusBadRequest,
		}, want: map[string]stored{
			"SM1234567890abcdef1234567890abcdef:received":    {typ: "message.received", account: twilioAccount, entity: "SM1234567890abcdef1234567890abcdef"},
			"SM1234567890abcdef1234567890abcdef:delivered":   {typ: "message.delivered", account: twilioAccount, entity: "SM1234567890abcdef1234567890abcdef"},
			"CA5d2e8f1a4b7c0d3e6f9a2b5c8d1e4f7a:completed:3": {typ: "call.completed", account: twilioAccount, entity: "CA5d2e8f1a4b7c0d3e6f9a2b5c8d1e4f7a"},
			"SM4321567890abcdef1234567890abcdef:received":    {typ: "message.received", account: twilioAccount, entity: "SM4321567890abcdef1234567890abcdef"},
			"EZ00000000000000000000000000000000":             {typ: "com.twilio.messaging.message.delivered", entity: "SM1234"},
		}},
		{kind: "paddle", special: map[string]int{
			// Signed 10 s before the clock: Paddle's SDK refuses it, the
			// kind's 5-minute default accepts it (see the next test).
			"timestamp 10 seconds old (SDK tolerance 5 s)": http.StatusOK,
		}, want: map[string]stored{
			"evt_01hv8x2acma2gz3he4mz9qh8q4": {typ: "subscription.updated", entity: "sub_01hv8x29kz0t586xy6zn1a62ny"},
		}},
		{kind: "square", want: map[string]stored{
			"13b867cf-db3d-4b1c-90b6-2f32a9d78124": {typ: "payment.updated", account: "6SSW7HV8K2ST5", entity: "hYy9pRFVxpDsO1FB05SunFWUe9JZY"},
		}},
		{kind: "mailgun", special: map[string]int{
			// Signed 20 minutes before the clock: mailgun-js's 15-minute
			// window refuses it, the kind's default, which covers
			// Mailgun's 8-hour retry schedule, accepts it (a duplicate of
			// the delivered event).
			"timestamp 20 minutes old (library window 15 minutes)": http.StatusOK,
		}, want: map[string]stored{
			"MXcc2gEpS-eN8HfkOnmK2w:1767225595.658528": {typ: "delivered", account: mailgunAccount, entity: mailgunMessage},
			"CCXMjJ7nQi2N3BPigGOdgQ:1767225590.372891": {typ: "failed", account: mailgunAccount, entity: mailgunMessage},
			// The delivered event's signature object moved onto other
			// event-data: Mailgun signs none of the event, so it is
			// stored as an event of its own (docs/signatures.md).
			"forged-event-id:1767225590.372891": {typ: "failed", account: mailgunAccount, entity: mailgunMessage},
		}},
	} {
		t.Run(c.kind, func(t *testing.T) {
			vs := loadVectors(t, c.kind)
			// Every vector of a kind holds the same secret except the
			// wrong-secret ones.
			secret := vs[0].Secret
			sr := newSenderRig(t, c.kind, secret, "", vs)
			for _, v := range vs {
				want := http.StatusUnauthorized
				if v.Valid {
					want = http.StatusOK
				}
				switch {
				case v.Malleated != "":
					// Twilio's signature cannot tell it from the genuine
					// request; the parameter check refuses it.
					want = http.StatusBadRequest
				case v.Refused != "":
					want = http.StatusUnauthorized
				}
				if s, ok := c.special[v.Name]; ok {
					want = s
				}
				target := sr
				if v.Tamper == "secret" {
					// The vector's secret is the one the receiver holds,
					// and the sender signed with another.
					target = newSenderRig(t, c.kind, v.Secret, "", []senderVector{v})
				}
				code, resp, hdr := do(t, target.request(v))
				if code != want {
					t.Errorf("%s: got %d %s, want %d", v.Name, code, resp, want)
				}
				if c.kind == "slack" && v.Name == "url_verification challenge" {
					if resp != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
						t.Errorf("url_verification: answered %q (%s), want the challenge as text", resp, hdr.Get("Content-Type"))
					}
				}
			}
			got := sr.stored()
			if len(got) != len(c.want) {
				t.Errorf("stored %d events %v, want %d", len(got), got, len(c.want))
			}
			for id, w := range c.want {
				g, ok := got[id]
				if !ok {
					t.Errorf("no event %q stored (stored %v)", id, got)
					continue
				}
				if g.typ != w.typ || g.account != w.account || (w.entity != "" && g.entity != w.entity) {
					t.Errorf("event %s: type %q account %q entity %q, want %q %q %q", id, g.typ, g.account, g.entity, w.typ, w.account, w.entity)
				}
			}
		})
	}
}

// Paddle's tolerance is configurable: at Paddle's SDK window of 5 s the
// request signed 10 s before the clock is refused as stale.
func TestPaddleToleranceConfigured(t *testing.T) {
	vs := loadVectors(t, "paddle")
	v := vectorNamed(t, vs, "timestamp 10 seconds old (SDK tolerance 5 s)")
	sr := newSenderRig(t, "paddle", v.Secret, "    tolerance: 5s\n", []senderVector{v})
	if code, resp, _ := do(t, sr.request(v)); code != http.StatusUnauthorized || !strings.Contains(resp, "tolerance") {
		t.Fatalf("got %d %s, want 401 naming the tolerance", code, resp)
	}
	if n := len(sr.events()); n != 0 {
		t.Fatalf("stored %d events", n)
	}
}

// A Slack retry (X-Slack-Retry-Num: 1, new timestamp and signature) is a
// duplicate of the first attempt, and the retry headers are kept as
// evidence on its delivery; a url_verification is answered but stores no
// event, and one whose signature fails is refused like any request.
func TestSlackRetryAndURLVerification(t *testing.T) {
	vs := loadVectors(t, "slack")
	first := vectorNamed(t, vs, "event_callback")
	retry := vectorNamed(t, vs, "event_callback retry 1 (same event_id, new timestamp)")
	challenge := vectorNamed(t, vs, "url_verification challenge")
	sr := newSenderRig(t, "slack", first.Secret, "", vs)

	if code, resp, _ := do(t, sr.request(challenge)); code != 200 {
		t.Fatalf("url_verification: %d %s", code, resp)
	}
	forged := sr.request(challenge)
	forged.Header.Set("X-Slack-Signature", "v0="+strings.Repeat("0", 64))
	if code, resp, _ := do(t, forged); code != 401 || strings.Contains(resp, "3eZbrw1a") {
		t.Fatalf("unsigned url_verification: %d %s, want 401 without the challenge", code, resp)
	}
	if n := len(sr.events()); n != 0 {
		t.Fatalf("url_verification stored %d events", n)
	}

	if code, resp, _ := do(t, sr.request(first)); code != 200 || strings.Contains(resp, "duplicates") {
		t.Fatalf("first attempt: %d %s", code, resp)
	}
	if code, resp, _ := do(t, sr.request(retry)); code != 200 || !strings.Contains(resp, `"duplicates":1`) {
		t.Fatalf("retry: %d %s, want a duplicate", code, resp)
	}
	ds := sr.deliveries("slack", "Ev0PV52K21")
	if len(ds) != 2 {
		t.Fatalf("%d deliveries, want both attempts", len(ds))
	}
	var retryNums []string
	for _, d := range ds {
		retryNums = append(retryNums, d.Headers["X-Slack-Retry-Num"])
		if _, ok := d.Headers["X-Slack-Signature"]; ok {
			t.Error("the signature was kept")
		}
	}
	if !strings.Contains(strings.Join(retryNums, ","), "1") {
		t.Errorf("X-Slack-Retry-Num not kept: %v", retryNums)
	}
}

// Shopify: a retry carries a new X-Shopify-Webhook-Id and the same
// X-Shopify-Event-Id and is a duplicate; both webhook ids are kept as
// evidence. A configured account is compared with X-Shopify-Shop-Domain.
func TestShopifyRetryAndTenant(t *testing.T) {
	vs := loadVectors(t, "shopify")
	first := vectorNamed(t, vs, "orders/create")
	retry := vectorNamed(t, vs, "orders/create retry (new webhook id, same event id)")
	if first.Headers["X-Shopify-Webhook-Id"] == retry.Headers["X-Shopify-Webhook-Id"] {
		t.Fatal("the retry vector must carry another webhook id")
	}
	sr := newSenderRig(t, "shopify", first.Secret, "    account: example.myshopify.com\n", vs)
	do(t, sr.request(first))
	if code, resp, _ := do(t, sr.request(retry)); code != 200 || !strings.Contains(resp, `"duplicates":1`) {
		t.Fatalf("retry: %d %s, want a duplicate", code, resp)
	}
	ds := sr.deliveries("shopify", first.Headers["X-Shopify-Event-Id"])
	if len(ds) != 2 || ds[0].Headers["X-Shopify-Webhook-Id"] == ds[1].Headers["X-Shopify-Webhook-Id"] {
		t.Fatalf("deliveries = %+v", ds)
	}

	other := newSenderRig(t, "shopify", first.Secret, "    account: other-shop.myshopify.com\n", vs)
	if code, resp, _ := do(t, other.request(first)); code != 403 {
		t.Fatalf("another shop: %d %s, want 403", code, resp)
	}
	if n := len(other.events()); n != 0 {
		t.Fatalf("stored %d events for another shop", n)
	}
}

// The tenant check on the account each kind reads: Slack's team_id,
// Twilio's AccountSid and Square's merchant_id refuse a payload for another
// tenant with 403 and accept their own.
func TestSenderTenantChecks(t *testing.T) {
	for _, c := range []struct{ kind, vector, account string }{
		{"slack", "event_callback", "T061EG9R6"},
		{"twilio", "incoming SMS", twilioAccount},
		{"square", "payment.updated", "6SSW7HV8K2ST5"},
	} {
		v := vectorNamed(t, loadVectors(t, c.kind), c.vector)
		other := newSenderRig(t, c.kind, v.Secret, "    account: someone-else\n", []senderVector{v})
		if code, resp, _ := do(t, other.request(v)); code != 403 {
			t.Errorf("%s: %d %s, want 403", c.kind, code, resp)
		}
		own := newSenderRig(t, c.kind, v.Secret, "    account: "+c.account+"\n", []senderVector{v})
		if code, resp, _ := do(t, own.request(v)); code != 200 {
			t.Errorf("%s, own account: %d %s, want 200", c.kind, code, resp)
		}
	}
}

// Two events never share an identity: the same Paddle body with another
// event_id, or a Twilio status callback for a further status of one
// message, is another event. Signatures here come from the kinds' own
// signers, which the library vectors cover (internal/signature ours.json).
func TestSenderIdentitiesDistinct(t *testing.T) {
	r := newRig(t, `listen: 127.0.0.1:0
store: sqlite:unused
sources:
  - name: paddle
    kind: paddle
    secrets: [pdl_test_secret]
  - name: twilio
    kind: twilio
    secrets: [twilio-auth-token]
    public_url: https://hooks.example.com/hooks/twilio
  - name: square
    kind: square
    secrets: [square-key]
    public_url: https://hooks.example.com/hooks/square
`, nil)
	post := func(source, body, ctype string) string {
		t.Helper()
		req := r.signedAt(source, body, ctype)
		code, resp, _ := do(t, req)
		if code != 200 {
			t.Fatalf("%s %s: %d %s", source, body, code, resp)
		}
		return resp
	}
	for _, id := range []string{"evt_1", "evt_2"} {
		post("paddle", `{"event_id":"`+id+`","event_type":"transaction.paid","occurred_at":"2026-11-03T08:59:00Z","notification_id":"ntf_same","data":{"id":"txn_1"}}`, "application/json")
	}
	for _, st := range []string{"sent", "delivered", "delivered"} {
		post("twilio", "AccountSid="+twilioAccount+"&MessageSid="+twilioSM9+"&MessageStatus="+st+"&SmsStatus="+st, "application/x-www-form-urlencoded")
	}
	for _, id := range []string{"sq-1", "sq-2"} {
		post("square", `{"merchant_id":"M1","type":"payment.updated","event_id":"`+id+`","created_at":"2026-11-03T08:59:00Z","data":{"type":"payment","id":"pay_1"}}`, "application/json")
	}
	got := map[string]string{}
	for _, e := range r.events() {
		got[e.Source+"/"+e.EventID] = e.Type
	}
	want := map[string]string{
		"paddle/evt_1": "transaction.paid", "paddle/evt_2": "transaction.paid",
		"twilio/" + twilioSM9 + ":sent": "message.sent", "twilio/" + twilioSM9 + ":delivered": "message.delivered",
		"square/sq-1": "payment.updated", "square/sq-2": "payment.updated",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
}

// fields: still override a kind's paths.
func TestSenderFieldsOverride(t *testing.T) {
	v := vectorNamed(t, loadVectors(t, "shopify"), "orders/create")
	sr := newSenderRig(t, "shopify", v.Secret, "    fields: {entity: email}\n", []senderVector{v})
	if code, resp, _ := do(t, sr.request(v)); code != 200 {
		t.Fatalf("%d %s", code, resp)
	}
	ds := sr.deliveries("shopify", v.Headers["X-Shopify-Event-Id"])
	if len(ds) != 1 || ds[0].Entity != "jon@example.com" || ds[0].Type != "orders/create" {
		t.Fatalf("deliveries = %+v", ds)
	}
}

// signedAt signs body with the named source's scheme at t0, over the
// source's public_url when it has one, and posts it with content type
// ctype.
func (r *rig) signedAt(name, body, ctype string) *http.Request {
	r.t.Helper()
	src := r.source(name)
	scheme, err := signature.New(src.SchemeOptions())
	if err != nil {
		r.t.Fatal(err)
	}
	u := src.PublicURL
	if u == "" {
		u = r.srv.URL + "/hooks/" + name
	}
	hdr := http.Header{"Content-Type": {ctype}}
	h, err := scheme.Sign(&signature.Request{Method: "POST", URL: u, Header: hdr, Body: []byte(body)}, t0, "")
	if err != nil {
		r.t.Fatal(err)
	}
	req, err := http.NewRequest("POST", r.srv.URL+"/hooks/"+name, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", ctype)
	return req
}
