package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

func TestReplayVerb(t *testing.T) {
	db, cfgPath := writeReplayConfig(t)
	// Process one event through the real engine first.
	ctx := context.Background()
	cfg, err := config.Load(cfgPath, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)
	if _, err := st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "r1", Source: "shop", EventID: "e1", Type: "order.updated", ReceivedAt: now, Body: []byte(`{"order_id":"o1","rev":1}`),
	}}}}}); err != nil {
		t.Fatal(err)
	}
	if err := flow.New(cfg, st, flow.Options{}).Drain(ctx); err != nil {
		t.Fatal(err)
	}
	st.Close()

	// One event by its id: another id selects nothing; an id needs its
	// source.
	if code, _, errOut := run(t, "", nil, "replay", "--config", cfgPath, "--event-id", "e1", "--no-wait"); code != 2 ||
		!strings.Contains(errOut, "--event-id needs --source") {
		t.Fatalf("replay --event-id without --source: %d %q", code, errOut)
	}
	if code, _, errOut := run(t, "", nil, "replay", "--config", cfgPath, "--source", "shop", "--event-id", "e9", "--no-wait"); code != 1 ||
		!strings.Contains(errOut, "matches no stored event") {
		t.Fatalf("replay of an unknown event: %d %q", code, errOut)
	}
	code, out, errOut := run(t, "", map[string]string{"USER": "alice"}, "replay", "--config", cfgPath, "--source", "shop", "--event-id", "e1", "--no-wait")
	if code != 0 || !strings.Contains(out, "1 events, 1 work items") {
		t.Fatalf("replay: %d %q %q", code, out, errOut)
	}
	// Processing the replay creates no second effect.
	st, err = sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := flow.New(cfg, st, flow.Options{}).Drain(ctx); err != nil {
		t.Fatal(err)
	}
	effs, err := st.EffectList(ctx, &store.EffectListParams{Flow: "orders"})
	if err != nil || len(effs) != 1 {
		t.Fatalf("effects after replay: %d (%v), want 1", len(effs), err)
	}
	rows, err := st.AuditList(ctx, &store.AuditListParams{Action: "replay"})
	if err != nil || len(rows) != 1 || rows[0].Actor != "operator:alice" {
		t.Fatalf("replay audit rows %+v (%v)", rows, err)
	}

	for _, args := range [][]string{
		{"replay", "--config", cfgPath, "--from", "yesterday"},
		{"replay", "--config", cfgPath, "--flow", "nosuch"},
		{"replay", "--config", cfgPath, "extra"},
		{"replay", "--config", cfgPath, "--format", "yaml"},
		{"replay", "--config", cfgPath, "--timeout", "-1s"},
		{"replay", "--server", "http://127.0.0.1:1", "--timeout", "1h"},
	} {
		if code, _, _ := run(t, "", nil, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code, _, errOut := run(t, "", nil, "replay", "--config", cfgPath, "--entity", "nobody"); code != 1 || !strings.Contains(errOut, "matches no stored event") {
		t.Errorf("empty selection: %d %q", code, errOut)
	}
}

// writeReplayConfig writes the replay tests' config (one flow, orders,
// with one effect) over a SQLite file in a fresh directory.
func writeReplayConfig(t *testing.T) (db, cfgPath string) {
	t.Helper()
	dir := t.TempDir()
	db = filepath.Join(dir, "r.db")
	cfgPath = filepath.Join(dir, "hookledger.yaml")
	yaml := fmt.Sprintf(`store: sqlite:%s
sources:
  - name: shop
    kind: hmac
    secrets: [x]
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
  - {name: crm, base_url: "http://127.0.0.1:1", allow_private_networks: true}
`, db)
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return db, cfgPath
}
