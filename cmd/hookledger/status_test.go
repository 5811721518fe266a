package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/signals"
	"github.com/hookledger/hookledger/internal/store"
)

func TestStatusUsage(t *testing.T) {
	cfg, _ := effectsConfig(t)
	for _, args := range [][]string{
		{"status", "--config", cfg, "--format", "xml"},
		{"status", "--config", cfg, "extra"},
		{"status", "--nosuchflag"},
		{"status", "--config", filepath.Join(t.TempDir(), "missing.yaml")},
	} {
		if code, _, errOut := run(t, "", nil, args...); code != exitUsage || errOut == "" {
			t.Errorf("hookledger %v: exit %d (%q), want 2 with a message", args, code, errOut)
		}
	}
	// A store that does not exist is a configuration that points nowhere,
	// never a silent ok.
	if code, _, errOut := run(t, "", nil, "status", "--config", cfg); code != exitUsage || !strings.Contains(errOut, "no database") {
		t.Errorf("status without a database: exit %d %q, want 2", code, errOut)
	}
}

func TestStatusExitCodes(t *testing.T) {
	cfg, db := effectsConfig(t)
	seedEffect(t, db, "e0", "o0", store.EffectDone)

	code, out, errOut := run(t, "", nil, "status", "--config", cfg)
	if code != exitOK {
		t.Fatalf("status on a healthy store: exit %d\n%s%s", code, out, errOut)
	}
	for _, name := range store.SignalNames() {
		if !strings.Contains(out, name) {
			t.Errorf("text output lacks %s:\n%s", name, out)
		}
	}
	if !strings.HasPrefix(out, "NAME") || !strings.Contains(out, "worst: ok") {
		t.Errorf("text output:\n%s", out)
	}

	// A dead effect settled three days ago (effectsNow): dead_letters is past
	// its 24 h alert age.
	seedEffect(t, db, "e1", "o1", store.EffectDead)
	code, out, _ = run(t, "", nil, "status", "--config", cfg)
	if code != exitFail || !strings.Contains(out, "alert") || !strings.Contains(out, "owner: unassigned=1") {
		t.Errorf("status with an old dead letter: exit %d, want 1:\n%s", code, out)
	}
	code, out, _ = run(t, "", nil, "status", "--config", cfg, "--format", "json")
	var rep struct {
		Signals []struct {
			Name             string
			Value            int64
			Status           string
			OldestAgeSeconds *int64 `json:"oldest_age_seconds"`
		}
		At string
	}
	if code != exitFail || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Signals) != 9 {
		t.Fatalf("json: exit %d %s", code, out)
	}
	dl := rep.Signals[5]
	if dl.Name != "dead_letters" || dl.Value != 1 || dl.Status != "alert" || dl.OldestAgeSeconds == nil || *dl.OldestAgeSeconds < int64(24*time.Hour/time.Second) {
		t.Errorf("dead_letters = %+v", dl)
	}
	if _, err := time.Parse(time.RFC3339, rep.At); err != nil {
		t.Errorf("at = %q: %v", rep.At, err)
	}

	// The same store with the dead letters' alert age turned off only
	// warns: exit 0.
	if err := os.WriteFile(cfg, []byte("store: sqlite:"+db+"\nsignals:\n  thresholds:\n    dead_letters: {alert_age: 0s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ = run(t, "", nil, "status", "--config", cfg)
	if code != exitOK || !strings.Contains(out, "worst: warn") {
		t.Errorf("status with dead letters that only warn: exit %d, want 0:\n%s", code, out)
	}
}

func TestStatusBreakdownText(t *testing.T) {
	for _, tc := range []struct {
		b    map[string]map[string]int64
		want string
	}{
		{nil, "-"},
		{map[string]map[string]int64{"owner": {"b": 1, "a": 1, "c": 5, "d": 2, "e\x1b[31m": 1}, "kind": {"effects": 1}},
			"kind: effects=1; owner: c=5 d=2 a=1 +2 more"},
		{map[string]map[string]int64{"source": {"sh\x1bop": 2}}, `source: sh\x1bop=2`},
	} {
		if got := breakdownText(tc.b); got != tc.want {
			t.Errorf("breakdownText(%v) = %q, want %q", tc.b, got, tc.want)
		}
	}
	for d, want := range map[time.Duration]string{0: "0s", 59 * time.Second: "59s", 61 * time.Second: "1m1s",
		3*time.Hour + 20*time.Minute: "3h20m", 52 * time.Hour: "2d4h"} {
		if got := shortAge(d); got != want {
			t.Errorf("shortAge(%s) = %q, want %q", d, got, want)
		}
	}
}

// With --server the verb reads the running server's signals, with the
// token from the environment, and keeps the exit code's meaning.
func TestStatusThroughServer(t *testing.T) {
	cfg, db := effectsConfig(t)
	seedEffect(t, db, "e1", "o1", store.EffectDead)
	if err := os.WriteFile(cfg, []byte("listen: 127.0.0.1:0\nstore: sqlite:"+db+"\nadmin:\n  token: ${TOKEN}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := startServer(t, cfg, map[string]string{"TOKEN": "s3cret"})
	code, out, errOut := run(t, "", map[string]string{adminTokenVar: "s3cret"}, "status", "--server", base, "--format", "json")
	var rep struct {
		Signals []struct{ Name, Status string }
	}
	if code != exitFail || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Signals) != 9 || rep.Signals[5].Status != "alert" {
		t.Fatalf("status --server: exit %d %s %s", code, out, errOut)
	}
	code, _, errOut = run(t, "", map[string]string{adminTokenVar: "wrong"}, "status", "--server", base)
	if code != exitFail || !strings.Contains(errOut, "refused the admin token") {
		t.Errorf("wrong token: exit %d %q", code, errOut)
	}
}

func TestStatusTable(t *testing.T) {
	age := int64(5400)
	r := &signals.Report{At: "2026-11-03T09:00:00Z", Signals: []signals.Signal{
		{Name: "revision_lag", Status: "ok", Breakdown: map[string]map[string]int64{}},
		{Name: "dead_letters", Value: 3, OldestAgeSeconds: &age, Status: "warn",
			Breakdown: map[string]map[string]int64{"owner": {"unassigned": 2, "alice": 1}}},
	}}
	var b strings.Builder
	printStatus(&b, r)
	lines := strings.Split(b.String(), "\n")
	if len(lines) < 5 || strings.Join(strings.Fields(lines[0]), " ") != "NAME VALUE OLDEST STATUS BREAKDOWN" ||
		strings.Join(strings.Fields(lines[1]), " ") != "revision_lag 0 - ok -" ||
		strings.Join(strings.Fields(lines[2]), " ") != "dead_letters 3 1h30m warn owner: unassigned=2 alice=1" ||
		lines[4] != "worst: warn (measured at 2026-11-03T09:00:00Z)" {
		t.Errorf("table:\n%s", b.String())
	}
}
