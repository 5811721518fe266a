package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// serve warns at start about each secret that came from a default written
// in the config, naming the variable and the field, never the value.
func TestServeWarnsAboutDefaultedSecrets(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, "h.yaml", `listen: 127.0.0.1:0
store: sqlite:`+filepath.Join(dir, "s.db")+`
admin:
  token: ${T_ADMIN:-demo-admin-value}
sources:
  - name: stripe
    kind: stripe
    secrets: [${T_STRIPE:-whsec_demo_value}, ${T_OLD}]
notifications:
  webhook_url: ${T_SLACK:-}
`)
	env := map[string]string{"T_OLD": "whsec_from_env"}
	_, errOut, stop := startVerb(t, env, "serve", "--config", cfg)
	waitUntil(t, "serve to start", func() bool { return strings.Contains(errOut.String(), "hookledger serving") })
	if code := stop(); code != 0 {
		t.Fatalf("serve stopped with %d:\n%s", code, errOut)
	}
	logs := errOut.String()
	for _, want := range []string{
		"level=WARN msg=\"secret taken from the default written in the config file",
		"variable=T_ADMIN field=admin.token at=" + cfg + ":4",
		"variable=T_STRIPE field=sources[0].secrets[0] at=" + cfg + ":8",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("serve logs lack %q:\n%s", want, logs)
		}
	}
	for _, never := range []string{"demo-admin-value", "whsec_demo_value", "whsec_from_env", "T_OLD", "T_SLACK"} {
		if strings.Contains(logs, never) {
			t.Errorf("serve logs name %q:\n%s", never, logs)
		}
	}
}
