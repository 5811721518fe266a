package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/store"
)

// plant runs statements on the SQLite file behind the store's back, with
// CHECK constraints off, to make what the store never writes.
func plant(t *testing.T, db string, stmts ...string) {
	t.Helper()
	d, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.SetMaxOpenConns(1)
	for _, q := range append([]string{`PRAGMA ignore_check_constraints = ON`}, stmts...) {
		if _, err := d.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func TestCheckVerb(t *testing.T) {
	cfg, db := effectsConfig(t)
	done := seedEffect(t, db, "e1", "o1", store.EffectDone)
	dead := seedEffect(t, db, "e2", "o2", store.EffectDead)

	code, out, errOut := run(t, "", nil, "check", "--config", cfg)
	if code != 0 || errOut != "" {
		t.Fatalf("check of a healthy store: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, name := range store.Invariants() {
		if !strings.Contains(out, name+"  ") || strings.Count(out, " ok\n") != len(store.Invariants()) {
			t.Fatalf("summary lacks %s ok:\n%s", name, out)
		}
	}
	code, out, _ = run(t, "", nil, "check", "--config", cfg, "--format", "json")
	var clean checkOutput
	if code != 0 || json.Unmarshal([]byte(out), &clean) != nil || !clean.OK || len(clean.Findings) != 0 || len(clean.Counts) != 6 ||
		!strings.Contains(out, `"findings": []`) {
		t.Fatalf("json of a healthy store: %d %s", code, out)
	}

	// A done effect whose evidence is gone, and a state outside the set.
	plant(t, db, fmt.Sprintf(`DELETE FROM effect_attempts WHERE effect_id = %d`, done),
		fmt.Sprintf(`UPDATE effects SET state = 'lost' WHERE id = %d`, dead))
	code, out, _ = run(t, "", nil, "check", "--config", cfg)
	wantLines := []string{
		fmt.Sprintf("done_evidence: effect %d: orders:o1:r1:notify: done since ", done),
		fmt.Sprintf("effect_state: effect %d: orders:o2:r1:notify: state \"lost\" is not one of the effect states\n", dead),
		"done_evidence       1 violation\n",
		"effect_state        1 violation\n",
		"event_pending       ok\n",
	}
	if code != 1 {
		t.Fatalf("check with violations: exit %d, want 1:\n%s", code, out)
	}
	for _, w := range wantLines {
		if !strings.Contains(out, w) {
			t.Errorf("text output lacks %q:\n%s", w, out)
		}
	}
	code, out, _ = run(t, "", nil, "check", "--config", cfg, "--format", "json", "--limit", "1")
	var got checkOutput
	if err := json.Unmarshal([]byte(out), &got); code != 1 || err != nil {
		t.Fatalf("json with violations: exit %d %v:\n%s", code, err, out)
	}
	if got.OK || got.Counts[store.InvariantDoneEvidence] != 1 || got.Counts[store.InvariantEffectState] != 1 ||
		got.Counts[store.InvariantEventPending] != 0 || len(got.Findings) != 2 ||
		got.Findings[0] != (checkFinding{Invariant: "done_evidence", Subject: fmt.Sprintf("effect %d", done), Detail: got.Findings[0].Detail}) ||
		got.Findings[1].Subject != fmt.Sprintf("effect %d", dead) || got.Findings[1].Invariant != "effect_state" {
		t.Fatalf("json findings: %+v", got)
	}
	for _, key := range []string{`"invariant"`, `"subject"`, `"detail"`, `"counts"`, `"ok": false`} {
		if !strings.Contains(out, key) {
			t.Errorf("json lacks %s:\n%s", key, out)
		}
	}
}

// More violations than --limit: the count stays exact and says how many
// are listed.
func TestCheckLimit(t *testing.T) {
	cfg, db := effectsConfig(t)
	a := seedEffect(t, db, "e1", "o1", store.EffectDead)
	b := seedEffect(t, db, "e2", "o2", store.EffectDead)
	plant(t, db, fmt.Sprintf(`UPDATE effects SET state = 'lost' WHERE id IN (%d, %d)`, a, b))
	code, out, _ := run(t, "", nil, "check", "--config", cfg, "--limit", "1")
	if code != 1 || strings.Count(out, "effect_state: effect ") != 1 || !strings.Contains(out, "effect_state        2 violations (1 listed)\n") {
		t.Fatalf("limited check: exit %d:\n%s", code, out)
	}
}

func TestCheckUsage(t *testing.T) {
	cfg, _ := effectsConfig(t)
	for _, args := range [][]string{
		{"check", "--config", cfg, "--format", "xml"},
		{"check", "--config", cfg, "extra"},
		{"check", "--config", cfg, "--limit", "0"},
		{"check", "--nosuchflag"},
		{"check", "--config", filepath.Join(t.TempDir(), "missing.yaml")},
	} {
		if code, _, _ := run(t, "", nil, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	code, out, errOut := run(t, "", nil, "check", "--help")
	if code != 0 || !strings.Contains(out, "Usage: hookledger check") || !strings.Contains(out, "done_evidence") || errOut != "" {
		t.Fatalf("check --help: %d %q %q", code, out, errOut)
	}
	// No database yet: a configuration that points nowhere (exit 2), with
	// what to run; nothing is created.
	if code, _, errOut := run(t, "", nil, "check", "--config", cfg); code != exitUsage || !strings.Contains(errOut, "hookledger migrate") {
		t.Fatalf("check without a database: %d %q", code, errOut)
	}
}
