package main

import (
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/store"
)

// A relative sqlite: path is relative to the config file, not to the
// directory the verb runs in: migrate run from one directory and status
// run by cron from another find the same database.
func TestRelativeStoreFollowsTheConfigFile(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "hookledger.yaml")
	if err := os.WriteFile(cfg, []byte("store: sqlite:./data/h.db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	t.Chdir(elsewhere)
	if code, _, errOut := run(t, "", nil, "migrate", "--config", cfg); code != exitOK {
		t.Fatalf("migrate: exit %d %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "h.db")); err != nil {
		t.Errorf("migrate did not create the database beside the config file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "data")); err == nil {
		t.Errorf("migrate created a database under the current directory %s", elsewhere)
	}
	t.Chdir(t.TempDir())
	seedEffect(t, filepath.Join(dir, "data", "h.db"), "e1", "o1", store.EffectDone)
	if code, out, errOut := run(t, "", nil, "status", "--config", cfg); code != exitOK || !strings.Contains(out, "worst: ok") {
		t.Errorf("status from another directory: exit %d\n%s%s", code, out, errOut)
	}
}

// The verbs that only read the store never create a database: a missing
// one is a configuration error (exit 2) whose message names the absolute
// path it looked at, and nothing is left behind.
func TestReadVerbsNeverCreateADatabase(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "hookledger.yaml")
	if err := os.WriteFile(cfg, []byte("store: sqlite:data/h.db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	want := "no database at " + filepath.Join(dir, "data", "h.db")
	for _, args := range [][]string{
		{"status"}, {"check"}, {"effects", "list"}, {"effects", "show", "1"}, {"exceptions"},
		{"effects", "retry", "1", "--note", "x"}, {"events", "resolve", "--source", "s", "--event-id", "e", "--note", "x"},
	} {
		code, _, errOut := run(t, "", nil, append(args, "--config", cfg)...)
		if code != exitUsage || !strings.Contains(errOut, want) {
			t.Errorf("%v without a database: exit %d %q; want 2 naming %s", args, code, errOut, want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the verbs left files beside the config: %v", entries)
	}
	// A file with no hookledger schema is no database either.
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data", "h.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"status", "check"} {
		code, _, errOut := run(t, "", nil, verb, "--config", cfg)
		if code != exitUsage || !strings.Contains(errOut, "no hookledger schema") || !strings.Contains(errOut, filepath.Join(dir, "data", "h.db")) {
			t.Errorf("%s on an empty file: exit %d %q; want 2", verb, code, errOut)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "data", "h.db")); err != nil || fi.Size() != 0 {
		t.Errorf("a read verb wrote to the empty file: %v %v", fi, err)
	}
}

// Without --actor and $USER (cron, systemd), the actor of an operator
// action is the OS user the process runs as, never operator:unknown.
func TestOperatorActorFallsBackToTheOSUser(t *testing.T) {
	u, err := user.Current()
	if err != nil || u.Username == "" {
		t.Fatalf("the test needs the current user: %v", err)
	}
	env := &Env{Getenv: func(string) string { return "" }}
	if got := operatorActor(env, ""); got != "operator:"+u.Username {
		t.Errorf("actor without $USER = %q, want operator:%s", got, u.Username)
	}
	env.Getenv = func(k string) string { return map[string]string{"USER": "alice"}[k] }
	if got := operatorActor(env, ""); got != "operator:alice" {
		t.Errorf("actor with USER=alice = %q", got)
	}
	if got := operatorActor(env, "bob"); got != "bob" {
		t.Errorf("actor with --actor bob = %q", got)
	}
}
