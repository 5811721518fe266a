package config

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/expr"
)

const flowBase = `sources:
  - name: shop
    kind: hmac
    secrets: [s3cret]
    hmac: {header: X-Sig}
    api:
      base_url: https://api.shop.example
      bearer_token: tok
  - name: stripe
    kind: stripe
    secrets: [whsec_x]
flows:
`

func TestFlowsCompile(t *testing.T) {
	c, err := Parse("f.yaml", []byte(flowBase+`  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version:
      mode: revision
      revision: event.revision
    state: event.state
    effects:
      - name: notify_created
        when: state == "CREATED"
        destination: crm
        request:
          path: '"/notes"'
          body: '{"order": entity}'
  - name: orders_refetch
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version:
      mode: refetch
      path: '"/orders/" + entity'
      hash: [object.status, object.total]
destinations:
  - {name: crm, base_url: "https://crm.example"}
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	f := c.Flows[0]
	if f.Compiled == nil || f.Compiled.Entity == nil || f.Compiled.Revision == nil || len(f.Compiled.Effects) != 1 || f.Compiled.Effects[0].Path == nil {
		t.Fatalf("flow not compiled: %+v", f.Compiled)
	}
	if f.Effects[0].Request.Method != "POST" || f.Effects[0].Operation != "set" {
		t.Errorf("effect defaults: %+v", f.Effects[0])
	}
	if c.Flows[1].State != "object" || len(c.Flows[1].Compiled.Hash) != 2 {
		t.Errorf("refetch defaults: state %q hash %d", c.Flows[1].State, len(c.Flows[1].Compiled.Hash))
	}
	if c.Causation.Header != defaultCausationHeader || c.Causation.MaxHops != defaultMaxHops {
		t.Errorf("causation defaults: %+v", c.Causation)
	}
}

func TestFlowErrors(t *testing.T) {
	cases := []struct {
		name, flow string
		line       int
		want       string
	}{
		{"unknown source", "  - name: a\n    source: nope\n    events: [x]\n    entity: event.id\n    version: {mode: revision, revision: event.r}\n", 14, "no source named"},
		{"bad CEL", "  - name: a\n    source: shop\n    events: [x]\n    entity: event.id +\n    version: {mode: revision, revision: event.r}\n", 16, "entity"},
		{"IP02 arrival data", "  - name: a\n    source: shop\n    events: [x]\n    entity: event.id + string(meta.received_at)\n    version: {mode: revision, revision: event.r}\n", 16, "IP02"},
		{"IP02 version", "  - name: a\n    source: shop\n    events: [x]\n    entity: event.id\n    version:\n      mode: revision\n      revision: meta.attempt\n", 19, "IP02"},
		{"IP06 increment", "  - name: a\n    source: shop\n    events: [x]\n    entity: event.id\n    version: {mode: revision, revision: event.r}\n    effects:\n      - name: bump\n        destination: crm\n        operation: increment\n        request: {path: '\"/x\"'}\n", 21, "IP06"},
		{"refetch without api", "  - name: a\n    source: stripe\n    events: [x]\n    entity: event.id\n    version: {mode: refetch, path: '\"/x\"', field: object.v}\n", 14, "api.base_url"},
		{"unknown mode", "  - name: a\n    source: shop\n    events: [x]\n    entity: event.id\n    version:\n      mode: latest\n", 18, "unknown version.mode"},
		{"duplicate flow", "  - name: a\n    source: shop\n    events: [x]\n    entity: event.id\n    version: {mode: revision, revision: event.r}\n  - name: a\n    source: shop\n    events: [x]\n    entity: event.id\n    version: {mode: revision, revision: event.r}\n", 18, "duplicate flow name"},
		{"bad glob", "  - name: a\n    source: shop\n    events: [\"order.[\"]\n    entity: event.id\n    version: {mode: revision, revision: event.r}\n", 15, "glob"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(flowBase+tc.flow), env(nil))
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("err = %v, want config errors", err)
			}
			if es[0].Line != tc.line || !strings.Contains(es[0].Msg, tc.want) {
				t.Errorf("got %v, want line %d containing %q", es[0], tc.line, tc.want)
			}
		})
	}
}

func TestOccurredAtOnStripeWarns(t *testing.T) {
	c, err := Parse("f.yaml", []byte(flowBase+"  - name: a\n    source: stripe\n    events: [\"invoice.*\"]\n    entity: event.data.object.id\n    version:\n      mode: occurred_at\n      tie_break: meta.event_id\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0].Msg, "seconds") || c.Warnings[0].Line != 18 {
		t.Fatalf("warnings = %v, want the seconds warning at line 18", c.Warnings)
	}
}

// An effect whose destination is not configured could never be delivered
// and would wait in approved forever, out of the exception queue's sight:
// it is a load error at the effect's line, like an unknown source.
func TestUnknownDestinationIsAnError(t *testing.T) {
	_, err := Parse("f.yaml", []byte(flowBase+`  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.revision}
    effects:
      - name: notify
        destination: crmm
destinations:
  - {name: crm, base_url: "https://crm.example"}
`), env(nil))
	if err == nil || !strings.Contains(err.Error(), "f.yaml:20:22:") || !strings.Contains(err.Error(), `no destination named "crmm" is configured (destinations: crm)`) {
		t.Fatalf("err = %v, want the effect's line and the known destinations", err)
	}
}

// What the request builder would refuse on every call is refused at load,
// with its line: a query string or a climb written into a path, a header
// value that would start another header.
func TestRequestChecksAtLoad(t *testing.T) {
	effect := func(request string) string {
		return "  - name: a\n    source: shop\n    events: [x]\n    entity: event.id\n    version: {mode: revision, revision: event.r}\n    effects:\n      - name: e\n        destination: crm\n        request:\n" + request
	}
	cases := []struct {
		name, yaml string
		line       int
		want       string
	}{
		{"constant path with a query", flowBase + effect("          path: '\"/deals?idProperty=x\"'\n"), 22, "query:"},
		{"query written after payload data", flowBase + effect("          path: '\"/deals/\" + entity + \"?idProperty=x\"'\n"), 22, "pathEscape"},
		{"constant path climbing", flowBase + effect("          path: '\"/deals/../admin\"'\n"), 22, "dot segment"},
		{"constant path naming a host", flowBase + effect("          path: '\"//evil.example/x\"'\n"), 22, "another host"},
		{"query not a map", flowBase + effect("          path: '\"/deals\"'\n          query: '\"a=1\"'\n"), 23, "map of query parameters"},
		{"header with CRLF", flowBase + effect("          path: '\"/deals\"'\n          headers: {X-Order: '\"a\\r\\nX-Admin: 1\"'}\n"), 23, "control character"},
		{"bad header name", flowBase + effect("          path: '\"/deals\"'\n          headers: {'X Order': entity}\n"), 23, "header name"},
		{"refetch path with a query", flowBase + "  - name: a\n    source: shop\n    events: [x]\n    entity: event.id\n    version: {mode: refetch, path: '\"/orders/\" + pathEscape(entity) + \"?expand=items\"', field: object.v}\n", 17, "query:"},
		{"query outside refetch", flowBase + "  - name: a\n    source: shop\n    events: [x]\n    entity: event.id\n    version: {mode: revision, revision: event.r, query: '{\"a\": \"b\"}'}\n", 17, "version.query"},
		{"api header with CRLF", strings.Replace(flowBase, "      bearer_token: tok\n", "      bearer_token: tok\n      headers: {X-Api-Key: \"k\\r\\nX-Admin: 1\"}\n", 1), 9, "CR or LF"},
		{"api token with a newline", strings.Replace(flowBase, "bearer_token: tok", "bearer_token: \"tok\\n\"", 1), 8, "trailing newline"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tc.yaml), env(nil))
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("err = %v, want config errors", err)
			}
			if es[0].Line != tc.line || !strings.Contains(es[0].Msg, tc.want) {
				t.Errorf("got %v, want line %d containing %q", es[0], tc.line, tc.want)
			}
		})
	}
	// Escaped payload data and a query map load.
	c, err := Parse("f.yaml", []byte(flowBase+effect("          path: '\"/deals/\" + pathEscape(entity)'\n          query: '{\"idProperty\": \"stripe_id\", \"v\": event.v}'\n")+
		"destinations:\n  - {name: crm, base_url: \"https://crm.example\"}\n"), env(nil))
	if err != nil || c.Flows[0].Compiled.Effects[0].Query == nil {
		t.Fatalf("escaped path and query map: %v", err)
	}
}

// The example in docs/flows.md loads as written, with its variables set.
func TestFlowsDocExampleLoads(t *testing.T) {
	doc, err := os.ReadFile("../../docs/flows.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "## Example\n\n```yaml\n")
	if !ok {
		t.Fatal("docs/flows.md has no ## Example yaml block")
	}
	example, _, _ := strings.Cut(rest, "```")
	vars := map[string]string{"SHOP_WEBHOOK_SECRET": "s3cret", "SHOP_API_TOKEN": "tok"}
	c, err := Parse("docs/flows.md", []byte(example), env(vars))
	if err != nil {
		t.Fatalf("the docs example does not load: %v", err)
	}
	if len(c.Flows) != 1 || c.Flows[0].Compiled.When == nil {
		t.Fatalf("example flows: %+v", c.Flows)
	}
	// Its when holds for an event without a channel and for a live one,
	// and refuses a test event, instead of failing on the missing field.
	for body, want := range map[string]bool{`{}`: true, `{"channel": "web"}`: true, `{"channel": "test"}`: false} {
		var ev any
		if err := json.Unmarshal([]byte(body), &ev); err != nil {
			t.Fatal(err)
		}
		got, err := c.Flows[0].Compiled.When.EvalBool(expr.Vars{expr.VarEvent: ev})
		if err != nil || got != want {
			t.Errorf("when on %s = %v (%v), want %v", body, got, err, want)
		}
	}
}

// processing.linger is a wait added on purpose: from 0 (the default, no
// wait) to MaxLinger; anything else names the key and its line.
func TestProcessingLinger(t *testing.T) {
	cfg, err := Parse("conf.yaml", []byte("processing:\n  linger: 50ms\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Processing.Linger.D() != 50*time.Millisecond {
		t.Errorf("linger %s, want 50ms", cfg.Processing.Linger.D())
	}
	if cfg, err = Parse("conf.yaml", []byte("listen: 127.0.0.1:8080\n"), env(nil)); err != nil || cfg.Processing.Linger != 0 {
		t.Errorf("default linger %s (%v), want none", cfg.Processing.Linger.D(), err)
	}
	for _, tc := range []struct{ name, yaml string }{
		{"negative", "processing:\n  linger: -1ms\n"},
		{"over a second", "processing:\n  linger: 1001ms\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("conf.yaml", []byte(tc.yaml), env(nil))
			var ces Errors
			if !errors.As(err, &ces) || ces[0].Line != 2 || !strings.Contains(err.Error(), "processing.linger must be from 0 to 1s") {
				t.Errorf("got %v, want conf.yaml:2 naming processing.linger and its bounds", err)
			}
		})
	}
}
