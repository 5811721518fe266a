package config

import (
	"os"
	"strings"
	"testing"
)

// Every YAML example in docs/configuration.md loads as written, with the
// variables it names set: the reference cannot show a key the loader
// refuses, nor one spelt wrong.
func TestConfigurationDocLoads(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{
		"HOOKLEDGER_ADMIN_TOKEN":  "t0k",
		"STRIPE_WEBHOOK_SECRET":   "whsec_stripe",
		"HUBSPOT_CLIENT_SECRET":   "hubspot-secret",
		"GITHUB_WEBHOOK_SECRET":   "github-secret",
		"TWILIO_AUTH_TOKEN":       "twilio-token",
		"PARTNER_WEBHOOK_SECRET":  "partner-secret",
		"PARTNER_ENDPOINT_SECRET": "whsec_ZGVtby1zdGFuZGFyZC13ZWJob29rcy1zZWNyZXQtY2hhbmdlLW1l",
		"SHOP_WEBHOOK_SECRET":     "shop-secret",
		"SHOP_API_TOKEN":          "shop-token",
		"CRM_TOKEN":               "crm-token",
		"APP_SIGNING_SECRET":      "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwMfKQ9r8GKYo=",
		"SLACK_WEBHOOK_URL":       "https://hooks.slack.com/services/T0/B0/x",
	}
	blocks := 0
	rest := string(doc)
	for {
		var block string
		var ok bool
		if _, rest, ok = strings.Cut(rest, "```yaml\n"); !ok {
			break
		}
		block, rest, _ = strings.Cut(rest, "```")
		blocks++
		c, err := Parse("docs/configuration.md", []byte(block), env(vars))
		if err != nil {
			t.Errorf("example %d does not load: %v", blocks, err)
			continue
		}
		if len(c.Sources) == 0 {
			t.Errorf("example %d: no sources loaded", blocks)
		}
	}
	if blocks < 2 {
		t.Fatalf("docs/configuration.md: %d yaml examples, want the two references", blocks)
	}
}
