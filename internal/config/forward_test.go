package config

import (
	"errors"
	"strings"
	"testing"
)

// githubSource is a source whose events carry no occurrence time.
const githubSource = `  - name: gh
    kind: github
    secrets: [gh-secret]
`

const forwardDest = `destinations:
  - {name: app, base_url: "https://app.example/hooks"}
`

// A forward flow is expanded into the flow the engine runs: one effect
// per event, the event id as its entity without order_by, the user's
// entity in occurrence order with it.
func TestForwardExpands(t *testing.T) {
	c, err := Parse("f.yaml", []byte(flowBase+`  - name: stripe_to_app
    source: stripe
    forward: {destination: app}
  - name: ordered
    source: stripe
    events: ["customer.subscription.*"]
    forward: {destination: app}
    order_by: occurrence
    entity: event.data.object.id
`+forwardDest), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	f := c.Flows[0]
	if f.Entity != "meta.event_id" || f.Version.Mode != ModeRevision || f.Version.Revision != "0" || len(f.Events) != 0 {
		t.Errorf("independent forward = entity %q version %+v events %v, want meta.event_id at revision 0, every type", f.Entity, f.Version, f.Events)
	}
	if len(f.Effects) != 1 || f.Effects[0].Name != forwardEffect || f.Effects[0].Destination != "app" || !f.Compiled.Effects[0].Forward {
		t.Errorf("effects = %+v, want the one forward effect to app", f.Effects)
	}
	o := c.Flows[1]
	if o.Entity != "event.data.object.id" || o.Version.Mode != ModeOccurredAt || o.Version.TieBreak != "meta.event_id" {
		t.Errorf("ordered forward = entity %q version %+v, want the entity in occurred_at order, ties by event id", o.Entity, o.Version)
	}
	// Stripe's created is in seconds: said in the forward's own words.
	if len(c.Warnings) != 1 || c.Warnings[0].Line != 20 || !strings.Contains(c.Warnings[0].Msg, "forwarded in event id order") {
		t.Errorf("warnings = %v, want the seconds warning at order_by's line 20", c.Warnings)
	}
}

func TestForwardErrors(t *testing.T) {
	const head = "  - name: a\n    source: stripe\n"
	cases := []struct {
		name, flow string
		line       int
		want       string
	}{
		{"no destination", head + "    forward: {}\n", 18, `flow "a": forward.destination is required`},
		{"unknown destination", head + "    forward: {destination: ap}\n", 18, `flow "a": forward: no destination named "ap" is configured (destinations: app)`},
		{"endpoints", head + "    forward: {destination: endpoints}\n", 18, `forward.destination "endpoints"`},
		{"with effects", head + "    forward: {destination: app}\n    effects:\n      - name: x\n        destination: app\n", 20, `flow "a": forward makes the flow's one effect itself; remove effects`},
		{"with state", head + "    forward: {destination: app}\n    state: event.data\n", 19, `flow "a": forward keeps no state of its own; remove state`},
		{"with version", head + "    forward: {destination: app}\n    version: {mode: revision, revision: event.r}\n", 19, `flow "a": forward sets the version itself`},
		{"entity without order_by", head + "    forward: {destination: app}\n    entity: event.data.object.id\n", 19, `entity applies to a forward flow with order_by: occurrence`},
		{"order_by without entity", head + "    forward: {destination: app}\n    order_by: occurrence\n", 16, `order_by: occurrence needs entity`},
		{"unknown order_by", head + "    forward: {destination: app}\n    order_by: arrival\n", 19, `unknown order_by "arrival"`},
		{"order_by without forward", head + "    events: [x]\n    entity: event.id\n    version: {mode: revision, revision: event.r}\n    order_by: occurrence\n", 21, `order_by applies to forward flows only`},
		{"IP02 entity", head + "    forward: {destination: app}\n    order_by: occurrence\n    entity: string(meta.received_at)\n", 20, "IP02"},
		{"bad when", head + "    forward: {destination: app}\n    when: event.livemode ==\n", 19, "when"},
		{"unknown key", head + "    forward: {destination: app, to: x}\n", 18, "unknown field"},
		{"order without occurrence time", "  - name: a\n    source: gh\n    forward: {destination: app}\n    order_by: occurrence\n    entity: event.repository.id\n", 19,
			`flow "a": order_by: occurrence needs each event's occurrence time, and source "gh" (kind github) carries none`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(strings.Replace(flowBase, "flows:\n", githubSource+"flows:\n", 1)+tc.flow+forwardDest), env(nil))
			var es Errors
			var one *Error
			switch {
			case errors.As(err, &es):
			case errors.As(err, &one): // a decoding error: strict YAML
				es = Errors{one}
			default:
				t.Fatalf("err = %v, want config errors", err)
			}
			if es[0].Line != tc.line || !strings.Contains(es[0].Msg, tc.want) {
				t.Errorf("got %v, want line %d containing %q", es, tc.line, tc.want)
			}
		})
	}
}

func TestSigningErrors(t *testing.T) {
	const base = "destinations:\n  - name: app\n    base_url: https://app.example\n"
	cases := []struct {
		name, block string
		line        int
		want        string
	}{
		{"no secrets", "    signing: {}\n", 4, `destination "app": signing.secrets is required`},
		{"not a key", "    signing:\n      secrets: [s3cret]\n", 5, `destination "app": signing.secrets[0]: a signing secret starts with whsec_`},
		{"short key", "    signing:\n      secrets: [whsec_c2hvcnQ=]\n", 5, "24 to 64 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(base+tc.block), env(nil))
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("err = %v, want config errors", err)
			}
			if es[0].Line != tc.line || !strings.Contains(es[0].Msg, tc.want) || strings.Contains(es[0].Msg, "s3cret") {
				t.Errorf("got %v, want line %d containing %q and no secret", es, tc.line, tc.want)
			}
		})
	}
	c, err := Parse("f.yaml", []byte(base+"    signing:\n      secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwMfKQ9r8GKYo=]\n"), env(nil))
	if err != nil || c.Destinations[0].Signing == nil {
		t.Fatalf("a whsec_ key: %v", err)
	}
}

// The forwarding example in docs/flows.md loads as written, and expands
// as the text says.
func TestForwardDocExampleLoads(t *testing.T) {
	c, err := Parse("docs/flows.md", []byte(docExample(t, "### Example: forwarding")),
		env(map[string]string{"HOOKLEDGER_ADMIN_TOKEN": "t", "STRIPE_WEBHOOK_SECRET": "whsec_x", "APP_TOKEN": "a",
			"APP_SIGNING_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwMfKQ9r8GKYo="}))
	if err != nil {
		t.Fatalf("the docs example does not load: %v", err)
	}
	if f := c.Flows[0]; f.Entity != "meta.event_id" || len(f.Events) != 0 || f.Effects[0].Destination != "app" {
		t.Errorf("stripe_to_app = %+v", f)
	}
	if f := c.Flows[1]; f.Version.Mode != ModeOccurredAt || f.Entity != "event.data.object.id" {
		t.Errorf("subscriptions_to_billing = %+v", f)
	}
	if c.Destinations[0].Signing == nil || len(c.Destinations[0].Signing.Secrets) != 1 {
		t.Errorf("app's signing = %+v", c.Destinations[0].Signing)
	}
}

// The operator verbs need no signing secret: an unset variable there
// leaves the key empty and loads.
func TestSigningSecretUnsetForOperators(t *testing.T) {
	yaml := "destinations:\n  - name: app\n    base_url: https://app.example\n    signing:\n      secrets: [${APP_SIGNING_SECRET}]\n"
	if _, err := parseOperator("f.yaml", []byte(yaml), env(nil)); err != nil {
		t.Fatalf("operator load: %v", err)
	}
	if _, err := Parse("f.yaml", []byte(yaml), env(nil)); err == nil || !strings.Contains(err.Error(), "APP_SIGNING_SECRET") {
		t.Fatalf("server load: %v, want the missing variable named", err)
	}
}
