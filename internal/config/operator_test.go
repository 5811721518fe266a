package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// A config whose every secret comes from an unset variable.
const secretsFromEnv = `admin:
  token: ${ADMIN_TOKEN}
notifications:
  webhook_url: ${SLACK_WEBHOOK_URL}
sources:
  - name: stripe
    kind: stripe
    secrets: [${STRIPE_SECRET}]
    api: {base_url: "https://api.stripe.com", bearer_token: "${STRIPE_API_KEY}"}
  - name: app
    kind: standard-webhooks
    secrets: [${APP_SECRET}, not-a-whsec-secret]
  - name: deals
    kind: pipedrive
    secrets: [${PIPEDRIVE_BASIC}]
destinations:
  - name: crm
    base_url: https://api.hubapi.com
    auth: {bearer: "${HUBSPOT_TOKEN}"}
  - name: erp
    base_url: https://erp.example.com
    auth: {basic: {user: erp, password: "${ERP_PASSWORD}"}}
`

func TestLoadOperatorNeedsNoSecrets(t *testing.T) {
	// Load refuses it: the first missing variable stops it with its line.
	_, err := Parse("h.yaml", []byte(secretsFromEnv), env(nil))
	if err == nil || !strings.Contains(err.Error(), "h.yaml:2:") || !strings.Contains(err.Error(), "ADMIN_TOKEN is not set") {
		t.Fatalf("Parse without environment: %v; want the admin token's variable named at h.yaml:2", err)
	}

	c, err := parseOperator("h.yaml", []byte(secretsFromEnv), env(nil))
	if err != nil {
		t.Fatalf("ParseOperator: %v", err)
	}
	if !c.Operator || c.Admin.Token != "" || c.Sources[0].Secrets[0] != "" || c.Destinations[0].Auth.Bearer != "" || c.Notifications.WebhookURL != "" {
		t.Errorf("unset secrets must load empty, got token %q, secret %q, bearer %q, webhook %q",
			c.Admin.Token, c.Sources[0].Secrets[0], c.Destinations[0].Auth.Bearer, c.Notifications.WebhookURL)
	}
	// The malformed standard-webhooks secret is kept as written: an
	// operator load neither checks nor replaces a secret.
	if got := c.Sources[1].Secrets; len(got) != 2 || got[1] != "not-a-whsec-secret" {
		t.Errorf("app secrets = %q", got)
	}
	var fields []string
	for _, u := range c.UnresolvedSecrets {
		fields = append(fields, u.Field+"="+u.Var)
	}
	want := "admin.token=ADMIN_TOKEN notifications.webhook_url=SLACK_WEBHOOK_URL sources[0].secrets[0]=STRIPE_SECRET " +
		"sources[0].api.bearer_token=STRIPE_API_KEY sources[1].secrets[0]=APP_SECRET sources[2].secrets[0]=PIPEDRIVE_BASIC " +
		"destinations[0].auth.bearer=HUBSPOT_TOKEN destinations[1].auth.basic.password=ERP_PASSWORD"
	if got := strings.Join(fields, " "); got != want {
		t.Errorf("unresolved:\n got %s\nwant %s", got, want)
	}
}

// Everything but the secrets is still checked, with file:line.
func TestLoadOperatorStillReportsOtherErrors(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"missing variable outside a secret", "store: ${STORE_URL}\n", "h.yaml:1:8: environment variable STORE_URL is not set"},
		{"unknown key", "sources:\n  - name: s\n    kind: stripe\n    secrets: [${S}]\n    tolerence: 5m\n", "h.yaml:5:"},
		{"unknown kind", "sources:\n  - name: s\n    kind: paypal\n    secrets: [${S}]\n", "h.yaml:3:"},
		{"hmac option", "sources:\n  - name: s\n    kind: hmac\n    secrets: [${S}]\n    hmac: {header: X-Sig, algorithm: md5}\n", "h.yaml:5:"},
		{"pipedrive tolerance", "sources:\n  - name: s\n    kind: pipedrive\n    secrets: [${S}]\n    tolerance: 5m\n", "h.yaml:5:"},
		{"auth with two ways", "destinations:\n  - name: d\n    base_url: https://x.example\n    auth: {bearer: \"${T}\", basic: {user: u, password: p}}\n", "h.yaml:4:"},
		{"header auth without name", "destinations:\n  - name: d\n    base_url: https://x.example\n    auth: {header: {value: v}}\n", "h.yaml:4:"},
		{"secrets left out", "sources:\n  - name: s\n    kind: stripe\n", "secrets is required"},
	}
	for _, tc := range cases {
		_, err := parseOperator("h.yaml", []byte(tc.yaml), env(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error containing %q", tc.name, err, tc.want)
		}
		var es Errors
		var e *Error
		if err != nil && !errors.As(err, &es) && !errors.As(err, &e) {
			t.Errorf("%s: %T is not a config error", tc.name, err)
		}
	}
}

// Serve warns about secrets that came from a default written in the file;
// the refs name the field and the variable, never the value.
func TestDefaultedSecrets(t *testing.T) {
	c, err := Load(filepath.Join("..", "..", "hookledger.yaml"), env(map[string]string{"STRIPE_WEBHOOK_SECRET": "whsec_real"}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range c.DefaultedSecrets {
		got = append(got, d.Field+"="+d.Var)
		if d.Line == 0 {
			t.Errorf("%s: no line", d.Field)
		}
	}
	// The stripe secret is set; CRM_PUBLIC_URL is defaulted too but is
	// not a secret.
	want := "admin.token=HOOKLEDGER_ADMIN_TOKEN sources[1].secrets[0]=HUBSPOT_CLIENT_SECRET sources[2].secrets[0]=APP_WEBHOOK_SECRET"
	if strings.Join(got, " ") != want {
		t.Errorf("defaulted secrets:\n got %s\nwant %s", strings.Join(got, " "), want)
	}
	// An empty default switches an optional field off: no warning.
	c, err = Parse("h.yaml", []byte("notifications:\n  webhook_url: ${SLACK_URL:-}\n"), env(nil))
	if err != nil || len(c.DefaultedSecrets) != 0 {
		t.Errorf("empty default: %v %+v", err, c)
	}
}

func TestIsSecretField(t *testing.T) {
	for path, want := range map[string]bool{
		"$.sources[0].secrets[1]":                true,
		"$.sources[3].api.bearer_token":          true,
		"$.sources[3].api.headers.Authorization": true,
		"$.admin.token":                          true,
		"$.destinations[0].auth.basic.password":  true,
		"$.destinations[0].auth.header.value":    true,
		"$.notifications.webhook_url":            true,
		"$.sources[0].public_url":                false,
		"$.sources[0].api.base_url":              false,
		"$.destinations[0].auth.header.name":     false,
		"$.destinations[0].base_url":             false,
		"$.store":                                false,
	} {
		if got := isSecretField(path); got != want {
			t.Errorf("IsSecretField(%q) = %v, want %v", path, got, want)
		}
	}
}
