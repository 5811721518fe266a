package config

import (
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/senderkind"
	"github.com/hookledger/hookledger/internal/signature"
)

// kind and secrets are the whole definition of a source of a known sender,
// and its scheme options come from the kind: github is the hmac scheme
// pinned to X-Hub-Signature-256 without any hmac: block.
func TestKindAndSecretsAreEnough(t *testing.T) {
	const yaml = `sources:
  - name: gh
    kind: github
    secrets: [gh-secret]
  - name: clerk
    kind: standard-webhooks
    secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]
`
	c, err := Parse("h.yaml", []byte(yaml), env(nil))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	o := c.Sources[0].SchemeOptions()
	if o.Kind != signature.KindGitHub || o.HMAC != nil {
		t.Fatalf("github scheme options = %+v", o)
	}
	if _, err := signature.New(o); err != nil {
		t.Fatalf("github scheme: %v", err)
	}
	if o := c.Sources[1].SchemeOptions(); o.Kind != signature.KindStandardWebhooks {
		t.Fatalf("standard-webhooks options = %+v", o)
	}
}

// A github source refuses what GitHub cannot use: an hmac: block (the
// scheme is pinned) and a tolerance (GitHub signs no timestamp), each at
// its line.
func TestGitHubRefusesHMACBlockAndTolerance(t *testing.T) {
	const yaml = `sources:
  - name: gh
    kind: github
    secrets: [gh-secret]
    tolerance: 5m
    hmac:
      header: X-Hub-Signature
`
	_, err := Parse("h.yaml", []byte(yaml), env(nil))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		`h.yaml:5:16: source "gh": GitHub signs no timestamp, so no tolerance applies`,
		`h.yaml:7:13: source "gh": the hmac block applies to kind hmac only`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors %q lack %q", err, want)
		}
	}
}

// An unknown kind is refused with the registry's names in its order
// (senderkind's TestBuiltinNames pins them), github among them.
func TestUnknownKindListsTheRegistry(t *testing.T) {
	_, err := Parse("h.yaml", []byte("sources:\n  - name: x\n    kind: gitlab\n    secrets: [s]\n"), env(nil))
	names := strings.Join(senderkind.Builtin().Names(), ", ")
	if err == nil || !strings.Contains(err.Error(), `unknown kind "gitlab" (one of `+names+`)`) ||
		!strings.Contains(names, "stripe, hubspot, klaviyo, standard-webhooks, pipedrive, hmac, github, shopify, slack, twilio, paddle, square") {
		t.Fatalf("unknown kind: %v", err)
	}
}

// kind and secrets are the whole source for every sender kind that signs
// no URL; twilio and square also need public_url, the URL they sign.
func TestSenderKindsShortConfig(t *testing.T) {
	for _, kind := range []string{"github", "shopify", "slack", "paddle"} {
		yaml := "sources:\n  - name: s\n    kind: " + kind + "\n    secrets: [a-secret]\n"
		c, err := Parse("k.yaml", []byte(yaml), env(nil))
		if err != nil {
			t.Errorf("%s: %v", kind, err)
			continue
		}
		if o := c.Sources[0].SchemeOptions(); o.Kind != kind {
			t.Errorf("%s: scheme %q", kind, o.Kind)
		}
	}
	for _, kind := range []string{"twilio", "square"} {
		yaml := "sources:\n  - name: s\n    kind: " + kind + "\n    secrets: [a-secret]\n    public_url: https://hooks.example.com/hooks/s\n"
		if _, err := Parse("k.yaml", []byte(yaml), env(nil)); err != nil {
			t.Errorf("%s with public_url: %v", kind, err)
		}
		yaml = "sources:\n  - name: s\n    kind: " + kind + "\n    secrets: [a-secret]\n"
		_, err := Parse("k.yaml", []byte(yaml), env(nil))
		if err == nil || !strings.Contains(err.Error(), `k.yaml:2:9: source "s": `) || !strings.Contains(err.Error(), "set public_url") {
			t.Errorf("%s without public_url: %v, want a refusal at the source's line", kind, err)
		}
	}
}

// public_url of a URL-signing kind is https, or http on a loopback host
// only, and has no fragment; a tolerance is refused where the sender signs
// no timestamp and bounded where it does.
func TestSenderKindsConfigChecks(t *testing.T) {
	for _, c := range []struct {
		name, src, want string
	}{
		{"http public host", "kind: square\n    secrets: [k]\n    public_url: http://hooks.example.com/hooks/s", "k.yaml:5:17: source \"s\": public_url must be an https URL"},
		{"fragment", "kind: twilio\n    secrets: [k]\n    public_url: https://hooks.example.com/hooks/s#rt=5000", "must not have a fragment"},
		{"shopify tolerance", "kind: shopify\n    secrets: [k]\n    tolerance: 5m", "k.yaml:5:16: source \"s\": Shopify signs no timestamp"},
		{"twilio tolerance", "kind: twilio\n    secrets: [k]\n    public_url: https://h.example.com/x\n    tolerance: 5m", "Twilio signs no timestamp"},
		{"slack tolerance too wide", "kind: slack\n    secrets: [k]\n    tolerance: 2h", "use at most 1h"},
		{"paddle tolerance zero", "kind: paddle\n    secrets: [k]\n    tolerance: 0s", "a tolerance of 0 would fall back to the default"},
		{"hmac block", "kind: slack\n    secrets: [k]\n    hmac: {header: X-Slack-Signature}", "the hmac block applies to kind hmac only"},
		{"extra_params elsewhere", "kind: slack\n    secrets: [k]\n    extra_params: [Foo]", "k.yaml:5:19: source \"s\": extra_params applies to kind twilio only"},
		{"extra_params name", "kind: twilio\n    secrets: [k]\n    public_url: https://h.example.com/x\n    extra_params: [ChannelRegion, \"Bad Name\"]", `extra_params[1] "Bad Name" is not a parameter name`},
		{"extra_params twice", "kind: twilio\n    secrets: [k]\n    public_url: https://h.example.com/x\n    extra_params: [ChannelRegion, ChannelRegion]", "extra_params lists ChannelRegion twice"},
		{"AccountSid in public_url", "kind: twilio\n    secrets: [k]\n    public_url: https://h.example.com/x?AccountSid=AC1", "public_url's query must not hold AccountSid"},
	} {
		_, err := Parse("k.yaml", []byte("sources:\n  - name: s\n    "+c.src+"\n"), env(nil))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	for _, ok := range []string{
		"kind: square\n    secrets: [k]\n    public_url: http://127.0.0.1:8080/hooks/s",
		"kind: twilio\n    secrets: [k]\n    public_url: http://localhost:8080/hooks/s?tenant=a",
		"kind: paddle\n    secrets: [k]\n    tolerance: 5s",
		"kind: slack\n    secrets: [k]\n    tolerance: 1h",
		"kind: shopify\n    secrets: [k]\n    account: example.myshopify.com\n    fields: {entity: id}",
		"kind: twilio\n    secrets: [k]\n    public_url: https://h.example.com/x\n    extra_params: [ChannelRegion, ConversationSid]",
	} {
		if _, err := Parse("k.yaml", []byte("sources:\n  - name: s\n    "+ok+"\n"), env(nil)); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
}

// An extra_params name the kind already accepts changes nothing: it loads
// with a warning at its line.
func TestExtraParamsDocumentedWarns(t *testing.T) {
	c, err := Parse("t.yaml", []byte("sources:\n  - name: s\n    kind: twilio\n    secrets: [k]\n    public_url: https://h.example.com/x\n    extra_params:\n      - ChannelRegion\n      - MessageStatus\n"), env(nil))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if len(c.Warnings) != 1 || c.Warnings[0].Line != 8 || !strings.Contains(c.Warnings[0].Msg, "MessageStatus, which the kind already accepts") {
		t.Fatalf("warnings %+v: want one at line 8 naming MessageStatus", c.Warnings)
	}
}

// An account: on a kind whose events name no tenant would check nothing:
// it loads with a warning at its line, and fields.account silences it.
func TestAccountWithoutAccountPathWarns(t *testing.T) {
	base := "sources:\n  - name: billing\n    kind: paddle\n    secrets: [pdl_ntfset_x]\n    account: acct_1\n"
	c, err := Parse("h.yaml", []byte(base), env(nil))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	var found bool
	for _, w := range c.Warnings {
		if strings.Contains(w.Msg, "refuses nothing") && w.Line == 5 {
			found = true
		}
	}
	if !found {
		t.Fatalf("warnings %+v: want one at line 5 saying account refuses nothing", c.Warnings)
	}
	c, err = Parse("h.yaml", []byte(base+"    fields: {account: data.customer_id}\n"), env(nil))
	if err != nil {
		t.Fatalf("Parse with fields.account: %v", err)
	}
	for _, w := range c.Warnings {
		if strings.Contains(w.Msg, "refuses nothing") {
			t.Fatalf("fields.account set, still warned: %+v", w)
		}
	}
	c, err = Parse("h.yaml", []byte("sources:\n  - name: s\n    kind: stripe\n    secrets: [whsec_x]\n    account: acct_1\n"), env(nil))
	if err != nil {
		t.Fatalf("Parse stripe: %v", err)
	}
	for _, w := range c.Warnings {
		if strings.Contains(w.Msg, "refuses nothing") {
			t.Fatalf("stripe names its account, still warned: %+v", w)
		}
	}
}

// A flow that orders a Stripe source's events by their occurrence time is
// warned that Stripe's created counts whole seconds (OR01); a kind whose
// time is finer, or a source that names its own time, is not.
func TestCoarseOccurrenceTimeWarns(t *testing.T) {
	const yaml = `sources:
  - name: pay
    kind: stripe
    secrets: [whsec_x]
  - name: own
    kind: stripe
    secrets: [whsec_x]
    fields: {occurred_at: data.object.updated}
  - name: app
    kind: standard-webhooks
    secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]
flows:
` + `  - {name: f_pay, source: pay, events: [a], entity: event.data.id, version: {mode: occurred_at, tie_break: meta.event_id}, effects: [{name: e, destination: d, request: {path: '"/x"'}}]}
  - {name: f_own, source: own, events: [a], entity: event.data.id, version: {mode: occurred_at, tie_break: meta.event_id}, effects: [{name: e, destination: d, request: {path: '"/x"'}}]}
  - {name: f_app, source: app, events: [a], entity: event.data.id, version: {mode: occurred_at, tie_break: meta.event_id}, effects: [{name: e, destination: d, request: {path: '"/x"'}}]}
destinations:
  - {name: d, base_url: "https://d.example"}
`
	c, err := Parse("h.yaml", []byte(yaml), env(nil))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	w := c.Warnings.Error()
	if !strings.Contains(w, `flow "f_pay": OR01: Stripe's created is in seconds`) {
		t.Errorf("no OR01 warning for the Stripe flow: %q", w)
	}
	if strings.Contains(w, `"f_own": OR01`) || strings.Contains(w, `"f_app": OR01`) {
		t.Errorf("OR01 warning for a flow with a finer time: %q", w)
	}
}
