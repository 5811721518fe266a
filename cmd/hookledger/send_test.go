package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/senderkind"
	"github.com/hookledger/hookledger/internal/signature"
)

// Every kind's source, with the secrets from variables that only the
// server and send have; the CRM and the other sources' secrets are not
// needed to send to one source.
const sendConfig = `store: sqlite:%s
admin:
  token: admin-tok
sources:
  - name: stripe
    kind: stripe
    secrets: [${S_STRIPE}]
    account: acct_123
  - name: crm1
    kind: hubspot
    version: v1
    secrets: [hubspot-secret]
  - name: crm2
    kind: hubspot
    version: v2
    secrets: [hubspot-secret]
    public_url: %s/hooks/crm2
  - name: crm3
    kind: hubspot
    version: v3
    secrets: [hubspot-secret]
    public_url: %s/hooks/crm3
    account: "4711"
  - name: klaviyo
    kind: klaviyo
    secrets: [klaviyo-secret]
  - name: app
    kind: standard-webhooks
    secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]
  - name: deals
    kind: pipedrive
    secrets: ["pd-user:pd-pass"]
  - name: shop
    kind: hmac
    secrets: [shop-secret]
    hmac: {header: X-Sig}
  - name: github
    kind: hmac
    secrets: [gh-secret]
    hmac: {header: X-Hub-Signature-256, prefix: "sha256="}
    fields: {event_id: "header:X-GitHub-Delivery", type: action}
  - name: slack
    kind: slack
    secrets: [slack-signing-secret]
    account: T0TEAM
  - name: paddle
    kind: paddle
    secrets: [pdl_ntfset_demo_secret]
  - name: square
    kind: square
    secrets: [square-signature-key]
    public_url: %s/hooks/square
  - name: mailgun
    kind: mailgun
    secrets: [mailgun-signing-key]
    account: acct-mg
  - name: unset
    kind: stripe
    secrets: [${S_UNSET}]
`

func TestSendEveryKind(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "hookledger.yaml")
	db := filepath.Join(dir, "send.db")
	ln, base := listenLocal(t)
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(sendConfig, db, base, base, base)), 0o600); err != nil {
		t.Fatal(err)
	}
	startServerOn(t, ln, cfgPath, map[string]string{"S_STRIPE": "whsec_stripe", "S_UNSET": "whsec_unset"})
	env := map[string]string{"S_STRIPE": "whsec_stripe"}
	for _, tc := range []struct {
		source string
		events int
	}{
		{"stripe", 1}, {"crm1", 2}, {"crm2", 2}, {"crm3", 2}, {"klaviyo", 2}, {"app", 1}, {"deals", 1}, {"shop", 1}, {"github", 1},
		{"slack", 1}, {"paddle", 1}, {"square", 1}, {"mailgun", 1},
	} {
		args := []string{"send", "--config", cfgPath, "--source", tc.source}
		if tc.source != "crm2" && tc.source != "crm3" && tc.source != "square" {
			args = append(args, "--url", base+"/hooks/"+tc.source)
		}
		// Two sends of the sample are two events: fresh ids each time.
		for i := 0; i < 2; i++ {
			code, out, errOut := run(t, "", env, args...)
			want := fmt.Sprintf(`200 OK`+"\n"+`{"status":"stored","events":%d}`, tc.events)
			if code != 0 || !strings.Contains(out, want) || errOut != "" {
				t.Errorf("send %s #%d: exit %d, stdout %q, stderr %q; want %q", tc.source, i+1, code, out, errOut, want)
			}
		}
		// A fixed id sent twice: the second is a duplicate.
		fixed := append(args, "--event-id", "fixed-"+tc.source)
		run(t, "", env, fixed...)
		code, out, _ := run(t, "", env, fixed...)
		if code != 0 || !strings.Contains(out, fmt.Sprintf(`"duplicates":%d`, tc.events)) {
			t.Errorf("send %s --event-id twice: %d %q; want %d duplicates", tc.source, code, out, tc.events)
		}
	}

	// A body from a file or stdin is sent as it is.
	body := `{"eventId":"ev_file","type":"order.updated","order_id":"o1","rev":1}`
	file := filepath.Join(dir, "event.json")
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := run(t, "", nil, "send", "--config", cfgPath, "--source", "shop", "--url", base+"/hooks/shop", file); code != 0 || !strings.Contains(out, `"stored"`) {
		t.Errorf("send FILE: %d %q", code, out)
	}
	if code, out, _ := run(t, body, nil, "send", "--config", cfgPath, "--source", "shop", "--url", base+"/hooks/shop", "-"); code != 0 || !strings.Contains(out, `"duplicates":1`) {
		t.Errorf("send - (same body again): %d %q", code, out)
	}
	// A non-2xx answer is exit 1 with the server's answer shown.
	code, out, _ := run(t, "{}", nil, "send", "--config", cfgPath, "--source", "shop", "--url", base+"/hooks/shop", "-")
	if code != 1 || !strings.Contains(out, "400 Bad Request") || !strings.Contains(out, "eventId") {
		t.Errorf("send of a malformed body: %d %q", code, out)
	}
	// The unsigned account check of Stripe uses the source's account: a
	// body naming another is refused.
	code, out, _ = run(t, `{"id":"evt_x","type":"a.b","created":1,"account":"acct_other","data":{"object":{"id":"x"}}}`, env,
		"send", "--config", cfgPath, "--source", "stripe", "--url", base+"/hooks/stripe", "-")
	if code != 1 || !strings.Contains(out, "403") {
		t.Errorf("send with another account: %d %q", code, out)
	}

	// Usage and configuration errors.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"send", "--config", cfgPath}, "--source is required"},
		{[]string{"send", "--config", cfgPath, "--source", "nosuch"}, `no source "nosuch"`},
		{[]string{"send", "--config", cfgPath, "--source", "shop", "--sample", "nosuch"}, `no sample "nosuch" for kind hmac (samples: order.cancelled, order.created, order.updated)`},
		{[]string{"send", "--config", cfgPath, "--source", "shop", "a", "b"}, "at most one FILE"},
		{[]string{"send", "--config", cfgPath, "--source", "unset"}, "S_UNSET is not set"},
		{[]string{"send", "--config", cfgPath, "--source", "stripe"}, "S_STRIPE is not set"},
		{[]string{"send", "--list-samples", "--source", "shop"}, "takes no other arguments"},
	} {
		code, _, errOut := run(t, "", nil, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: %d %q; want exit 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	code, out, _ = run(t, "", nil, "send", "--list-samples")
	for _, kind := range []string{"stripe", "hubspot", "klaviyo", "standard-webhooks", "pipedrive", "hmac", "slack", "paddle", "square", "mailgun"} {
		if !strings.Contains(out, kind+" ") {
			t.Errorf("--list-samples lacks %s: %q", kind, out)
		}
	}
	if code != 0 || !strings.Contains(out, "invoice.paid (default)") || !strings.Contains(out, "checkout.session.completed") {
		t.Errorf("--list-samples: %d %q", code, out)
	}
	// Every Stripe sample is sent, signed, and stored as one event.
	for _, sample := range []string{"invoice.payment_failed", "customer.subscription.created", "customer.subscription.deleted",
		"charge.refunded", "checkout.session.completed", "payment_intent.succeeded", "customer.created", "customer.updated"} {
		code, out, errOut := run(t, "", env, "send", "--config", cfgPath, "--source", "stripe", "--url", base+"/hooks/stripe", "--sample", sample)
		if code != 0 || !strings.Contains(out, `{"status":"stored","events":1}`) {
			t.Errorf("send --sample %s: %d %q %q", sample, code, out, errOut)
		}
	}
}

// A server that is not there is exit 1 with the reason.
func TestSendNoServer(t *testing.T) {
	cfg := writeFile(t, "h.yaml", "sources:\n  - name: shop\n    kind: hmac\n    secrets: [x]\n    hmac: {header: X-Sig}\n")
	code, _, errOut := run(t, "", nil, "send", "--config", cfg, "--source", "shop", "--url", "http://127.0.0.1:1/hooks/shop")
	if code != 1 || !strings.Contains(errOut, "connection refused") {
		t.Fatalf("send to nowhere: %d %q", code, errOut)
	}
}

// bodySigner is a scheme that signs inside the body, as Mailgun's does.
type bodySigner struct{}

func (bodySigner) Verify(*signature.Request, time.Time) error { return nil }
func (bodySigner) Sign(*signature.Request, time.Time, string) (http.Header, error) {
	return nil, errors.New("no headers")
}
func (bodySigner) SignBody(req *signature.Request, now time.Time) ([]byte, error) {
	return append(append([]byte{}, req.Body...), fmt.Sprintf(" signed at %d", now.Unix())...), nil
}

// send posts the body a body-signing scheme returns, with no signature
// headers; a header-signing scheme's body is sent as it is.
func TestSignForSendSignsInTheBody(t *testing.T) {
	now := time.Unix(1767225600, 0)
	u, h, body, err := signForSend(senderkind.Kind{}, bodySigner{}, "http://127.0.0.1:1/hooks/m", []byte("{}"), now, "id")
	if err != nil || u != "http://127.0.0.1:1/hooks/m" || len(h) != 0 || string(body) != "{} signed at 1767225600" {
		t.Fatalf("body signer: %q %v %q %v", u, h, body, err)
	}
	k, _ := senderkind.Builtin().Lookup(senderkind.Stripe)
	s, err := k.NewScheme(senderkind.Source{Kind: k.Name}, []string{"whsec_x"})
	if err != nil {
		t.Fatal(err)
	}
	_, h, body, err = signForSend(k, s, "http://127.0.0.1:1/hooks/s", []byte("{}"), now, "id")
	if err != nil || h.Get("Stripe-Signature") == "" || string(body) != "{}" {
		t.Fatalf("header signer: %v %q %v", h, body, err)
	}
}
