package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"net/http"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/openapi/openapitest"
	"github.com/hookledger/hookledger/internal/signature"
)

func run(t *testing.T, stdin string, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, &Env{
		Stdin:  strings.NewReader(stdin),
		Stdout: &out,
		Stderr: &errb,
		Getenv: func(k string) string { return env[k] },
		LookupEnv: func(k string) (string, bool) {
			v, ok := env[k]
			return v, ok
		},
		Transport: openapitest.Transport(t, nil),
	})
	return code, out.String(), errb.String()
}

func TestHelpOnEveryVerb(t *testing.T) {
	code, out, _ := run(t, "", nil, "--help")
	if code != 0 || !strings.Contains(out, "serve") {
		t.Fatalf("hookledger --help: %d %s", code, out)
	}
	seen := map[string]bool{}
	for _, c := range verbs {
		name := c.name
		if seen[name] {
			t.Errorf("verb %s is listed twice", name)
		}
		seen[name] = true
		if !strings.Contains(out, "  "+name+" ") {
			t.Errorf("hookledger --help does not list %s", name)
		}
		code, out, errOut := run(t, "", nil, name, "--help")
		if code != 0 || !strings.Contains(out, "Usage: hookledger "+name) || errOut != "" {
			t.Errorf("%s --help: exit %d, stdout %q, stderr %q; want usage on stdout and exit 0", name, code, out, errOut)
		}
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"nosuchverb"},
		{"serve", "--nosuchflag"},
		{"serve", "extra-arg"},
		{"migrate", "--config"},
		{"sign", "--config", filepath.Join("..", "..", "hookledger.yaml")},
		{"sign", "--config", filepath.Join("..", "..", "hookledger.yaml"), "--source", "nosuch"},
		{"version", "x"},
	} {
		if code, _, _ := run(t, "", nil, args...); code != 2 {
			t.Errorf("hookledger %v: exit %d, want 2", args, code)
		}
	}
}

// Each config mistake exits 2 with a message naming file and line.
func TestConfigMistakesExit2WithFileAndLine(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, yaml, want string
	}{
		{"unknown key", "listen: 127.0.0.1:0\nstorre: sqlite:x.db\n", ":2:"},
		{"bad duration", "sources:\n  - name: s\n    kind: stripe\n    secrets: [whsec_x]\n    tolerance: five minutes\n", ":5:"},
		{"missing env var", "admin:\n  token: ${HOOKLEDGER_TEST_UNSET_VAR}\n", ":2:"},
		{"duplicate source", "sources:\n  - name: s\n    kind: stripe\n    secrets: [whsec_x]\n  - name: s\n    kind: stripe\n    secrets: [whsec_y]\n", ":5:"},
		{"unknown kind", "sources:\n  - name: s\n    kind: paypal\n    secrets: [x]\n", ":3:"},
		{"bad standard-webhooks secret", "sources:\n  - name: s\n    kind: standard-webhooks\n    secrets: [not-a-whsec]\n", ":4:"},
	}
	for _, tc := range cases {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".yaml")
		if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, verb := range []string{"serve", "migrate"} {
			code, _, errOut := run(t, "", nil, verb, "--config", path)
			if code != 2 || !strings.Contains(errOut, path+tc.want) {
				t.Errorf("%s (%s): exit %d, stderr %q; want exit 2 naming %s%s", tc.name, verb, code, errOut, path, tc.want)
			}
		}
	}
	code, _, errOut := run(t, "", nil, "serve", "--config", filepath.Join(dir, "absent.yaml"))
	if code != 2 || !strings.Contains(errOut, "absent.yaml") {
		t.Errorf("absent config: exit %d %q", code, errOut)
	}
}

func TestMigrateThenUpToDate(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "h.yaml")
	if err := os.WriteFile(cfg, []byte("store: sqlite:"+filepath.Join(dir, "db", "h.db")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "", nil, "migrate", "--config", cfg)
	if code != 0 || !strings.Contains(out, "applied 0001_inbox") {
		t.Fatalf("first migrate: %d %q %q", code, out, errOut)
	}
	code, out, _ = run(t, "", nil, "migrate", "--config", cfg)
	if code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("second migrate: %d %q", code, out)
	}
}

func TestSignPrintsVerifiableHeaders(t *testing.T) {
	cfg := filepath.Join("..", "..", "hookledger.yaml")
	code, out, errOut := run(t, `{"id":"evt_1"}`, nil, "sign", "--config", cfg, "--source", "app", "--event-id", "msg_42", "-")
	if code != 0 {
		t.Fatalf("sign: %d %s", code, errOut)
	}
	if !strings.Contains(out, "Webhook-Id: msg_42\n") || !strings.Contains(out, "Webhook-Signature: v1,") || !strings.Contains(out, "Webhook-Timestamp: ") {
		t.Fatalf("sign output %q", out)
	}
	// The printed headers verify against the same source's scheme.
	hdr := http.Header{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		hdr.Add(k, v)
	}
	c, err := config.Load(cfg, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := signature.New(c.Sources[2].SchemeOptions())
	if err != nil {
		t.Fatal(err)
	}
	req := &signature.Request{Method: "POST", URL: "http://127.0.0.1:8080/hooks/app", Header: hdr, Body: []byte(`{"id":"evt_1"}`)}
	if err := scheme.Verify(req, time.Now()); err != nil {
		t.Fatalf("signed headers do not verify: %v", err)
	}
	req.Body = []byte(`{"id":"evt_2"}`)
	if err := scheme.Verify(req, time.Now()); err == nil {
		t.Fatal("signature verified a different body")
	}
}

// hookledger --version is hookledger version.
func TestVersionFlag(t *testing.T) {
	_, want, _ := run(t, "", nil, "version")
	code, out, errOut := run(t, "", nil, "--version")
	if code != exitOK || out != want || errOut != "" {
		t.Errorf("--version: exit %d %q %q; want %q as version prints", code, out, errOut, want)
	}
}

// Flags are shown with two dashes, as the docs and examples write them
// (the flag package takes both, and prints one).
func TestHelpShowsTwoDashes(t *testing.T) {
	for _, c := range verbs {
		_, out, _ := run(t, "", nil, c.name, "--help")
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "  --") {
				t.Errorf("%s --help shows a flag with one dash: %q", c.name, line)
			}
		}
	}
	_, out, _ := run(t, "", nil, "status", "--help")
	if !strings.Contains(out, "  --config file\n") {
		t.Errorf("status --help lacks --config:\n%s", out)
	}
}

// A mistyped verb is answered with the nearest one.
func TestUnknownVerbSuggestsTheNearest(t *testing.T) {
	for typo, want := range map[string]string{"stauts": "status", "efects": "effects", "serv": "serve", "lnit": "lint"} {
		code, _, errOut := run(t, "", nil, typo)
		if code != exitUsage || !strings.Contains(errOut, `unknown verb "`+typo+`": did you mean "`+want+`"?`) {
			t.Errorf("%s: exit %d %q; want a suggestion of %s", typo, code, errOut, want)
		}
	}
	if _, _, errOut := run(t, "", nil, "frobnicate"); strings.Contains(errOut, "did you mean") {
		t.Errorf("a word near no verb got a suggestion: %q", errOut)
	}
}
