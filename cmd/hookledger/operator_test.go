package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// operatorConfig is a config whose every secret comes from a variable the
// operator verbs do not have; the server gets them.
const operatorConfig = `store: sqlite:%s
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
    effects:
      - name: sync
        destination: crm
        request: {path: '"/x"'}
destinations:
  - name: crm
    base_url: "%s"
    allow_private_networks: true
    auth: {bearer: "${TEST_CRM_TOKEN}"}
    idempotency: {header: Idempotency-Key, window: 24h, key: hashed}
`

var serverSecrets = map[string]string{"TEST_ADMIN_TOKEN": "admin-tok", "TEST_SHOP_SECRET": "shop-secret", "TEST_CRM_TOKEN": "crm-tok"}

func writeOperatorConfig(t *testing.T) (cfgPath, db string) {
	t.Helper()
	return writeOperatorConfigTo(t, "http://127.0.0.1:1")
}

// writeOperatorConfigTo is writeOperatorConfig with the CRM at crmURL.
func writeOperatorConfigTo(t *testing.T, crmURL string) (cfgPath, db string) {
	t.Helper()
	dir := t.TempDir()
	db = filepath.Join(dir, "op.db")
	cfgPath = filepath.Join(dir, "hookledger.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(operatorConfig, db, crmURL)), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfgPath, db
}

// sendSigned posts one order event to the running server through the send
// verb; fields are the body's other members.
func sendSigned(t *testing.T, cfgPath, base, eventID, fields string) {
	t.Helper()
	id, _ := json.Marshal(eventID)
	body := fmt.Sprintf(`{"eventId":%s,"type":"order.updated",%s}`, id, fields)
	code, out, errOut := run(t, body, serverSecrets, "send", "--config", cfgPath, "--source", "shop", "--event-id", eventID,
		"--url", base+"/hooks/shop", "-")
	if code != 0 {
		t.Fatalf("send %s: %d %q %q", eventID, code, out, errOut)
	}
}

// The operator verbs run without any of the config's secrets and never
// migrate: a missing or older schema is refused with what to run.
func TestOperatorVerbsNeedNoSecretsAndNeverMigrate(t *testing.T) {
	cfgPath, db := writeOperatorConfig(t)
	noEnv := map[string]string{"USER": "alice"}

	// No database yet: nothing is created, and the configuration that
	// points nowhere is the mistake (exit 2).
	for _, args := range [][]string{
		{"effects", "list", "--config", cfgPath},
		{"replay", "--config", cfgPath, "--no-wait"},
	} {
		code, _, errOut := run(t, "", noEnv, args...)
		if code != exitUsage || !strings.Contains(errOut, "no database at "+db) || !strings.Contains(errOut, "hookledger migrate --config "+cfgPath) {
			t.Errorf("%v without a database: %d %q", args, code, errOut)
		}
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Fatalf("an operator verb created the database file: %v", err)
	}

	// An empty database file: no schema, and still none afterwards.
	st, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	code, _, errOut := run(t, "", noEnv, "effects", "list", "--config", cfgPath)
	if code != exitUsage || !strings.Contains(errOut, "the database has no hookledger schema") || !strings.Contains(errOut, "start 'hookledger serve'") {
		t.Fatalf("effects on an empty database: %d %q", code, errOut)
	}
	if n := tableCount(t, db); n != 0 {
		t.Fatalf("effects list created %d tables; it must never migrate", n)
	}

	// migrate needs the secrets (it loads like serve); then the
	// operator verbs work without them.
	if code, _, errOut := run(t, "", noEnv, "migrate", "--config", cfgPath); code != 2 || !strings.Contains(errOut, "TEST_ADMIN_TOKEN is not set") {
		t.Fatalf("migrate without secrets: %d %q", code, errOut)
	}
	if code, _, errOut := run(t, "", serverSecrets, "migrate", "--config", cfgPath); code != 0 {
		t.Fatalf("migrate: %d %q", code, errOut)
	}
	code, out, errOut := run(t, "", noEnv, "effects", "list", "--config", cfgPath, "--state", "any")
	if code != 0 || !strings.Contains(out, "(no effects)") {
		t.Fatalf("effects list without secrets: %d %q %q", code, out, errOut)
	}
	code, out, errOut = run(t, "", noEnv, "lint", "--config", cfgPath)
	if code != 0 && code != 1 || !strings.Contains(out, "orders") {
		t.Fatalf("lint --config without secrets: %d %q %q", code, out, errOut)
	}

	// A schema behind the binary is refused too.
	sqldb, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	var newest string
	if err := sqldb.QueryRow(`DELETE FROM schema_migrations WHERE version = (SELECT max(version) FROM schema_migrations) RETURNING name`).Scan(&newest); err != nil {
		t.Fatal(err)
	}
	sqldb.Close()
	code, _, errOut = run(t, "", noEnv, "replay", "--config", cfgPath, "--no-wait")
	if code != 1 || !strings.Contains(errOut, "the database schema is behind this binary ("+newest+" not applied)") {
		t.Fatalf("replay on an older schema: %d %q", code, errOut)
	}

	// Other config mistakes still stop them with file:line.
	bad := filepath.Join(filepath.Dir(cfgPath), "bad.yaml")
	if err := os.WriteFile(bad, []byte("store: sqlite:"+db+"\nsources:\n  - name: shop\n    kind: paypal\n    secrets: [${TEST_SHOP_SECRET}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := run(t, "", noEnv, "effects", "list", "--config", bad); code != 2 || !strings.Contains(errOut, bad+":4:") {
		t.Fatalf("bad config: %d %q", code, errOut)
	}
}

func tableCount(t *testing.T, db string) int {
	t.Helper()
	sqldb, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer sqldb.Close()
	var n int
	if err := sqldb.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// replay waits for the running server to process the replay and prints the
// outcome, from the store directly or through the server's admin API.
func TestReplayShowsTheOutcome(t *testing.T) {
	cfgPath, _ := writeOperatorConfig(t)
	base := startServer(t, cfgPath, serverSecrets)
	sendSigned(t, cfgPath, base, "e1", `"order_id":"o1","rev":1`)
	sendSigned(t, cfgPath, base, "e2", `"order_id":"o1","rev":2`)
	waitDisposition(t, base, "e2", "applied")

	code, out, errOut := run(t, "", map[string]string{"USER": "alice"}, "replay", "--config", cfgPath, "--source", "shop")
	if code != 0 {
		t.Fatalf("replay: %d %q %q", code, out, errOut)
	}
	for _, want := range []string{"enqueued: 2 events, 2 work items", "done: 2 of 2 work items settled", "duplicate        1", "stale            1", "effects created  0"} {
		if !strings.Contains(out, want) {
			t.Errorf("replay output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "2 of 2 work items settled") {
		t.Errorf("no progress on stderr: %q", errOut)
	}

	// Through the server: the token comes from the environment only.
	env := map[string]string{"USER": "bob", adminTokenVar: "admin-tok"}
	code, out, errOut = run(t, "", env, "replay", "--server", base, "--entity", "o1", "--format", "json")
	var got struct {
		Replay struct {
			ID                        int64
			WorkItems                 int `json:"work_items"`
			Settled, Duplicate, Stale int
			EffectsCreated            int `json:"effects_created"`
			Done                      bool
		}
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || !got.Replay.Done || got.Replay.Settled != 2 || got.Replay.Duplicate != 1 || got.Replay.Stale != 1 || got.Replay.ID < 2 {
		t.Fatalf("replay --server: %d %q %q", code, out, errOut)
	}
	// A wrong token is refused, a missing one is a usage error, and an
	// empty selection is a failure, as locally.
	if code, _, errOut := run(t, "", map[string]string{adminTokenVar: "wrong"}, "replay", "--server", base); code != 1 || !strings.Contains(errOut, "refused the admin token") {
		t.Errorf("wrong token: %d %q", code, errOut)
	}
	if code, _, errOut := run(t, "", nil, "replay", "--server", base, "--config", filepath.Join(t.TempDir(), "none.yaml")); code != 2 {
		t.Errorf("no token: %d %q", code, errOut)
	}
	if code, _, errOut := run(t, "", env, "replay", "--server", base, "--entity", "nobody"); code != 1 || !strings.Contains(errOut, "matches no stored event") {
		t.Errorf("empty selection: %d %q", code, errOut)
	}
}

// effects --server works on the running server's exception queue with the
// same output as on the store.
func TestEffectsThroughTheServer(t *testing.T) {
	keys := make(chan string, 1)
	crm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case keys <- r.Header.Get("Idempotency-Key"):
		default:
		}
		http.Error(w, `{"error":"bad vat id"}`, http.StatusBadRequest)
	}))
	defer crm.Close()
	cfgPath, _ := writeOperatorConfigTo(t, crm.URL)
	base := startServer(t, cfgPath, serverSecrets)
	sendSigned(t, cfgPath, base, "e1", `"order_id":"o1","rev":1`)
	env := map[string]string{"USER": "alice", adminTokenVar: "admin-tok"}

	// The CRM refuses the call for good: the effect goes to the exception
	// queue, which list shows by default.
	var id string
	waitUntil(t, "the effect to go dead", func() bool {
		code, out, errOut := run(t, "", env, "effects", "list", "--server", base, "--format", "json")
		var got struct {
			Effects []struct {
				ID         int64
				EpisodeKey string `json:"episode_key"`
				State      string
			}
		}
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
			t.Fatalf("effects list --server: %d %q %q", code, out, errOut)
		}
		if len(got.Effects) == 1 && got.Effects[0].EpisodeKey == "orders:o1:r1:sync" && got.Effects[0].State == "dead" {
			id = fmt.Sprint(got.Effects[0].ID)
		}
		return id != ""
	})
	code, out, errOut := run(t, "", env, "effects", "show", "--server", base, id)
	if code != 0 || !strings.Contains(out, "source event shop/e1") || !strings.Contains(out, "bad vat id") || !strings.Contains(out, "400") {
		t.Fatalf("effects show --server: %d %q %q", code, out, errOut)
	}
	// The key the CRM was sent is shown beside the episode key, as the
	// server names it.
	if sent := <-keys; sent != deliver.HashedKey("orders:o1:r1:sync") || !strings.Contains(out, "idem. key    "+sent+"\n") {
		t.Fatalf("the CRM was sent %q; effects show --server says %q", sent, out)
	}
	// The API carries the request: show prints it as it does from the
	// store, never an empty one.
	_, local, _ := run(t, "", env, "effects", "show", "--config", cfgPath, id)
	_, remoteReq, _ := strings.Cut(out, "\n  request")
	_, localReq, _ := strings.Cut(local, "\n  request")
	if localReq == "" || !strings.Contains(localReq, `"path": "/x"`) || remoteReq != localReq {
		t.Errorf("effects show --server prints the request\n%q\nthe store holds\n%q", remoteReq, localReq)
	}
	code, out, errOut = run(t, "", env, "effects", "assign", "--server", base, "--owner", "ops", id)
	if code != 0 || !strings.Contains(out, "effect "+id+" (orders:o1:r1:sync)") {
		t.Fatalf("effects assign --server: %d %q %q", code, out, errOut)
	}
	code, out, errOut = run(t, "", env, "effects", "resolve", "--server", base, "--note", "fixed the VAT id by hand", id)
	if code != 0 || !strings.Contains(out, "is now resolved") {
		t.Fatalf("effects resolve --server: %d %q %q", code, out, errOut)
	}
	if _, out, _ := run(t, "", env, "effects", "list", "--server", base); !strings.Contains(out, "(no effects)") {
		t.Fatalf("queue after resolve: %q", out)
	}
	// The list's filters reach the server.
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--state", "resolved"}, true},
		{[]string{"--state", "any", "--destination", "crm", "--owner", "ops", "--class", "permanent"}, true},
		{[]string{"--state", "any", "--destination", "other"}, false},
		{[]string{"--state", "done,dead"}, false},
		{[]string{"--state", "any", "--created-from", "2999-01-01T00:00:00Z"}, false},
	} {
		code, out, errOut := run(t, "", env, append([]string{"effects", "list", "--server", base}, tc.args...)...)
		if code != 0 || strings.Contains(out, "orders:o1:r1:sync") != tc.want {
			t.Errorf("effects list --server %v: %d %q %q; want the effect listed: %v", tc.args, code, out, errOut, tc.want)
		}
	}
	_, out, _ = run(t, "", env, "effects", "show", "--server", base, "--format", "json", id)
	if !strings.Contains(out, `"owner": "ops"`) || !strings.Contains(out, "fixed the VAT id by hand") {
		t.Fatalf("show after operations: %q", out)
	}
	// The audit trail names the operator of the command line.
	var audit struct {
		Audit []api.AuditJSON `json:"audit"`
	}
	r := &remote{base: mustURL(t, base), token: "admin-tok", client: http.DefaultClient}
	if err := r.call(context.Background(), http.MethodGet, "/api/v1/audit", url.Values{"action": {"effect_resolved"}}, nil, &audit); err != nil ||
		len(audit.Audit) != 1 || audit.Audit[0].Actor != "operator:alice" {
		t.Fatalf("audit of the resolve: %+v %v", audit, err)
	}
	if code, _, errOut := run(t, "", env, "effects", "show", "--server", base, "999999"); code != 1 || !strings.Contains(errOut, "no effect 999999") {
		t.Fatalf("show of a missing effect: %d %q", code, errOut)
	}
}
