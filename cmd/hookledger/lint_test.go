package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const lintHeader = "flow_id,method,creates_records,side_effect,idempotency_key,ledger_retention_days,max_replay_window_days,retry_layers,retry_after_unit,inbound_webhook,ack_p99_seconds,sender_timeout_seconds\n"

// runMain runs the binary's Main in-process and returns exit code, stdout
// and stderr.
func runMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	env := &Env{
		Stdin:     strings.NewReader(""),
		Stdout:    &stdout,
		Stderr:    &stderr,
		Getenv:    func(string) string { return "" },
		LookupEnv: func(string) (string, bool) { return "", false },
	}
	code := Main(context.Background(), args, env)
	return code, stdout.String(), stderr.String()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLintExitCodes(t *testing.T) {
	clean := writeFile(t, "clean.csv", lintHeader+
		"billing_to_crm,custom,yes,upsert_deal,billing_to_crm+subscription_id+revision,90,30,worker:6,seconds,yes,1,5\n")
	warnOnly := writeFile(t, "warn.csv", lintHeader+
		"billing_to_crm,custom,yes,upsert_deal,billing_to_crm+subscription_id+revision,90,30,,seconds,yes,1,5\n")
	failing := writeFile(t, "fail.csv", lintHeader+
		"billing_to_crm,custom,yes,upsert_deal,,90,30,worker:6,seconds,yes,1,5\n")
	badValue := writeFile(t, "bad.csv", lintHeader+
		"billing_to_crm,custom,yes,upsert_deal,,90,30,worker:6,seconds,yes,1,5\n"+
		"other,custom,maybe,upsert_deal,k,90,30,worker:6,seconds,yes,1,5\n")
	yamlFail := writeFile(t, "inv.yml", "- flow_id: a\n  method: ipaas\n  creates_records: yes\n  side_effect: mail\n  idempotency_key: a+retry\n  ledger_retention_days: 1\n  max_replay_window_days: 1\n  retry_layers: none\n  retry_after_unit: seconds\n  inbound_webhook: no\n  ack_p99_seconds:\n  sender_timeout_seconds:\n")
	unknownExt := writeFile(t, "inv.txt", lintHeader)
	emptyCSV := writeFile(t, "empty.csv", "")

	tests := []struct {
		name     string
		args     []string
		code     int
		stdout   string
		stderr   string
		noStdout bool
		noStderr bool
	}{
		{name: "clean inventory", args: []string{"lint", clean}, code: 0, stdout: "summary: 0 fail, 0 warn, 6 pass", noStderr: true},
		{name: "warnings pass without strict", args: []string{"lint", warnOnly}, code: 0, stdout: "summary: 0 fail, 1 warn, 5 pass"},
		{name: "warnings fail with strict", args: []string{"lint", "--strict", warnOnly}, code: 1, stdout: "1 warn"},
		{name: "flags after the file", args: []string{"lint", warnOnly, "--strict", "--format", "markdown"}, code: 1, stdout: "**Summary:** 0 fail, 1 warn, 5 pass"},
		{name: "strict on a clean file", args: []string{"lint", "--strict", clean}, code: 0},
		{name: "FAIL exits 1", args: []string{"lint", failing}, code: 1, stdout: "FAIL   billing_to_crm  IP01"},
		{name: "yaml FAIL", args: []string{"lint", "--format=json", yamlFail}, code: 1, stdout: `"rule": "IP02"`},
		{name: "invalid value exits 2 and keeps findings", args: []string{"lint", badValue}, code: 2,
			stdout: "FAIL   billing_to_crm  IP01", stderr: badValue + `:3: column creates_records: got "maybe", expected yes or no`},
		{name: "json carries the errors", args: []string{"lint", "--format", "json", badValue}, code: 2, stdout: `"errors": [`},
		{name: "unknown extension", args: []string{"lint", unknownExt}, code: 2, stderr: `unknown inventory type ".txt"`, noStdout: true},
		{name: "missing file", args: []string{"lint", filepath.Join(t.TempDir(), "nope.csv")}, code: 2, stderr: "no such file", noStdout: true},
		{name: "empty file", args: []string{"lint", emptyCSV}, code: 2, stderr: "the file is empty", noStdout: true},
		{name: "no file", args: []string{"lint"}, code: 2, stderr: "expected one inventory FILE", noStdout: true},
		{name: "two files", args: []string{"lint", clean, clean}, code: 2, stderr: "got 2 arguments"},
		{name: "bad format", args: []string{"lint", "--format", "xml", clean}, code: 2, stderr: `unknown format "xml"`, noStdout: true},
		{name: "unknown flag", args: []string{"lint", "--stric", clean}, code: 2, stderr: "flag provided but not defined: -stric", noStdout: true},
		{name: "help", args: []string{"lint", "--help"}, code: 0, stdout: "Usage: hookledger lint [--format text|json|sarif|markdown] [--strict] FILE", noStderr: true},
		{name: "help lists flags", args: []string{"lint", "-h"}, code: 0, stdout: "-strict"},
		{name: "config has no flows", args: []string{"lint", "--config", filepath.Join("..", "..", "hookledger.yaml")}, code: 2, stderr: "defines no flows", noStdout: true},
		{name: "config is not a config", args: []string{"lint", "--config", clean}, code: 2, stderr: "clean.csv:1", noStdout: true},
		{name: "config missing", args: []string{"lint", "--config", filepath.Join(t.TempDir(), "hookledger.yaml")}, code: 2, stderr: "no such file"},
		{name: "config and file", args: []string{"lint", "--config", clean, clean}, code: 2, stderr: "not both"},
		{name: "double dash", args: []string{"lint", "--strict", "--", warnOnly}, code: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runMain(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout, stderr)
			}
			if !strings.Contains(stdout, tt.stdout) {
				t.Errorf("stdout does not contain %q:\n%s", tt.stdout, stdout)
			}
			if !strings.Contains(stderr, tt.stderr) {
				t.Errorf("stderr does not contain %q:\n%s", tt.stderr, stderr)
			}
			if tt.noStdout && stdout != "" {
				t.Errorf("unexpected stdout:\n%s", stdout)
			}
			if tt.noStderr && stderr != "" {
				t.Errorf("unexpected stderr:\n%s", stderr)
			}
			if strings.Contains(stdout, "\x1b[") {
				t.Error("colour codes written to a non-terminal")
			}
		})
	}
}

func TestLintJSONShape(t *testing.T) {
	path := writeFile(t, "inv.csv", lintHeader+
		"a,custom,yes,upsert_deal,,90,30,sdk:3;worker:5,,yes,4,5\n")
	code, stdout, _ := runMain(t, "lint", "--format", "json", path)
	if code != 1 {
		t.Fatalf("exit %d", code)
	}
	var out struct {
		Findings []map[string]any `json:"findings"`
		Summary  map[string]int   `json:"summary"`
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	if err := dec.Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.Summary["fail"] != 3 || out.Summary["warn"] != 1 || out.Summary["pass"] != 1 {
		t.Errorf("summary = %v", out.Summary)
	}
	for _, f := range out.Findings {
		for _, k := range []string{"flow", "rule", "level", "message"} {
			if _, ok := f[k].(string); !ok {
				t.Errorf("finding %v lacks string %q", f, k)
			}
		}
	}
}

func TestVendors(t *testing.T) {
	code, stdout, stderr := runMain(t, "vendors")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	for _, want := range []string{
		"stripe: Stripe webhooks (webhook sender)\n  read 2026-11-06 from docs.stripe.com/webhooks\n",
		"  manual resend window   30 days\n",
		"hubspot-workflow: HubSpot workflow webhook action",
		"  Retry-After honoured   milliseconds\n",
		"pipedrive: Pipedrive webhooks v2",
		"  ack timeout            10 s\n",
		"  retry window           24 hours, 17 retries\n",
		"zapier: Zapier (iPaaS)",
		"  replay window          60 days\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("text output lacks %q", want)
		}
	}

	code, stdout, _ = runMain(t, "vendors", "--format", "json")
	if code != 0 {
		t.Fatalf("json: exit %d", code)
	}
	var out struct {
		Vendors []map[string]any `json:"vendors"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatal(err)
	}
	byName := map[string]map[string]any{}
	for _, v := range out.Vendors {
		if v["read"] == nil || v["source"] == nil {
			t.Errorf("vendor %v lacks read date or source", v["name"])
		}
		byName[v["name"].(string)] = v
	}
	checks := []struct {
		vendor, field string
		want          float64
	}{
		{"stripe", "retry_window_seconds", 3 * 86400},
		{"stripe", "manual_resend_window_seconds", 30 * 86400},
		{"stripe", "idempotency_key_window_seconds", 86400},
		{"hubspot-app", "ack_timeout_seconds", 5},
		{"klaviyo-system", "ack_timeout_seconds", 5},
		{"zapier", "replay_window_seconds", 60 * 86400},
		{"segment", "dedupe_window_seconds", 86400},
		{"meta", "dedupe_window_seconds", 48 * 3600},
	}
	for _, c := range checks {
		if got, _ := byName[c.vendor][c.field].(float64); got != c.want {
			t.Errorf("%s %s = %v, want %v", c.vendor, c.field, got, c.want)
		}
	}

	if code, _, _ := runMain(t, "vendors", "--format", "xml"); code != 2 {
		t.Errorf("--format xml: exit %d, want 2", code)
	}
	if code, stdout, _ := runMain(t, "vendors", "--help"); code != 0 || !strings.Contains(stdout, "Usage: hookledger vendors") {
		t.Errorf("--help: exit %d, stdout %q", code, stdout)
	}
}

// vendors NAME... prints only the vendors named (by name or alias, in any
// case), each once; an unknown name is a usage error that lists the known.
func TestVendorsByName(t *testing.T) {
	code, stdout, stderr := runMain(t, "vendors", "STRIPE", "zapier", "stripe")
	if code != 0 || stderr != "" || strings.Count(stdout, "\n\n") != 1 ||
		!strings.HasPrefix(stdout, "stripe: Stripe webhooks") || !strings.Contains(stdout, "\nzapier: Zapier") {
		t.Fatalf("vendors STRIPE zapier stripe: %d %q %q", code, stdout, stderr)
	}
	code, stdout, _ = runMain(t, "vendors", "--format", "json", "pipedrive")
	var out struct{ Vendors []struct{ Name string } }
	if err := json.Unmarshal([]byte(stdout), &out); code != 0 || err != nil || len(out.Vendors) != 1 || out.Vendors[0].Name != "pipedrive" {
		t.Fatalf("json pipedrive: %d %v %s", code, err, stdout)
	}
	code, stdout, stderr = runMain(t, "vendors", "stripe", "acme\x1b[2J", "nope")
	if code != 2 || stdout != "" || !strings.Contains(stderr, `unknown vendors "acme\x1b[2J", "nope"; known vendors: `) ||
		!strings.Contains(stderr, "stripe") || !strings.Contains(stderr, "zapier") || strings.Contains(stderr, "\x1b") {
		t.Fatalf("unknown vendors: %d %q %q", code, stdout, stderr)
	}
}

// lint --config derives one inventory row per configured flow.
func TestLintConfigFlows(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "hookledger.yaml")
	if err := os.WriteFile(cfg, []byte(`sources:
  - name: stripe
    kind: stripe
    secrets: [whsec_x]
  - name: partner
    kind: hmac
    secrets: [partner-secret]
    hmac: {header: X-Signature}
flows:
  - name: partner_to_crm
    source: partner
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.rev}
    effects:
      - name: upsert_deal
        destination: crm
        request: {path: '"/deals"'}
  - name: billing_to_crm
    source: stripe
    events: ["customer.subscription.*"]
    entity: event.data.object.id
    version:
      mode: occurred_at
      tie_break: meta.event_id
    effects:
      - name: upsert_deal
        destination: crm
        request: {path: '"/deals"'}
destinations:
  - name: crm
    base_url: https://crm.example
    retry: {attempts: 6}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runMain(t, "lint", "--format", "json", "--config", cfg)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "OR01") {
		t.Errorf("the config's load-time warning is not shown: %s", stderr)
	}
	var rep struct {
		Findings []struct{ Flow, Rule, Level string }
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	// A config cannot hold the acknowledgement latency nor a replay
	// window (a generic kind has no contract): the engine's design
	// answers both, and neither is a warning to fill a column.
	got := map[string]string{}
	for _, f := range rep.Findings {
		got[f.Flow+" "+f.Rule] = f.Level
	}
	for _, flow := range []string{"billing_to_crm", "partner_to_crm"} {
		for rule, level := range map[string]string{"IP01": "PASS", "IP02": "PASS", "IP03": "PASS", "RT01": "PASS", "WH01": "PASS"} {
			if got[flow+" "+rule] != level {
				t.Errorf("%s %s = %q, want %s (findings %v)", flow, rule, got[flow+" "+rule], level, got)
			}
		}
	}
}

// The inventory examples of docs/lint.md run exactly as written: both exit
// 0 with one WARN, and the YAML one reports no missing column.
func TestLintDocsExamples(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "lint.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, lang := range []string{"csv", "yaml"} {
		_, rest, ok := strings.Cut(string(data), "\n```"+lang+"\n")
		body, _, ok2 := strings.Cut(rest, "\n```\n")
		if !ok || !ok2 {
			t.Fatalf("docs/lint.md has no ```%s block", lang)
		}
		path := writeFile(t, "inventory."+lang, body+"\n")
		code, out, errOut := runMain(t, "lint", path)
		if code != 0 || errOut != "" || !strings.Contains(out, "summary: 0 fail, 1 warn, 5 pass") {
			t.Errorf("lint inventory.%s: exit %d, stdout %q, stderr %q; want exit 0, no errors, 0 fail 1 warn 5 pass", lang, code, out, errOut)
		}
	}
}

// An inventory is untrusted: control characters in a flow name reach the
// terminal escaped in text and markdown, and as JSON escapes in JSON.
func TestLintEscapesControlCharacters(t *testing.T) {
	path := writeFile(t, "evil.csv", "flow_id,method,creates_records,side_effect,idempotency_key,ledger_retention_days,max_replay_window_days,retry_layers,retry_after_unit,inbound_webhook,ack_p99_seconds,sender_timeout_seconds,sources,owner\n"+
		"\"evil\x1b[2J\x1b]0;pwned\x07\",custom,yes,email,,,,,,no,,,stripe,ops\n")
	for _, format := range []string{"text", "markdown"} {
		_, stdout, _ := runMain(t, "lint", "--format", format, path)
		if strings.ContainsAny(stdout, "\x1b\x07") {
			t.Errorf("%s output carries raw control characters: %q", format, stdout)
		}
		// Markdown escapes the backslashes again for its own syntax.
		if format == "text" && !strings.Contains(stdout, `evil\x1b[2J\x1b]0;pwned\x07`) {
			t.Errorf("%s output does not show the escaped name: %q", format, stdout)
		}
	}
}
