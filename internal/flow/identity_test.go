package flow

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/store"
)

// An entity computed by a flow is capped like the identities the receiver
// stores: an over-long one dead-letters the event with the reason instead
// of reaching the ledger's keys.
func TestComputedEntityIsCapped(t *testing.T) {
	yaml := fmt.Sprintf(sources, "http://127.0.0.1:1") + ordersRevisionFlow
	f := newFixture(t, yaml)
	var logs bytes.Buffer
	f.eng = New(f.cfg, f.st, Options{Clock: f.clk, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	long := strings.Repeat("o", store.MaxIdentityBytes+1)
	f.send("shop", "evt-long", fmt.Sprintf(`{"order_id":%q,"revision":1}`, long))
	f.send("shop", "evt-ok", fmt.Sprintf(`{"order_id":%q,"revision":1}`, long[:store.MaxIdentityBytes]))
	f.drain()
	if d := f.disposition("shop", "evt-long"); d != "dead_lettered" {
		t.Fatalf("over-long entity: disposition %s, want dead_lettered", d)
	}
	if d := f.disposition("shop", "evt-ok"); d != "applied" {
		t.Fatalf("entity at the limit: disposition %s, want applied", d)
	}
	rows, err := f.st.AuditList(context.Background(), &store.AuditListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range rows {
		if a.EventID == "evt-long" && strings.Contains(a.Detail, "entity: is 513 bytes long; the limit is 512") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no audit row gives the reason: %+v", rows)
	}
	// A person must hear of it at the default level, with the reason.
	if !strings.Contains(logs.String(), "level=WARN msg=\"event dead-lettered\" source=shop event_id=evt-long flow=orders reason=\"entity: is 513 bytes long; the limit is 512") {
		t.Fatalf("the dead letter is not logged at WARN with its reason:\n%s", logs.String())
	}
}
