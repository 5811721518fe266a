package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// storeEffects applies one event that creates the given effects (name to
// destination and stored request) through the real store, and returns
// their IDs by name.
func storeEffects(t *testing.T, dbPath string, effects map[string][2]string) map[string]int64 {
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
		RequestID: "r1", Source: "web", EventID: "e1", Type: "page.purchase", ReceivedAt: now, Body: []byte(`{}`),
	}}}}})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	pk := res[0].Items[0].EventPK
	if err := st.EventRoute(ctx, &store.EventRouteParams{Now: now, Decisions: []*store.RouteDecision{{EventPK: pk,
		Routes: []store.Route{{Flow: "web", Entity: "c1", OrderKey: "1"}}}}}); err != nil {
		t.Fatal(err)
	}
	leases, err := st.EntityClaim(ctx, &store.EntityClaimParams{Owner: "w", Now: now, LeaseFor: time.Minute, Limit: 1})
	if err != nil || len(leases) != 1 {
		t.Fatal(err, leases)
	}
	work, err := st.WorkListPending(ctx, &store.WorkListPendingParams{Flow: "web", Entity: "c1"})
	if err != nil || len(work) != 1 {
		t.Fatal(err, work)
	}
	p := &store.FlowApplyParams{Lease: leases[0], Now: now, WorkID: work[0].ID, EventPK: pk, Actor: "w",
		Version: "r1", VersionSort: "1", Ordered: true, State: json.RawMessage(`"PAID"`)}
	for name, dr := range effects {
		p.Effects = append(p.Effects, &store.EffectInsert{EpisodeKey: "web:c1:r1:" + name, Effect: name, Destination: dr[0], Request: json.RawMessage(dr[1])})
	}
	if _, err := st.FlowApply(ctx, p); err != nil {
		t.Fatal(err)
	}
	es, err := st.EffectList(ctx, &store.EffectListParams{Flow: "web"})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int64{}
	for _, e := range es {
		ids[e.Effect] = e.ID
	}
	return ids
}

func TestValidateVerb(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	ga4 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		if r.URL.Path != "/debug/mp/collect" || r.URL.Query().Get("api_secret") != "s3cret" {
			w.WriteHeader(http.StatusNoContent) // the live endpoint, or a key GA4 would not check
			return
		}
		if strings.Contains(string(body), `"name":"_`) {
			io.WriteString(w, `{"validationMessages":[{"fieldPath":"events","description":"Event at index: [0] has invalid name [_badEventName]. Names must start with an alphabetic character.","validationCode":"NAME_INVALID"}]}`)
			return
		}
		io.WriteString(w, `{"validationMessages":[]}`)
	}))
	defer ga4.Close()

	dir := t.TempDir()
	db := filepath.Join(dir, "v.db")
	ids := storeEffects(t, db, map[string][2]string{
		"bad":  {"ga4", `{"method":"POST","path":"/mp/collect","body":{"client_id":"c1","events":[{"name":"_badEventName"}]}}`},
		"good": {"ga4", `{"method":"POST","path":"/mp/collect","body":{"client_id":"c1","events":[{"name":"purchase"}]}}`},
		"crm":  {"crm", `{"method":"POST","path":"/contacts","body":{}}`},
	})
	cfg := filepath.Join(dir, "hookledger.yaml")
	yaml := fmt.Sprintf(`store: sqlite:%s
destinations:
  - name: ga4
    preset: ga4-mp
    base_url: %s?measurement_id=G-TEST&api_secret=${GA4_API_SECRET}
    allow_private_networks: true
  - name: crm
    preset: hubspot
    base_url: %s
    allow_private_networks: true
`, db, ga4.URL, ga4.URL)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"GA4_API_SECRET": "s3cret"}
	id := func(name string) string { return fmt.Sprint(ids[name]) }

	code, out, errOut := run(t, "", env, "validate", "--config", cfg, id("good"))
	if code != 0 || !strings.Contains(out, "web:c1:r1:good") || !strings.Contains(out, ": valid\n") {
		t.Fatalf("good: %d %q %q", code, out, errOut)
	}
	code, out, _ = run(t, "", env, "validate", "--config", cfg, id("good"), id("bad"))
	if code != 1 || !strings.Contains(out, "1 validation message(s)\n  events: Event at index: [0] has invalid name [_badEventName]. Names must start with an alphabetic character. (NAME_INVALID)\n") {
		t.Fatalf("bad: %d %q", code, out)
	}
	code, out, _ = run(t, "", env, "validate", "--config", cfg, "--format", "json", id("bad"))
	var res struct {
		Results []struct {
			EffectID int64 `json:"effect_id"`
			Valid    bool
			Messages []struct {
				FieldPath      string `json:"field_path"`
				ValidationCode string `json:"validation_code"`
			}
		}
	}
	if code != 1 || json.Unmarshal([]byte(out), &res) != nil || len(res.Results) != 1 || res.Results[0].Valid ||
		res.Results[0].EffectID != ids["bad"] || len(res.Results[0].Messages) != 1 || res.Results[0].Messages[0].ValidationCode != "NAME_INVALID" {
		t.Fatalf("json: %d %s", code, out)
	}
	mu.Lock()
	for _, p := range paths {
		if p != "/debug/mp/collect" {
			t.Errorf("a call went to %s: validate must never reach the live endpoint", p)
		}
	}
	n := len(paths)
	mu.Unlock()

	// Nothing is sent when an effect cannot be validated.
	for _, args := range [][]string{
		{"validate", "--config", cfg},
		{"validate", "--config", cfg, "x"},
		{"validate", "--config", cfg, "--format", "xml", id("good")},
		{"validate", "--config", cfg, id("good"), id("crm")},
	} {
		if code, _, errOut := run(t, "", env, args...); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", args, code, errOut)
		}
	}
	if code, _, errOut := run(t, "", env, "validate", "--config", cfg, "999"); code != 1 || !strings.Contains(errOut, "no effect 999") {
		t.Errorf("unknown effect: %d %s", code, errOut)
	}
	// A store nobody prepared is refused, and not created.
	missing := filepath.Join(dir, "missing.yaml")
	if err := os.WriteFile(missing, []byte(strings.Replace(yaml, db, filepath.Join(dir, "none.db"), 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := run(t, "", env, "validate", "--config", missing, id("good")); code != exitUsage || !strings.Contains(errOut, "no database at") {
		t.Errorf("missing store: %d %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "none.db")); err == nil {
		t.Error("validate created a database")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != n {
		t.Errorf("refused invocations sent %d calls", len(paths)-n)
	}
}
