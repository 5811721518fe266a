//go:build unix

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/hookledger/hookledger/internal/store"
)

// status, check and replay --plan read a copy of the database in a
// directory the user cannot write, and a file without write permission,
// and write nothing
// there. As root permissions bind nobody, so the binary runs as the
// unprivileged user nobody then.
func TestStatusAndCheckReadAReadOnlyCopy(t *testing.T) {
	bin := buildBinary(t)
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(bin), filepath.Dir(filepath.Dir(bin)), base, filepath.Dir(base)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name     string
		dirMode  os.FileMode
		fileMode os.FileMode
	}{
		{"read-only directory", 0o555, 0o444},
		{"read-only file", 0o777, 0o444},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(base, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			db := filepath.Join(dir, "h.db")
			seedEffect(t, db, "e1", "o1", store.EffectDone)
			cfg := filepath.Join(dir, "hookledger.yaml")
			if err := os.WriteFile(cfg, []byte("store: sqlite:h.db\n"+planFlowYAML), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(db, tc.fileMode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, tc.dirMode); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
			before := dirNames(t, dir)
			for _, verb := range [][]string{{"status"}, {"check"}, {"replay", "--plan", "--source", "shop"}} {
				cmd := exec.Command(bin, append(verb, "--config", cfg)...)
				asUnprivileged(cmd)
				out, err := cmd.CombinedOutput()
				// The seeded event's body gives the flow no entity, so the
				// plan reads it and selects nothing (exit 1): what counts
				// is that it read the store.
				if verb[0] == "replay" && strings.Contains(string(out), "1 read, 0 selected") {
					continue
				}
				if err != nil {
					t.Errorf("%s on a %s: %v\n%s", strings.Join(verb, " "), tc.name, err, out)
				}
			}
			if tc.dirMode == 0o555 {
				if after := dirNames(t, dir); !slices.Equal(before, after) {
					t.Errorf("files in the read-only directory: %v, then %v", before, after)
				}
			}
		})
	}
}

// planFlowYAML is the flow the seeded effects belong to, which replay
// --plan reads its routes through.
const planFlowYAML = `sources:
  - {name: shop, kind: hmac, secrets: [x], hmac: {header: X-Sig}}
flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.rev}
    effects:
      - {name: sync, destination: crm, request: {path: '"/x"'}}
destinations:
  - {name: crm, base_url: "http://127.0.0.1:1", allow_private_networks: true}
`

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names
}

// asUnprivileged runs cmd as nobody when the test runs as root, for whom
// file permissions would not apply.
func asUnprivileged(cmd *exec.Cmd) {
	if os.Geteuid() != 0 {
		return
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
}

// migrate (and serve) on a database in a directory the user cannot write
// say so in plain words, not as SQLite's "unable to open database file".
func TestMigrateInAReadOnlyDirectorySaysSo(t *testing.T) {
	bin := buildBinary(t)
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(bin), filepath.Dir(filepath.Dir(bin)), base, filepath.Dir(base)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(base, "ro")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "hookledger.yaml")
	if err := os.WriteFile(cfg, []byte("store: sqlite:h.db\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
	cmd := exec.Command(bin, "migrate", "--config", cfg)
	asUnprivileged(cmd)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "cannot create files in the directory "+dir) || strings.Contains(string(out), "(14)") {
		t.Errorf("migrate in a read-only directory: %v\n%s", err, out)
	}
}
