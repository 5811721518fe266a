package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// replay --plan prints a replay's dry run from the configured store,
// opened read-only: it writes nothing, enqueues nothing, creates no
// missing database and has no --server form.
func TestReplayPlan(t *testing.T) {
	db, cfgPath := writeReplayConfig(t)

	// A missing database is named, not created.
	if code, _, errOut := run(t, "", nil, "replay", "--plan", "--config", cfgPath, "--source", "shop"); code != 2 ||
		!strings.Contains(errOut, "no database at "+db) {
		t.Fatalf("replay --plan without a database: %d %q", code, errOut)
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Fatalf("replay --plan created the database: %v", err)
	}

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
	var deliveries []*store.DeliveryInput
	for i, body := range []string{`{"order_id":"o1","rev":1}`, `{"order_id":"o2","rev":1}`} {
		deliveries = append(deliveries, &store.DeliveryInput{RequestID: fmt.Sprint("r", i), Source: "shop", EventID: fmt.Sprint("e", i),
			Type: "order.updated", ReceivedAt: now, Body: []byte(body)})
	}
	if _, err := st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: deliveries}}}); err != nil {
		t.Fatal(err)
	}
	if err := flow.New(cfg, st, flow.Options{}).Drain(ctx); err != nil {
		t.Fatal(err)
	}
	st.Close()
	before := fileSum(t, db)

	code, out, errOut := run(t, "", nil, "replay", "--plan", "--config", cfgPath, "--source", "shop")
	if code != 0 {
		t.Fatalf("replay --plan: %d %q", code, errOut)
	}
	for _, want := range []string{"plan: 2 events, 2 work items on 2 entities", "effects in the ledger: 2 (approved 2)",
		"work items that may create effects: 0", "  shop/e1 -> orders o2 (1 in the ledger)\n", "nothing was enqueued"} {
		if !strings.Contains(out, want) {
			t.Errorf("replay --plan printed\n%s\nwant %q", out, want)
		}
	}
	code, out, errOut = run(t, "", nil, "replay", "--plan", "--config", cfgPath, "--flow", "orders", "--entity", "o2", "--format", "json")
	var plan struct {
		Events    int            `json:"events"`
		WorkItems int            `json:"work_items"`
		InLedger  int            `json:"in_ledger"`
		ByState   map[string]int `json:"in_ledger_by_state"`
		Samples   []struct {
			EventID  string `json:"event_id"`
			InLedger int    `json:"in_ledger"`
		} `json:"samples"`
	}
	if err := json.Unmarshal([]byte(out), &plan); code != 0 || err != nil || plan.Events != 1 || plan.WorkItems != 1 || plan.InLedger != 1 ||
		plan.ByState["approved"] != 1 || len(plan.Samples) != 1 || plan.Samples[0].EventID != "e1" || plan.Samples[0].InLedger != 1 {
		t.Fatalf("replay --plan --format json: %d %v %q %q", code, err, out, errOut)
	}
	if code, _, errOut := run(t, "", nil, "replay", "--plan", "--config", cfgPath, "--source", "other"); code != 1 ||
		!strings.Contains(errOut, "matches no stored event") {
		t.Fatalf("replay --plan of nothing: %d %q", code, errOut)
	}
	// A reader in WAL mode may leave an empty write-ahead log beside the
	// database, never a page in it.
	if after := fileSum(t, db); after != before {
		t.Errorf("replay --plan changed the database")
	}
	if wal, err := os.Stat(db + "-wal"); err == nil && wal.Size() != 0 {
		t.Errorf("replay --plan wrote %d bytes to the write-ahead log", wal.Size())
	}
	if code, _, errOut := run(t, "", nil, "replay", "--plan", "--server", "http://127.0.0.1:1", "--source", "shop"); code != 2 ||
		!strings.Contains(errOut, "--plan") {
		t.Fatalf("replay --plan --server: %d %q", code, errOut)
	}
}

// fileSum is the SHA-256 of a file's bytes.
func fileSum(t *testing.T, path string) [sha256.Size]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(data)
}
