package config

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// outcomeEffect is one flow with one effect whose extra lines are fields
// of the effect (indented by eight spaces); its first extra line is line 22.
func outcomeEffect(fields string) string {
	return flowBase + "  - name: a\n    source: shop\n    events: [x]\n    entity: event.id\n    version: {mode: revision, revision: event.r}\n" +
		"    effects:\n      - name: e\n        destination: crm\n        request: {path: '\"/x\"'}\n" + fields +
		"destinations:\n  - {name: crm, base_url: \"https://crm.example\"}\n"
}

func TestOutcomeFieldErrors(t *testing.T) {
	cases := []struct {
		name, fields string
		line         int
		want         string
	}{
		{"neither duration nor expression", "        deadline: 1d\n", 22, "neither a duration"},
		{"negative duration", "        deadline: -5m\n", 22, "positive duration"},
		{"zero duration", "        deadline: 0s\n", 22, "positive duration"},
		{"on_deadline unknown", "        deadline: 2h\n        on_deadline: retry\n", 23, `the only value is "dead"`},
		{"on_deadline without deadline", "        on_deadline: dead\n", 22, "on_deadline needs a deadline"},
		{"compensate_when without compensation", "        compensate_when: state.status == 'cancelled'\n", 22, "compensate_when needs a compensation"},
		{"compensate_when bad CEL", "        compensate_when: state.status ==\n        compensation: {path: '\"/x\"'}\n", 22, "compensate_when"},
		{"compensation without path", "        compensation:\n          method: DELETE\n", 23, "compensation.path is required"},
		{"compensation bad method", "        compensation: {method: ZAP, path: '\"/x\"'}\n", 22, "compensation.method"},
		{"compensation path with a query", "        compensation: {path: '\"/x?a=1\"'}\n", 22, "query:"},
		{"compensation header with CRLF", "        compensation:\n          path: '\"/x\"'\n          headers: {X-A: '\"a\\r\\nX-B: 1\"'}\n", 24, "control character"},
		{"compensation unknown key", "        compensation: {path: '\"/x\"', bdy: '{}'}\n", 22, "bdy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(outcomeEffect(tc.fields)), env(nil))
			if err == nil {
				t.Fatal("loaded, want an error")
			}
			first := err.Error()
			var es Errors
			if errors.As(err, &es) {
				first = es[0].Error()
			}
			if !strings.HasPrefix(first, fmt.Sprintf("f.yaml:%d:", tc.line)) || !strings.Contains(first, tc.want) {
				t.Errorf("got %v, want line %d containing %q", first, tc.line, tc.want)
			}
		})
	}
}

func TestOutcomeFieldsCompile(t *testing.T) {
	c, err := Parse("f.yaml", []byte(outcomeEffect("        deadline: 1h30m\n        on_deadline: dead\n"+
		"        compensate_when: state.status == 'cancelled' && previous.status != 'cancelled'\n"+
		"        compensation:\n          path: '\"/notes/\" + pathEscape(original.destination_ref)'\n          body: '{\"undo\": original.request.body}'\n")), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	ce := c.Flows[0].Compiled.Effects[0]
	if ce.DeadlineAfter != 90*time.Minute || ce.Deadline != nil {
		t.Errorf("deadline: after %v, expression %v; want 1h30m as a duration", ce.DeadlineAfter, ce.Deadline)
	}
	if ce.CompensateWhen == nil || ce.Compensation == nil || ce.Compensation.Path == nil || ce.Compensation.Body == nil {
		t.Fatalf("compensation not compiled: %+v", ce)
	}
	if c.Flows[0].Effects[0].Compensation.Method != "POST" {
		t.Errorf("compensation method default = %q, want POST", c.Flows[0].Effects[0].Compensation.Method)
	}
	if !c.Flows[0].Compiled.ReadsPrevious {
		t.Error("a flow with compensate_when must read the previous state")
	}

	// A value that is not a duration is an expression.
	c, err = Parse("f.yaml", []byte(outcomeEffect("        deadline: timestamp(event.due_at)\n")), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if ce := c.Flows[0].Compiled.Effects[0]; ce.Deadline == nil || ce.DeadlineAfter != 0 {
		t.Errorf("deadline expression: %+v", ce)
	}
}

func TestParseDeadline(t *testing.T) {
	for in, want := range map[string]bool{"30m": true, "2h": true, "1h30m": true, "90s": true, "1d": false,
		"meta.occurred_at + duration('2h')": false, "timestamp(event.due)": false, "": false} {
		if _, got := parseDeadline(in); got != want {
			t.Errorf("ParseDeadline(%q) duration = %v, want %v", in, got, want)
		}
	}
}

// The deadlines and compensation example in docs/flows.md loads as
// written, each field in the form the text says.
func TestOutcomesDocExampleLoads(t *testing.T) {
	c, err := Parse("docs/flows.md", []byte(docExample(t, "### Example: deadlines and compensation")),
		env(map[string]string{"HOOKLEDGER_ADMIN_TOKEN": "t", "SHOP_WEBHOOK_SECRET": "s3cret"}))
	if err != nil {
		t.Fatalf("the docs example does not load: %v", err)
	}
	confirm, invoice := c.Flows[0].Compiled.Effects[0], c.Flows[0].Compiled.Effects[1]
	if confirm.DeadlineAfter != 30*time.Minute || confirm.CompensateWhen == nil || confirm.Compensation == nil {
		t.Errorf("confirm: %+v", confirm)
	}
	if invoice.Deadline == nil || c.Flows[0].Effects[1].OnDeadline != onDeadlineDead || invoice.CompensateWhen != nil || invoice.Compensation == nil {
		t.Errorf("invoice: %+v", invoice)
	}
}

// docExample returns the yaml block under heading in docs/flows.md.
func docExample(t *testing.T, heading string) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/flows.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), heading+"\n\n```yaml\n")
	if !ok {
		t.Fatalf("docs/flows.md has no %q yaml block", heading)
	}
	example, _, _ := strings.Cut(rest, "```")
	return example
}
