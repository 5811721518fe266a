package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
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

// The clock-skew test aid shifts the host clock by a Go duration and
// refuses anything else with exit 2.
func TestServeClockSkewEnv(t *testing.T) {
	env := func(vars map[string]string) *Env {
		return &Env{LookupEnv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok }}
	}
	c, err := hostClock(env(nil))
	if err != nil || c != (clock.Real{}) {
		t.Fatalf("unset: %v, %v; want the real clock", c, err)
	}
	c, err = hostClock(env(map[string]string{clockSkewEnv: "-90s"}))
	if err != nil || c != (clock.Shifted{Base: clock.Real{}, By: -90 * time.Second}) {
		t.Fatalf("-90s: %v, %v; want the real clock shifted by -90s", c, err)
	}

	cfg := writeFile(t, "h.yaml", "listen: 127.0.0.1:0\nstore: sqlite:"+filepath.Join(t.TempDir(), "s.db")+"\n")
	code, _, errOut := run(t, "", map[string]string{clockSkewEnv: "5 minutes"}, "serve", "--config", cfg)
	if code != exitUsage || !strings.Contains(errOut, clockSkewEnv) {
		t.Fatalf("exit %d, stderr %q; want 2 naming %s", code, errOut, clockSkewEnv)
	}
}

// serve on a port in use says so with what to do, before it touches the
// store: no database is created or migrated for a server that cannot run.
func TestServeOnAPortInUse(t *testing.T) {
	ln, _ := listenLocal(t)
	defer ln.Close()
	dir := t.TempDir()
	cfg := writeFile(t, "h.yaml", "listen: "+ln.Addr().String()+"\nstore: sqlite:"+filepath.Join(dir, "s.db")+"\n")
	code, _, errOut := run(t, "", nil, "serve", "--config", cfg)
	if code != exitFail || !strings.Contains(errOut, "cannot listen on "+ln.Addr().String()) ||
		!strings.Contains(errOut, "another hookledger or program is using it") || !strings.Contains(errOut, "listen: in "+cfg) {
		t.Errorf("serve on a port in use: exit %d %q", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "s.db")); err == nil {
		t.Error("serve created the database before finding the port taken")
	}
}

// serve names the console's URL when it starts, and says how to turn it
// on when it is off.
func TestServePrintsTheConsoleURL(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, "h.yaml", "listen: 127.0.0.1:0\nstore: sqlite:"+filepath.Join(dir, "s.db")+"\nadmin:\n  token: tok\n")
	_, errOut, stop := startVerb(t, nil, "serve", "--config", cfg)
	waitUntil(t, "serve to start", func() bool { return strings.Contains(errOut.String(), "hookledger serving") })
	if code := stop(); code != 0 {
		t.Fatalf("serve stopped with %d:\n%s", code, errOut)
	}
	if !regexp.MustCompile(`msg="console served" url=http://127\.0\.0\.1:\d+/`).MatchString(errOut.String()) {
		t.Errorf("serve does not name the console's URL:\n%s", errOut)
	}
}
