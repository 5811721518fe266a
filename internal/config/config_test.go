package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

const good = `listen: 127.0.0.1:9090
store: sqlite:./data/test.db
admin:
  token: ${ADMIN_TOKEN}
sources:
  - name: stripe
    kind: stripe
    secrets: [${STRIPE_SECRET}, whsec_old]
    tolerance: 5m
    account: acct_123
  - name: crm
    kind: hubspot
    version: v3
    secrets: ["${HUBSPOT_SECRET:-demo}"]
`

func TestParseGood(t *testing.T) {
	c, err := Parse("hookledger.yaml", []byte(good), env(map[string]string{
		"ADMIN_TOKEN": "t0k", "STRIPE_SECRET": "whsec_new: with #yaml",
	}))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if c.Listen != "127.0.0.1:9090" || c.Admin.Token != "t0k" {
		t.Errorf("listen/token = %q/%q", c.Listen, c.Admin.Token)
	}
	if got := c.Sources[0].Secrets; len(got) != 2 || got[0] != "whsec_new: with #yaml" || got[1] != "whsec_old" {
		t.Errorf("stripe secrets = %q (expansion must not reinterpret YAML syntax)", got)
	}
	if c.Sources[0].ToleranceOrZero() != 5*time.Minute {
		t.Errorf("tolerance = %v", c.Sources[0].ToleranceOrZero())
	}
	if c.Sources[1].Secrets[0] != "demo" {
		t.Errorf("default expansion = %q", c.Sources[1].Secrets[0])
	}
	if c.Receive.MaxBodyBytes != DefaultMaxBodyBytes || c.Receive.RetryAfter.D() != defaultRetryAfter {
		t.Errorf("defaults not applied: %+v", c.Receive)
	}
}

func TestDefaultsWhenEmpty(t *testing.T) {
	c, err := Parse("x.yaml", []byte("# nothing\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != defaultListen || c.Store != defaultStore {
		t.Errorf("got %q %q", c.Listen, c.Store)
	}
}

// Each mistake must name the file and the line it is on.
func TestParseErrorsNameFileAndLine(t *testing.T) {
	cases := []struct {
		name, yaml string
		env        map[string]string
		line       int
		want       string
	}{
		{"unknown top key", "listen: 127.0.0.1:1\nlistne: x\n", nil, 2, "unknown field"},
		{"misspelt top key", "listen: 127.0.0.1:1\nsorces: []\n", nil, 2, `unknown field "sorces": did you mean "sources"?`},
		{"misspelt source key", "sources:\n  - name: a\n    kind: stripe\n    secrets: [x]\n    tolerence: 5m\n", nil, 5, `unknown field "tolerence": did you mean "tolerance"?`},
		{"misspelt nested key", "receive:\n  max_body_byte: 10\n", nil, 2, `unknown field "max_body_byte": did you mean "max_body_bytes"?`},
		{"unknown source key", "sources:\n  - name: a\n    kind: stripe\n    secrets: [x]\n    bogus: 1\n", nil, 5, "unknown field"},
		{"wrong type", "receive:\n  max_body_bytes: lots\n", nil, 2, ""},
		{"bad duration", "sources:\n  - name: a\n    kind: stripe\n    secrets: [x]\n    tolerance: 5x\n", nil, 5, "invalid duration"},
		{"missing env var", "admin:\n  token: ${NOT_SET_ANYWHERE}\n", nil, 2, "NOT_SET_ANYWHERE is not set"},
		{"duplicate source", "sources:\n  - name: a\n    kind: stripe\n    secrets: [x]\n  - name: a\n    kind: stripe\n    secrets: [y]\n", nil, 5, "duplicate source name"},
		{"unknown kind", "sources:\n  - name: a\n    kind: stripee\n    secrets: [x]\n", nil, 3, "unknown kind"},
		{"stripe zero tolerance", "sources:\n  - name: a\n    kind: stripe\n    secrets: [x]\n    tolerance: 0s\n", nil, 5, "tolerance of 0"},
		{"missing secrets", "sources:\n  - name: a\n    kind: stripe\n", nil, 2, "secrets is required"},
		{"hubspot bad version", "sources:\n  - name: a\n    kind: hubspot\n    version: v4\n    secrets: [x]\n", nil, 4, "not one of v3"},
		{"duplicate key", "listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\n", nil, 2, "already defined"},
		{"bad store", "store: mysql://x\n", nil, 1, "not supported"},
		{"syntax", "sources: [\n", nil, 1, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("conf.yaml", []byte(tc.yaml), env(tc.env))
			if err == nil {
				t.Fatal("expected an error")
			}
			msg := err.Error()
			var ce *Error
			var ces Errors
			line := 0
			switch {
			case errors.As(err, &ces):
				line = ces[0].Line
			case errors.As(err, &ce):
				line = ce.Line
			}
			if line != tc.line {
				t.Errorf("line = %d, want %d (%s)", line, tc.line, msg)
			}
			if !strings.HasPrefix(msg, "conf.yaml:") {
				t.Errorf("message does not start with the file name: %s", msg)
			}
			if tc.want != "" && !strings.Contains(msg, tc.want) {
				t.Errorf("message %q does not contain %q", msg, tc.want)
			}
		})
	}
}

func TestExpand(t *testing.T) {
	lookup := env(map[string]string{"A": "1", "EMPTY": ""})
	for in, want := range map[string]string{
		"${A}":          "1",
		"x${A}y${A}":    "x1y1",
		"${EMPTY:-d}":   "d",
		"${EMPTY}":      "",
		"${MISSING:-d}": "d",
		"$${A}":         "${A}",
		"plain":         "plain",
	} {
		got, _, err := expand(in, lookup)
		if err != nil || got != want {
			t.Errorf("expand(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"${MISSING}", "${A", "${1X}", "${}"} {
		if _, _, err := expand(bad, lookup); err == nil {
			t.Errorf("expand(%q) succeeded, want error", bad)
		}
	}
}

// The repository's quick-start config must load with no environment at all.
func TestQuickStartConfigLoads(t *testing.T) {
	path := filepath.Join("..", "..", "hookledger.yaml")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("quick-start config missing: %v", err)
	}
	c, err := Load(path, env(nil))
	if err != nil {
		t.Fatalf("quick-start config does not load without environment: %v", err)
	}
	if len(c.Sources) == 0 || c.Admin.Token == "" {
		t.Errorf("quick-start config should define sources and an admin token")
	}
}
