package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// deadEffect puts one effect into the exception queue through the real
// store: event in, routed, applied, claimed, settled dead with evidence.
func deadEffect(t *testing.T, dbPath string) int64 {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)
	res, err := st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "r1", Source: "shop", EventID: "e1", Type: "order.created", ReceivedAt: now, Body: []byte(`{}`),
	}}}}})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	pk := res[0].Items[0].EventPK
	if err := st.EventRoute(ctx, &store.EventRouteParams{Now: now, Decisions: []*store.RouteDecision{{EventPK: pk,
		Routes: []store.Route{{Flow: "orders", Entity: "o1", OrderKey: "1"}}}}}); err != nil {
		t.Fatal(err)
	}
	leases, err := st.EntityClaim(ctx, &store.EntityClaimParams{Owner: "w", Now: now, LeaseFor: time.Minute, Limit: 1})
	if err != nil || len(leases) != 1 {
		t.Fatal(err, leases)
	}
	work, err := st.WorkListPending(ctx, &store.WorkListPendingParams{Flow: "orders", Entity: "o1"})
	if err != nil || len(work) != 1 {
		t.Fatal(err, work)
	}
	if _, err := st.FlowApply(ctx, &store.FlowApplyParams{Lease: leases[0], Now: now, WorkID: work[0].ID, EventPK: pk, Actor: "w",
		Version: "r1", VersionSort: "1", Ordered: true, State: json.RawMessage(`"CREATED"`),
		Effects: []*store.EffectInsert{{EpisodeKey: "orders:o1:r1:notify", Effect: "notify", Destination: "crm", Request: json.RawMessage(`{"method":"POST","path":"/x"}`)}},
	}); err != nil {
		t.Fatal(err)
	}
	claims, err := st.EffectClaim(ctx, &store.EffectClaimParams{Owner: "d", Now: now, LeaseFor: time.Minute, Limit: 1})
	if err != nil || len(claims) != 1 {
		t.Fatal(err, claims)
	}
	if err := st.EffectSettle(ctx, &store.EffectSettleParams{EffectID: claims[0].ID, Token: claims[0].Token, Now: now, Actor: "d",
		State: store.EffectDead, AddAttempt: true, Class: store.ClassPermanent, Reason: "HTTP 400",
		SuggestedRepair: "fix the data", Attempt: &store.Attempt{StartedAt: now, Status: 400, Class: store.ClassPermanent, Error: "HTTP 400", Response: `{"error":"bad vat id"}`},
	}); err != nil {
		t.Fatal(err)
	}
	return claims[0].ID
}

func TestEffectsVerb(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "e.db")
	cfg := filepath.Join(dir, "hookledger.yaml")
	if err := os.WriteFile(cfg, []byte("store: sqlite:"+db+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	id := deadEffect(t, db)
	ids := fmt.Sprint(id)
	env := map[string]string{"USER": "alice"}

	code, out, errOut := run(t, "", env, "effects", "list", "--config", cfg)
	if code != 0 || !strings.Contains(out, "orders:o1:r1:notify") || !strings.Contains(out, "dead") || !strings.Contains(out, "HTTP 400") {
		t.Fatalf("list: %d %q %q", code, out, errOut)
	}
	code, out, _ = run(t, "", env, "effects", "show", "--config", cfg, "--format", "json", ids)
	var shown struct {
		Effect struct {
			State           string
			SuggestedRepair string `json:"suggested_repair"`
		}
		Attempts []struct{ Status int }
	}
	if code != 0 || json.Unmarshal([]byte(out), &shown) != nil || shown.Effect.State != "dead" || shown.Effect.SuggestedRepair != "fix the data" || len(shown.Attempts) != 1 || shown.Attempts[0].Status != 400 {
		t.Fatalf("show: %d %s", code, out)
	}
	// Usage errors.
	for _, args := range [][]string{
		{"effects"}, {"effects", "frobnicate", "--config", cfg}, {"effects", "show", "--config", cfg},
		{"effects", "resolve", "--config", cfg, ids}, {"effects", "retry", "--config", cfg, "x"},
		{"effects", "assign", "--config", cfg, ids},
	} {
		if code, _, _ := run(t, "", env, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	code, out, _ = run(t, "", env, "effects", "assign", "--config", cfg, "--owner", "bob", ids)
	if code != 0 || !strings.Contains(out, "dead") {
		t.Fatalf("assign: %d %s", code, out)
	}
	code, out, _ = run(t, "", env, "effects", "resolve", "--config", cfg, "--note", "invoice exists, checked by hand", ids)
	if code != 0 || !strings.Contains(out, "resolved") {
		t.Fatalf("resolve: %d %s", code, out)
	}
	// A resolved effect cannot be retried; the queue is empty now.
	if code, _, errOut := run(t, "", env, "effects", "retry", "--config", cfg, "--note", "again", ids); code != 1 || !strings.Contains(errOut, "not allowed") {
		t.Fatalf("retry of a resolved effect: %d %s", code, errOut)
	}
	if _, out, _ := run(t, "", env, "effects", "list", "--config", cfg); !strings.Contains(out, "(no effects)") {
		t.Fatalf("queue after resolve: %s", out)
	}
	_, out, _ = run(t, "", env, "effects", "show", "--config", cfg, ids)
	if !strings.Contains(out, "bob") || !strings.Contains(out, "checked by hand") {
		t.Fatalf("show after operations lacks owner or note: %s", out)
	}
}
