package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/store"
)

// exceptionsConfig names owners for the orders flow and the crm
// destination, which seedEffect and seedDeadEvent use.
const exceptionsConfig = `store: sqlite:%s
admin:
  token: ${TEST_ADMIN_TOKEN}
sources:
  - name: shop
    kind: hmac
    secrets: [${TEST_SHOP_SECRET}]
    hmac: {header: X-Sig}
flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.rev}
    owner: team-orders
    effects:
      - name: notify
        destination: crm
        request: {path: '"/x"'}
destinations:
  - name: crm
    base_url: "http://127.0.0.1:1"
    allow_private_networks: true
    owner: team-crm
`

func writeExceptionsConfig(t *testing.T) (cfgPath, db string) {
	t.Helper()
	dir := t.TempDir()
	db = filepath.Join(dir, "x.db")
	cfgPath = filepath.Join(dir, "hookledger.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(exceptionsConfig, db)), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfgPath, db
}

// exceptions lists the dead effect and the dead-lettered event, each with
// reason, repair, the configured owner and its age, from the store and
// from a running server alike; kind narrows it, and bad flags are usage
// errors.
func TestExceptionsVerb(t *testing.T) {
	cfg, db := writeExceptionsConfig(t)
	seedEffect(t, db, "e1", "o1", store.EffectDead)
	seedEffect(t, db, "e2", "o2", store.EffectDone)
	seedDeadEvent(t, db, "d1")
	env := map[string]string{"TEST_ADMIN_TOKEN": "admin-tok", "TEST_SHOP_SECRET": "shop-secret"}

	code, out, errOut := run(t, "", env, "exceptions", "--config", cfg)
	if code != 0 {
		t.Fatalf("exceptions: %d %q %q", code, out, errOut)
	}
	for _, s := range []string{"effect 1  orders:o1:r1:notify  -> crm", "owner   team-crm", "reason  HTTP 400", "repair  fix the data",
		"event shop/d1  order.updated", "owner   team-orders", "reason  flow orders: entity: no field order_id",
		"repair  " + store.DeadLetterRepair("entity:"), "age     72h"} {
		if !strings.Contains(out, s) {
			t.Errorf("exceptions output lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "o2") {
		t.Errorf("a done effect is listed:\n%s", out)
	}

	local := jsonExceptions(t, env, "--config", cfg)
	if len(local.Exceptions) != 2 || local.Exceptions[0].Kind != "effect" || local.Exceptions[1].Kind != "event" ||
		local.Exceptions[1].Owner != "team-orders" || local.Exceptions[0].Owner != "team-crm" {
		t.Fatalf("exceptions --format json: %+v", local)
	}
	if got := jsonExceptions(t, env, "--config", cfg, "--kind", "event"); len(got.Exceptions) != 1 || got.Exceptions[0].ID != "d1" {
		t.Fatalf("--kind event: %+v", got)
	}
	page := jsonExceptions(t, env, "--config", cfg, "--limit", "1")
	if len(page.Exceptions) != 1 || page.NextCursor == "" {
		t.Fatalf("--limit 1: %+v", page)
	}
	if got := jsonExceptions(t, env, "--config", cfg, "--limit", "1", "--cursor", page.NextCursor); len(got.Exceptions) != 1 ||
		got.Exceptions[0].Kind != "event" {
		t.Fatalf("second page: %+v", got)
	}

	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--kind", "effects"}, "--kind"},
		{[]string{"--limit", "0"}, "--limit"},
		{[]string{"--cursor", "nope"}, "--cursor"},
		{[]string{"--format", "yaml"}, "--format"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		code, _, errOut := run(t, "", env, append([]string{"exceptions", "--config", cfg}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.says) {
			t.Errorf("exceptions %v: exit %d %q, want 2 naming %s", c.args, code, errOut, c.says)
		}
	}

	base := startServer(t, cfg, serverSecrets)
	remote := jsonExceptions(t, map[string]string{adminTokenVar: "admin-tok"}, "--server", base)
	if len(remote.Exceptions) != 2 {
		t.Fatalf("exceptions --server: %+v", remote)
	}
	for i, x := range remote.Exceptions {
		l := local.Exceptions[i]
		if x.Kind != l.Kind || x.ID != l.ID || x.Owner != l.Owner || x.Reason != l.Reason || x.Repair != l.Repair {
			t.Errorf("--server entry %d = %+v, want it as the store shows it: %+v", i, x, l)
		}
	}
}

func jsonExceptions(t *testing.T, env map[string]string, args ...string) api.ExceptionListJSON {
	t.Helper()
	code, out, errOut := run(t, "", env, append([]string{"exceptions", "--format", "json"}, args...)...)
	var got api.ExceptionListJSON
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("exceptions %v: %d %q %q", args, code, out, errOut)
	}
	return got
}
