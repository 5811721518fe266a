package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPublishDefaultsAndEndpoints(t *testing.T) {
	c, err := Parse("p.yaml", []byte(`endpoints:
  - id: partner.eu
    url: https://partner.example/hooks
    types: ["invoice.*", "customer.created"]
    secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwMfKQ9r8GKYo=]
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Publish
	if p.Timeout.D() != 15*time.Second || p.DisableAfter.D() != 120*time.Hour || p.IdempotencyWindow.D() != 24*time.Hour ||
		p.WarnPayloadBytes != 20480 || p.MaxInFlight != 16 || p.SlowAnswer.D() != time.Second || len(p.Schedule) != 6 || p.Schedule[5].D() != 10*time.Hour {
		t.Fatalf("defaults %+v", p)
	}
	if len(c.Endpoints) != 1 || c.Endpoints[0].ID != "partner.eu" {
		t.Fatalf("endpoints %+v", c.Endpoints)
	}
	// A short delivery lease shortens the default timeout with it.
	c2, err := Parse("p.yaml", []byte("delivery:\n  lease: 4s\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c2.Publish.Timeout.D() != 2*time.Second {
		t.Fatalf("timeout %s under a 4 s lease, want 2 s", c2.Publish.Timeout.D())
	}
	// No flow publishes: no built-in destination is added.
	for _, d := range c.Destinations {
		if d.Name == publishDestination {
			t.Fatal("endpoints destination added without a flow that publishes")
		}
	}
}

func TestPublishErrors(t *testing.T) {
	cases := []struct {
		name, yaml string
		line       int
		want       string
	}{
		{"no id", "endpoints:\n  - url: https://a.example\n", 2, "id is required"},
		{"bad id", "endpoints:\n  - id: 'a b'\n    url: https://a.example\n", 2, "endpoint id"},
		{"duplicate id", "endpoints:\n  - id: a\n    url: https://a.example\n  - id: a\n    url: https://b.example\n", 4, "duplicate endpoint id"},
		{"relative url", "endpoints:\n  - id: a\n    url: /hooks\n", 3, "absolute http or https URL"},
		{"url with credentials", "endpoints:\n  - id: a\n    url: https://u:p@a.example\n", 3, "credentials"},
		{"bad glob", "endpoints:\n  - id: a\n    url: https://a.example\n    types: [\"a.[\"]\n", 4, "event-type pattern"},
		{"short secret", "endpoints:\n  - id: a\n    url: https://a.example\n    secrets: [whsec_c2hvcnQ=]\n", 4, "24 to 64 bytes"},
		{"not a signing key", "endpoints:\n  - id: a\n    url: https://a.example\n    secrets: [hunter2hunter2]\n", 4, "starts with whsec_"},
		{"schedule", "publish:\n  schedule: [5s, -1s]\n", 2, "schedule[1] must be positive"},
		{"timeout over lease", "publish:\n  timeout: 3m\n", 2, "delivery.lease"},
		{"slow answer", "publish:\n  slow_answer: -1s\n", 2, "publish.slow_answer must be positive"},
		{"reserved source", "sources:\n  - name: publish\n    kind: stripe\n    secrets: [whsec_x]\n", 2, "reserved"},
		{"reserved destination", "destinations:\n  - {name: endpoints, base_url: \"https://x.example\"}\n", 2, "reserved"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(tc.yaml), env(nil))
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("err = %v, want config errors", err)
			}
			for _, e := range es {
				if strings.Contains(e.Msg, tc.want) {
					if e.Line != tc.line {
						t.Errorf("%v: line %d, want %d", e, e.Line, tc.line)
					}
					if strings.Contains(e.Msg, "c2hvcnQ") || strings.Contains(e.Msg, "hunter2") {
						t.Errorf("a secret is repeated in %q", e.Msg)
					}
					return
				}
			}
			t.Errorf("errors %v, want one containing %q", es, tc.want)
		})
	}
}

// A flow publishes through the built-in destination endpoints: type and
// data become the effect's body; request fields do not apply.
func TestFlowPublishes(t *testing.T) {
	flow := func(effect string) string {
		return flowBase + `  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.revision}
    state: event
    effects:
` + effect
	}
	c, err := Parse("f.yaml", []byte(flow("      - name: tell\n        destination: endpoints\n        type: order.updated\n        data: 'state'\n")), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	var found *Destination
	for i := range c.Destinations {
		if c.Destinations[i].Name == publishDestination {
			found = &c.Destinations[i]
		}
	}
	if found == nil || found.Kind != KindPublish || !found.Builtin {
		t.Fatalf("built-in destination %+v", found)
	}
	if b := c.Flows[0].Effects[0].Request.Body; !strings.Contains(b, `"type": "order.updated"`) || !strings.Contains(b, "(state)") {
		t.Fatalf("body %q", b)
	}
	for _, tc := range []struct{ effect, want string }{
		{"      - name: tell\n        destination: endpoints\n        data: 'state'\n", "a message type"},
		{"      - name: tell\n        destination: endpoints\n        type: order.updated\n", "data is required"},
		{"      - name: tell\n        destination: endpoints\n        type: order.updated\n        data: 'state'\n        request: {path: '\"/x\"'}\n", "takes type and data"},
		{"      - name: tell\n        destination: crm\n        type: order.updated\n        request: {path: '\"/x\"'}\n", "apply to destination endpoints only"},
	} {
		_, err := Parse("f.yaml", []byte(flow(tc.effect)+"destinations:\n  - {name: crm, base_url: \"https://crm.example\"}\n"), env(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.effect, err, tc.want)
		}
	}
}
