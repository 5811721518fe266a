package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const githubYAML = `sources:
  - name: gh
    kind: github
    secrets: ["${GH_SECRET}"]
flows:
  - name: issues_to_crm
    source: gh
    events: ["issues"]
    entity: event.data.issue.number
    version:
      mode: occurred_at
      tie_break: meta.event_id
    effects:
      - name: upsert_ticket
        destination: crm
        request: {path: '"/tickets"'}
destinations:
  - name: crm
    base_url: https://crm.example
    retry: {attempts: 6}
`

func writeGitHubConfig(t *testing.T) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "hookledger.yaml")
	if err := os.WriteFile(cfg, []byte(githubYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// sign for a github source prints X-Hub-Signature-256 as GitHub computes
// it (checked with the standard library) and the event id in
// X-GitHub-Delivery.
func TestSignGitHub(t *testing.T) {
	cfg := writeGitHubConfig(t)
	body := `{"action":"opened"}`
	code, out, errOut := run(t, body, map[string]string{"GH_SECRET": "s3cret"}, "sign", "--config", cfg, "--source", "gh", "--event-id", "guid-1", "-")
	if code != 0 {
		t.Fatalf("sign: %d %s", code, errOut)
	}
	m := hmac.New(sha256.New, []byte("s3cret"))
	m.Write([]byte(body))
	h := parseHeaders(out)
	if h.Get("X-Hub-Signature-256") != "sha256="+hex.EncodeToString(m.Sum(nil)) || h.Get("X-GitHub-Delivery") != "guid-1" {
		t.Fatalf("sign printed %q", out)
	}
	if h.Get("X-Hub-Signature") != "" {
		t.Fatalf("sign printed a SHA-1 signature: %q", out)
	}
}

// vendors shows GitHub's contract, which the github kind declares.
func TestVendorsShowsKindContracts(t *testing.T) {
	code, out, errOut := run(t, "", nil, "vendors", "github")
	if code != 0 || !strings.Contains(out, "github: GitHub webhooks (webhook sender)") ||
		!strings.Contains(out, "ack timeout            10 s") || !strings.Contains(out, "manual resend window   3 days") {
		t.Fatalf("vendors github: %d %q %q", code, out, errOut)
	}
	code, out, _ = run(t, "", nil, "vendors", "--format", "json")
	var v struct{ Vendors []struct{ Name string } }
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("vendors json: %d %q", code, out)
	}
	var names []string
	for _, c := range v.Vendors {
		names = append(names, c.Name)
	}
	if !strings.Contains(strings.Join(names, ","), "github") {
		t.Fatalf("vendors json lacks github: %v", names)
	}
}

// lint --config takes a github flow's replay window and sender timeout from
// the kind's contract, without the secret being set.
func TestLintConfigReadsKindContract(t *testing.T) {
	cfg := writeGitHubConfig(t)
	code, stdout, stderr := runMain(t, "lint", "--format", "json", "--config", cfg)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "from the vendor catalogue: github manual resend window of 3 days") {
		t.Fatalf("lint --config did not use GitHub's contract:\n%s", stdout)
	}
}

// A kind without a built-in sample asks for a body instead of looking for
// a sample that does not exist.
func TestSendKindWithoutSample(t *testing.T) {
	cfg := writeGitHubConfig(t)
	code, _, errOut := run(t, "", map[string]string{"GH_SECRET": "s3cret"}, "send", "--config", cfg, "--source", "gh")
	if code != exitUsage || !strings.Contains(errOut, "kind github has no built-in sample; give a FILE") {
		t.Fatalf("send without sample: %d %q", code, errOut)
	}
}
