package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

const shopSecret = "shop-signing-secret"

// The dossier's order flow, and two systems that echo each other's effects.
const flowConfig = `
destinations:                       # they refuse every call: effects go dead, visibly
  - {name: notifier, base_url: "DEST_URL", allow_private_networks: true}
  - {name: sys_a, base_url: "DEST_URL", allow_private_networks: true}
  - {name: sys_b, base_url: "DEST_URL", allow_private_networks: true}
processing:
  poll_interval: 5ms
causation:
  trusted_sources: [sys_a, sys_b]   # they pass hookledger's causation headers back
flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version:
      mode: revision
      revision: event.revision
    state: event.intent
    effects:
      - name: notify_created
        when: state == "CREATED"
        destination: notifier
        request:
          path: '"/notify/created"'
          body: '{"order": entity, "revision": version}'
      - name: notify_cancel
        when: state == "CANCELLED"
        destination: notifier
        request:
          path: '"/notify/cancelled"'
          body: '{"order": entity}'
  - name: a_to_b
    source: sys_a
    events: ["*"]
    entity: event.id
    version: {mode: revision, revision: event.rev}
    effects:
      - name: push_b
        destination: sys_b
        request: {path: '"/contacts"'}
  - name: b_to_a
    source: sys_b
    events: ["*"]
    entity: event.id
    version: {mode: revision, revision: event.rev}
    effects:
      - name: push_a
        destination: sys_a
        request: {path: '"/contacts"'}
`

func flowSources() string {
	var b strings.Builder
	for _, name := range []string{"shop", "sys_a", "sys_b"} {
		fmt.Fprintf(&b, `  - name: %s
    kind: hmac
    secrets: [%s]
    hmac: {header: X-Signature, prefix: "sha256="}
`, name, shopSecret)
	}
	return b.String()
}

func startFlows(t *testing.T, storeURL string) *harness {
	t.Helper()
	base := testConfig(storeURL)
	base = strings.Replace(base, "sources:\n", "sources:\n"+flowSources(), 1)
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"unprocessable"}`, http.StatusUnprocessableEntity)
	}))
	t.Cleanup(dest.Close)
	return startWith(t, base+strings.ReplaceAll(flowConfig, "DEST_URL", dest.URL))
}

func shopPost(t *testing.T, h *harness, source, body string, extra http.Header) (int, string) {
	t.Helper()
	m := hmac.New(sha256.New, []byte(shopSecret))
	m.Write([]byte(body))
	hdr := http.Header{"X-Signature": {"sha256=" + hex.EncodeToString(m.Sum(nil))}}
	for k, v := range extra {
		hdr[k] = v
	}
	code, resp, _ := h.post("/hooks/"+source, []byte(body), hdr)
	return code, resp
}

// settled waits until the event leaves accepted; the processor runs in the
// background of the real server.
func settled(t *testing.T, h *harness, source, eventID string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ev := h.events(source, eventID)
		if len(ev) == 1 && ev[0].Disposition != "accepted" {
			return ev[0].Disposition
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s still not settled: %+v", source, eventID, ev)
		}
		time.Sleep(5 * time.Millisecond) // waiting for the processor, not measuring time
	}
}

func orderEvent(eventID, intent string, rev int) string {
	return fmt.Sprintf(`{"eventId":%q,"type":"order.%s","occurredAt":"2026-11-03T08:5%d:00Z","order_id":"ord-42","revision":%d,"intent":%q}`,
		eventID, strings.ToLower(intent), rev, rev, intent)
}

func TestDossierScenario(t *testing.T) { stores(t, testDossierScenario) }

func testDossierScenario(t *testing.T, storeURL string) {
	h := startFlows(t, storeURL)

	// create r1: applied.
	create := orderEvent("evt-create", "CREATED", 1)
	if code, resp := shopPost(t, h, "shop", create, nil); code != 200 {
		t.Fatalf("create: %d %s", code, resp)
	}
	if d := settled(t, h, "shop", "evt-create"); d != "applied" {
		t.Fatalf("create r1 = %s, want applied", d)
	}
	// The same delivery again, and the same event under a new delivery:
	// both are duplicates of the one event.
	for i, hdr := range []http.Header{nil, {"X-Delivery-Attempt": {"2"}}} {
		code, resp := shopPost(t, h, "shop", create, hdr)
		if code != 200 || !strings.Contains(resp, `"duplicates":1`) {
			t.Fatalf("repeat %d: %d %s, want 200 reporting a duplicate", i, code, resp)
		}
	}
	// cancel r3 arrives before confirm r2.
	if code, resp := shopPost(t, h, "shop", orderEvent("evt-cancel", "CANCELLED", 3), nil); code != 200 {
		t.Fatalf("cancel: %d %s", code, resp)
	}
	if d := settled(t, h, "shop", "evt-cancel"); d != "applied" {
		t.Fatalf("cancel r3 = %s, want applied", d)
	}
	if code, resp := shopPost(t, h, "shop", orderEvent("evt-confirm", "CONFIRMED", 2), nil); code != 200 {
		t.Fatalf("late confirm: %d %s", code, resp)
	}
	if d := settled(t, h, "shop", "evt-confirm"); d != "stale" {
		t.Fatalf("late confirm r2 = %s, want stale", d)
	}
	if ev := h.events("shop", "evt-create"); ev[0].Deliveries != 3 || ev[0].Disposition != "applied" {
		t.Fatalf("evt-create = %+v, want 3 deliveries of one applied event", ev[0])
	}

	st, err := storeopen.Open(context.Background(), h.cfg.Store)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	proj, err := st.ProjectionGet(ctx, &store.ProjectionGetParams{Flow: "orders", Entity: "ord-42"})
	if err != nil || proj == nil {
		t.Fatalf("projection: %v %v", proj, err)
	}
	if proj.Version != "r3" || string(proj.State) != `"CANCELLED"` {
		t.Fatalf("final projection %s %s, want CANCELLED at revision 3", proj.Version, proj.State)
	}
	effects, err := st.EffectList(ctx, &store.EffectListParams{Flow: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range effects {
		keys = append(keys, e.EpisodeKey)
	}
	want := "orders:ord-42:r1:notify_created orders:ord-42:r3:notify_cancel"
	if strings.Join(keys, " ") != want {
		t.Fatalf("effects %v, want exactly %s", keys, want)
	}
	// The destination refuses both (422): each goes to the exception queue
	// after one call.
	for _, e := range effects {
		waitFor(t, e.EpisodeKey+" to go dead", func() bool {
			got, err := st.EffectGet(ctx, e.ID)
			return err == nil && got.State == store.EffectDead
		})
	}
	var req struct {
		Method, Path string
		Body         struct {
			Order    string
			Revision int
		}
	}
	if err := json.Unmarshal(effects[0].Request, &req); err != nil || req.Method != "POST" || req.Path != "/notify/created" || req.Body.Order != "ord-42" || req.Body.Revision != 1 {
		t.Errorf("request of notify_created = %s (%v)", effects[0].Request, err)
	}

	// A -> B -> A under one causation: the second visit to A is blocked once.
	causation := func(hop int) http.Header {
		return http.Header{"X-Hookledger-Causation": {"cause-7"}, "X-Hookledger-Hop": {fmt.Sprint(hop)}}
	}
	if code, resp := shopPost(t, h, "sys_a", `{"eventId":"a-1","type":"contact.updated","id":"c-1","rev":1}`, causation(0)); code != 200 {
		t.Fatalf("A: %d %s", code, resp)
	}
	if d := settled(t, h, "sys_a", "a-1"); d != "applied" {
		t.Fatalf("first visit to A = %s", d)
	}
	if code, resp := shopPost(t, h, "sys_b", `{"eventId":"b-1","type":"contact.updated","id":"c-1","rev":1}`, causation(1)); code != 200 {
		t.Fatalf("B: %d %s", code, resp)
	}
	if d := settled(t, h, "sys_b", "b-1"); d != "applied" {
		t.Fatalf("visit to B = %s", d)
	}
	if code, resp := shopPost(t, h, "sys_a", `{"eventId":"a-2","type":"contact.updated","id":"c-1","rev":2}`, causation(2)); code != 200 {
		t.Fatalf("A again: %d %s", code, resp)
	}
	if d := settled(t, h, "sys_a", "a-2"); d != "duplicate" {
		t.Fatalf("second visit to A = %s, want blocked as a duplicate of the causation", d)
	}
	blocks, err := st.AuditList(ctx, &store.AuditListParams{Action: "loop_blocked"})
	if err != nil || len(blocks) != 1 || blocks[0].EventID != "a-2" && !strings.Contains(blocks[0].Detail, "cause-7") {
		t.Fatalf("loop_blocked audit rows = %+v (%v), want exactly one for cause-7", blocks, err)
	}
	for flow, wantHop := range map[string]int{"a_to_b": 1, "b_to_a": 2} {
		effs, err := st.EffectList(ctx, &store.EffectListParams{Flow: flow})
		if err != nil || len(effs) != 1 || effs[0].CausationID != "cause-7" || effs[0].Hop != wantHop {
			t.Fatalf("%s effects = %+v (%v), want one carrying cause-7 at hop %d", flow, effs, err, wantHop)
		}
	}

	// The ledger through the admin API.
	code, b := h.get("/api/v1/effects?flow=orders", adminToken)
	var list struct {
		Effects []struct {
			ID         int64  `json:"id"`
			EpisodeKey string `json:"episode_key"`
			State      string `json:"state"`
		} `json:"effects"`
	}
	if code != 200 || json.Unmarshal(b, &list) != nil || len(list.Effects) != 2 || list.Effects[0].EpisodeKey != "orders:ord-42:r1:notify_created" {
		t.Fatalf("GET /api/v1/effects: %d %s", code, b)
	}
	id := list.Effects[0].ID
	// Paging: one effect per page, the cursor leads to the second.
	var page struct {
		Effects []struct {
			EpisodeKey string `json:"episode_key"`
		} `json:"effects"`
		NextCursor string `json:"next_cursor"`
	}
	code, b = h.get("/api/v1/effects?flow=orders&limit=1", adminToken)
	if code != 200 || json.Unmarshal(b, &page) != nil || len(page.Effects) != 1 || page.NextCursor == "" {
		t.Fatalf("first page: %d %s", code, b)
	}
	code, b = h.get("/api/v1/effects?flow=orders&limit=1&cursor="+page.NextCursor, adminToken)
	page.NextCursor = ""
	if code != 200 || json.Unmarshal(b, &page) != nil || len(page.Effects) != 1 ||
		page.Effects[0].EpisodeKey != "orders:ord-42:r3:notify_cancel" || page.NextCursor != "" {
		t.Fatalf("second page: %d %s", code, b)
	}
	if code, _ := h.get("/api/v1/effects?limit=0", adminToken); code != 400 {
		t.Fatalf("limit=0: %d, want 400", code)
	}
	if code, b := h.get(fmt.Sprintf("/api/v1/effects/%d", id), adminToken); code != 200 || !strings.Contains(string(b), `"status":422`) && !strings.Contains(string(b), `"status": 422`) {
		t.Fatalf("GET effect: %d %s, want its one attempt answered 422", code, b)
	}
	if code, _ := h.get(fmt.Sprintf("/api/v1/effects/%d", id), ""); code != 401 {
		t.Fatalf("effects without a token: %d", code)
	}
	post := func(path, body string) (int, string) {
		req, _ := http.NewRequest("POST", h.base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		rb, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(rb)
	}
	if code, b := post(fmt.Sprintf("/api/v1/effects/%d/resolve", id), `{}`); code != 400 || !strings.Contains(b, "note") {
		t.Fatalf("resolve without a note: %d %s", code, b)
	}
	if code, b := post(fmt.Sprintf("/api/v1/effects/%d/resolve", id), `{"note":"sent by hand","actor":"alice"}`); code != 200 || !strings.Contains(b, `"state":"resolved"`) {
		t.Fatalf("resolve: %d %s", code, b)
	}
	if code, b := post(fmt.Sprintf("/api/v1/effects/%d/retry", id), `{"note":"again"}`); code != 409 {
		t.Fatalf("retry of a resolved effect: %d %s, want 409", code, b)
	}

	// The audit trail through the admin API.
	code, b = h.get("/api/v1/audit?action=loop_blocked", adminToken)
	var audit struct {
		Audit []struct {
			Action, Actor, Detail string
			EventID               string `json:"event_id"`
		} `json:"audit"`
	}
	if code != 200 || json.Unmarshal(b, &audit) != nil || len(audit.Audit) != 1 || audit.Audit[0].EventID != "a-2" {
		t.Fatalf("GET /api/v1/audit?action=loop_blocked: %d %s", code, b)
	}
	code, b = h.get("/api/v1/audit?action=effect_resolved", adminToken)
	if code != 200 || !strings.Contains(string(b), "sent by hand") || !strings.Contains(string(b), "operator:alice") {
		t.Fatalf("the resolution is not in the audit trail: %d %s", code, b)
	}
}
