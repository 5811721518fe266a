package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/signature"
)

const sendersYAML = `sources:
  - name: shop
    kind: shopify
    secrets: ["${S_SECRET}"]
  - name: sl
    kind: slack
    secrets: ["${S_SECRET}"]
  - name: tw
    kind: twilio
    secrets: ["${S_SECRET}"]
    public_url: https://hooks.example.com/hooks/tw
  - name: pd
    kind: paddle
    secrets: ["${S_SECRET}"]
  - name: sq
    kind: square
    secrets: ["${S_SECRET}"]
    public_url: https://hooks.example.com/hooks/sq
`

// sign for each new sender kind prints headers that the kind's scheme,
// built independently from the same options, verifies for the body it was
// given at the URL the sender signs; the same headers do not verify a
// changed body. Shopify's event id goes into X-Shopify-Event-Id.
func TestSignSenderKinds(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "hookledger.yaml")
	if err := os.WriteFile(cfg, []byte(sendersYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	const secret = "sender-test-secret"
	for _, c := range []struct {
		source, kind, url, body, ctype string
	}{
		{"shop", signature.KindShopify, "", `{"id":1,"admin_graphql_api_id":"gid://shopify/Order/1"}`, "application/json"},
		{"sl", signature.KindSlack, "", `{"type":"event_callback","event_id":"Ev1","team_id":"T1","event":{"type":"message"}}`, "application/json"},
		{"tw", signature.KindTwilio, "https://hooks.example.com/hooks/tw", "AccountSid=AC1&MessageSid=SM1&SmsStatus=received&Body=Hi+there", "application/x-www-form-urlencoded"},
		{"pd", signature.KindPaddle, "", `{"event_id":"evt_1","event_type":"transaction.paid","data":{"id":"txn_1"}}`, "application/json"},
		{"sq", signature.KindSquare, "https://hooks.example.com/hooks/sq", `{"merchant_id":"M1","type":"payment.updated","event_id":"e1"}`, "application/json"},
	} {
		code, out, errOut := run(t, c.body, map[string]string{"S_SECRET": secret}, "sign", "--config", cfg, "--source", c.source, "--event-id", "ev-7", "-")
		if code != 0 {
			t.Fatalf("%s: sign: %d %s", c.source, code, errOut)
		}
		h := parseHeaders(out)
		if c.kind == signature.KindTwilio && h.Get("Content-Type") != c.ctype {
			t.Errorf("twilio: Content-Type %q, want the form type", h.Get("Content-Type"))
		}
		h.Set("Content-Type", c.ctype)
		s, err := signature.New(signature.Options{Kind: c.kind, Secrets: []string{secret}})
		if err != nil {
			t.Fatal(err)
		}
		req := &signature.Request{Method: "POST", URL: c.url, Header: h, Body: []byte(c.body)}
		if err := s.Verify(req, time.Now()); err != nil {
			t.Errorf("%s: the scheme refuses what sign printed (%q): %v", c.source, out, err)
		}
		req.Body = []byte(strings.Replace(c.body, "1", "2", 1))
		if err := s.Verify(req, time.Now()); err == nil {
			t.Errorf("%s: a changed body verifies", c.source)
		}
		if c.kind == signature.KindShopify && h.Get("X-Shopify-Event-Id") != "ev-7" {
			t.Errorf("shopify: X-Shopify-Event-Id %q, want the --event-id", h.Get("X-Shopify-Event-Id"))
		}
	}

	// A JSON body for Twilio is signed over the URL with bodySHA256, which
	// sign reports; the signature verifies for that URL only.
	body := `{"specversion":"1.0","type":"com.twilio.messaging.message.delivered","id":"EZ1"}`
	code, out, errOut := run(t, body, map[string]string{"S_SECRET": secret}, "sign", "--config", cfg, "--source", "tw", "-")
	signed := signature.TwilioURLWithBodySHA256("https://hooks.example.com/hooks/tw", []byte(body))
	if code != 0 || !strings.Contains(errOut, signed) {
		t.Fatalf("twilio json: %d %q %q, want the signed URL %s reported", code, out, errOut, signed)
	}
	s, _ := signature.New(signature.Options{Kind: signature.KindTwilio, Secrets: []string{secret}})
	h := parseHeaders(out)
	h.Set("Content-Type", "application/json")
	if err := s.Verify(&signature.Request{Method: "POST", URL: signed, Header: h, Body: []byte(body)}, time.Now()); err != nil {
		t.Fatalf("twilio json: %v", err)
	}
}

// vendors and lint --config show the new kinds' delivery contracts.
func TestVendorsShowsSenderKinds(t *testing.T) {
	code, out, _ := run(t, "", nil, "vendors", "--format", "json")
	var v struct {
		Vendors []struct {
			Name string
		}
	}
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("vendors json: %d %q", code, out)
	}
	names := map[string]bool{}
	for _, c := range v.Vendors {
		names[c.Name] = true
	}
	for _, k := range []string{"shopify", "slack", "twilio", "paddle", "square"} {
		if !names[k] {
			t.Errorf("vendors lacks %s", k)
		}
	}
	code, out, errOut := run(t, "", nil, "vendors", "slack", "square")
	if code != 0 || !strings.Contains(out, "ack timeout            3 s") || !strings.Contains(out, "retry window           3 days") {
		t.Fatalf("vendors slack square: %d %q %q", code, out, errOut)
	}
}

// lint --config takes a paddle flow's replay window and sender timeout
// from the kind's contract.
func TestLintConfigReadsSenderKindContract(t *testing.T) {
	yaml := strings.Replace(strings.Replace(githubYAML, "kind: github", "kind: paddle", 1), `"issues"`, `"transaction.paid"`, 1)
	cfg := filepath.Join(t.TempDir(), "hookledger.yaml")
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runMain(t, "lint", "--format", "json", "--config", cfg)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"paddle replay window of 90 days", "sender_timeout_seconds taken as 5 from the vendor catalogue: paddle"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("lint --config lacks %q:\n%s", want, stdout)
		}
	}
}
