package config

import (
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/verify"
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
	if o.Kind != verify.KindGitHub || o.HMAC != nil {
		t.Fatalf("github scheme options = %+v", o)
	}
	if _, err := verify.New(o); err != nil {
		t.Fatalf("github scheme: %v", err)
	}
	if o := c.Sources[1].SchemeOptions(); o.Kind != verify.KindStandardWebhooks {
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

// An unknown kind is refused with the registry's names, github among them.
func TestUnknownKindListsTheRegistry(t *testing.T) {
	_, err := Parse("h.yaml", []byte("sources:\n  - name: x\n    kind: gitlab\n    secrets: [s]\n"), env(nil))
	if err == nil || !strings.Contains(err.Error(), `unknown kind "gitlab" (one of stripe, hubspot, klaviyo, standard-webhooks, pipedrive, hmac, github, shopify, slack, twilio, paddle, square)`) {
		t.Fatalf("unknown kind: %v", err)
	}
}
