package server

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	stripewebhook "github.com/stripe/stripe-go/v82/webhook"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/signature"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

// t0 is the server's fake "now"; every signature is made for it.
var t0 = time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)

const (
	adminToken   = "test-admin-token"
	stripeSecret = "whsec_e2e_stripe"
	swSecret     = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	hubspotKey   = "hubspot-client-secret"
	klaviyoKey   = "klaviyo-webhook-secret"
	githubKey    = "github-secret"
)

func testConfig(storeURL string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
store: %s
admin:
  token: %s
receive:
  max_body_bytes: 4096
sources:
  - name: stripe
    kind: stripe
    secrets: [%s]
    account: acct_123
  - name: app
    kind: standard-webhooks
    secrets: [%s]
  - name: crm
    kind: hubspot
    version: v3
    secrets: [%s]
    public_url: https://hooks.example.com/hooks/crm
  - name: klaviyo
    kind: klaviyo
    secrets: [%s]
  - name: deals
    kind: pipedrive
    secrets: ["pd-user:pd-pass"]
  - name: github
    kind: hmac
    secrets: [%s]
    hmac:
      header: X-Hub-Signature-256
      prefix: "sha256="
    fields:
      event_id: delivery_key
      type: action
`, storeURL, adminToken, stripeSecret, swSecret, hubspotKey, klaviyoKey, githubKey)
}

type harness struct {
	t    *testing.T
	base string
	cfg  *config.Config
	clk  *clock.Fake
	logs *syncBuffer
	srv  *Server
	// client checks every admin API answer against the OpenAPI document.
	client *http.Client
	// stop stops the server and waits for its clean stop (also run at the
	// test's end; a second call does nothing).
	stop func()
}

// syncBuffer collects the server's log records.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func start(t *testing.T, storeURL string) *harness {
	t.Helper()
	return startWith(t, testConfig(storeURL))
}

func startWith(t *testing.T, yaml string) *harness {
	t.Helper()
	return startAt(t, yaml, t0)
}

func sqliteURL(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "e2e.db") }

func (h *harness) post(path string, body []byte, hdr http.Header) (int, string, http.Header) {
	h.t.Helper()
	req, err := http.NewRequest("POST", h.base+path, bytes.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	for k, vs := range hdr {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func (h *harness) get(path, token string) (int, []byte) {
	h.t.Helper()
	req, _ := http.NewRequest("GET", h.base+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (h *harness) events(source, eventID string) []api.EventJSON {
	h.t.Helper()
	code, b := h.get(fmt.Sprintf("/api/v1/events?source=%s&event_id=%s", source, eventID), adminToken)
	if code != 200 {
		h.t.Fatalf("events API: %d %s", code, b)
	}
	var out api.EventListJSON
	if err := json.Unmarshal(b, &out); err != nil {
		h.t.Fatalf("events API JSON: %v: %s", err, b)
	}
	return out.Events
}

func stripeHeader(body []byte, secret string, at time.Time) http.Header {
	sp := stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: at})
	return http.Header{"Stripe-Signature": {sp.Header}}
}

func stripeBody(id, typ, account string) []byte {
	acct := ""
	if account != "" {
		acct = fmt.Sprintf(`"account":%q,`, account)
	}
	return []byte(fmt.Sprintf(`{"id":%q,"object":"event",%s"type":%q,"created":1762160000,"data":{"object":{"id":"sub_123","status":"active"}}}`, id, acct, typ))
}

func ourSign(t *testing.T, src config.Source, url string, body []byte, eventID string) http.Header {
	t.Helper()
	s, err := signature.New(src.SchemeOptions())
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Sign(&signature.Request{Method: "POST", URL: url, Body: body}, t0, eventID)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *harness) source(name string) config.Source {
	for _, s := range h.cfg.Sources {
		if s.Name == name {
			return s
		}
	}
	h.t.Fatalf("no source %s", name)
	return config.Source{}
}

// stores runs a test against SQLite and PostgreSQL.
func stores(t *testing.T, fn func(t *testing.T, storeURL string)) {
	t.Run("sqlite", func(t *testing.T) { fn(t, sqliteURL(t)) })
	t.Run("postgres", func(t *testing.T) { fn(t, pgtest.NewDatabase(t)) })
}

// Every scheme accepts a correctly signed request and stores its event.
func TestEverySchemeStores(t *testing.T) { stores(t, testEverySchemeStores) }

func testEverySchemeStores(t *testing.T, storeURL string) {
	h := start(t, storeURL)

	// Stripe, signed by Stripe's own library.
	body := stripeBody("evt_stripe_1", "customer.subscription.updated", "acct_123")
	if code, resp, _ := h.post("/hooks/stripe", body, stripeHeader(body, stripeSecret, t0)); code != 200 {
		t.Fatalf("stripe: %d %s", code, resp)
	}

	// Standard Webhooks, signed by the reference Go library.
	wh, err := standardwebhooks.NewWebhook(swSecret)
	if err != nil {
		t.Fatal(err)
	}
	swBody := []byte(`{"type":"order.created","timestamp":"2026-11-03T08:59:00Z","data":{"id":"ORD-42"}}`)
	sig, err := wh.Sign("msg_sw_1", t0, swBody)
	if err != nil {
		t.Fatal(err)
	}
	swHdr := http.Header{"Webhook-Id": {"msg_sw_1"}, "Webhook-Timestamp": {fmt.Sprint(t0.Unix())}, "Webhook-Signature": {sig}}
	if code, resp, _ := h.post("/hooks/app", swBody, swHdr); code != 200 {
		t.Fatalf("standard-webhooks: %d %s", code, resp)
	}

	// HubSpot v3 batch of two, signed for the configured public URL (the
	// server sees 127.0.0.1, as behind a proxy).
	hsBody := []byte(`[{"eventId":100,"subscriptionId":7,"portalId":62515,"appId":1,"occurredAt":1762160340000,"subscriptionType":"deal.propertyChange","attemptNumber":0,"objectId":41208,"propertyName":"amount","propertyValue":"1200","changeSource":"CRM"},
{"eventId":101,"subscriptionId":7,"portalId":62515,"appId":1,"occurredAt":1762160341000,"subscriptionType":"deal.propertyChange","attemptNumber":0,"objectId":41208,"propertyName":"dealstage","propertyValue":"won","changeSource":"CRM"}]`)
	hsHdr := ourSign(t, h.source("crm"), "https://hooks.example.com/hooks/crm", hsBody, "")
	if code, resp, _ := h.post("/hooks/crm", hsBody, hsHdr); code != 200 || !strings.Contains(resp, `"events":2`) {
		t.Fatalf("hubspot: %d %s", code, resp)
	}

	// Klaviyo.
	kBody := []byte(`{"data":[{"topic":"profile.subscribed","external_id":"kl_evt_1","payload":{"data":{"attributes":{"datetime":"2026-11-03T08:58:00Z"},"relationships":{"profile":{"data":{"id":"01PROFILE"}}}}}}],"meta":{"klaviyo_account_id":"KA1"}}`)
	kHdr := ourSign(t, h.source("klaviyo"), "", kBody, "")
	if code, resp, _ := h.post("/hooks/klaviyo", kBody, kHdr); code != 200 {
		t.Fatalf("klaviyo: %d %s", code, resp)
	}

	// Pipedrive: basic auth, v2 envelope.
	pdBody := []byte(`{"meta":{"id":"pd-evt-1","action":"change","entity":"deal","entity_id":"41208","company_id":"9","timestamp":"2026-11-03T08:57:00Z","attempt":1},"data":{"id":41208}}`)
	req, _ := http.NewRequest("POST", h.base+"/hooks/deals", bytes.NewReader(pdBody))
	req.SetBasicAuth("pd-user", "pd-pass")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("pipedrive: %d", resp.StatusCode)
	}

	// Generic HMAC, GitHub style, signed here with crypto/hmac as an
	// independent oracle.
	ghBody := []byte(`{"delivery_key":"gh-1","action":"opened","pull_request":{"id":5}}`)
	m := hmac.New(sha256.New, []byte(githubKey))
	m.Write(ghBody)
	ghHdr := http.Header{"X-Hub-Signature-256": {"sha256=" + hex.EncodeToString(m.Sum(nil))}}
	if code, resp, _ := h.post("/hooks/github", ghBody, ghHdr); code != 200 {
		t.Fatalf("hmac: %d %s", code, resp)
	}

	for _, want := range []struct{ source, id, typ, entity string }{
		{"stripe", "evt_stripe_1", "customer.subscription.updated", "sub_123"},
		{"app", "msg_sw_1", "order.created", ""},
		{"klaviyo", "kl_evt_1", "profile.subscribed", "01PROFILE"},
		{"deals", "pd-evt-1", "", "41208"},
		{"github", "gh-1", "opened", ""},
	} {
		ev := h.events(want.source, want.id)
		if len(ev) != 1 {
			t.Fatalf("%s/%s: %d events stored, want 1", want.source, want.id, len(ev))
		}
		e := ev[0]
		if (want.typ != "" && e.Type != want.typ) || (want.entity != "" && e.Entity != want.entity) || e.Deliveries != 1 || e.Disposition != "unrouted" {
			t.Errorf("%s/%s = %+v", want.source, want.id, e)
		}
		if e.ReceivedAt != t0.Format(time.RFC3339Nano) {
			t.Errorf("%s received_at = %s, want the server clock %s", want.source, e.ReceivedAt, t0)
		}
	}
	if ev := h.events("stripe", "evt_stripe_1"); ev[0].OccurredAt == nil || *ev[0].OccurredAt != "2025-11-03T08:53:20Z" {
		t.Errorf("stripe occurred_at = %v, want the payload's created time, apart from received_at", ev[0].OccurredAt)
	}
	code, b := h.get("/api/v1/events?source=crm", adminToken)
	if code != 200 || strings.Count(string(b), `"source":"crm"`) != 2 {
		t.Fatalf("hubspot batch not split into two events: %s", b)
	}
}

func TestStatusCodes(t *testing.T) { stores(t, testStatusCodes) }

func testStatusCodes(t *testing.T, storeURL string) {
	h := start(t, storeURL)
	body := stripeBody("evt_1", "invoice.paid", "acct_123")
	good := stripeHeader(body, stripeSecret, t0)

	cases := []struct {
		name string
		path string
		body []byte
		hdr  http.Header
		code int
		want string
	}{
		{"stored", "/hooks/stripe", body, good, 200, `"stored"`},
		{"duplicate is 200", "/hooks/stripe", body, good, 200, `"duplicates":1`},
		{"same event, new delivery signature", "/hooks/stripe", body, stripeHeader(body, stripeSecret, t0.Add(-time.Minute)), 200, `"duplicates":1`},
		{"unknown event type is 200", "/hooks/stripe", stripeBody("evt_odd", "brand.new.type", ""), stripeHeader(stripeBody("evt_odd", "brand.new.type", ""), stripeSecret, t0), 200, `"stored"`},
		{"missing signature", "/hooks/stripe", body, nil, 401, "Stripe-Signature"},
		{"wrong secret", "/hooks/stripe", body, stripeHeader(body, "whsec_wrong", t0), 401, "mismatch"},
		{"stale timestamp", "/hooks/stripe", body, stripeHeader(body, stripeSecret, t0.Add(-6*time.Minute)), 401, "timestamp"},
		{"future timestamp", "/hooks/stripe", body, stripeHeader(body, stripeSecret, t0.Add(6*time.Minute)), 401, "timestamp"},
		{"tampered body", "/hooks/stripe", append(bytes.Clone(body[:len(body)-1]), ' ', '}'), good, 401, "mismatch"},
		{"tenant mismatch", "/hooks/stripe", stripeBody("evt_other", "invoice.paid", "acct_999"), stripeHeader(stripeBody("evt_other", "invoice.paid", "acct_999"), stripeSecret, t0), 403, "account"},
		{"malformed JSON", "/hooks/stripe", []byte(`{"id":`), stripeHeader([]byte(`{"id":`), stripeSecret, t0), 400, ""},
		{"missing event id", "/hooks/stripe", []byte(`{"type":"invoice.paid"}`), stripeHeader([]byte(`{"type":"invoice.paid"}`), stripeSecret, t0), 400, "id"},
		{"unknown source", "/hooks/nosuch", body, good, 404, "unknown source"},
		{"body over limit", "/hooks/stripe", bytes.Repeat([]byte("x"), 5000), good, 413, "limit"},
	}
	for _, tc := range cases {
		code, resp, _ := h.post(tc.path, tc.body, tc.hdr)
		if code != tc.code || !strings.Contains(resp, tc.want) {
			t.Errorf("%s: %d %s, want %d containing %q", tc.name, code, resp, tc.code, tc.want)
		}
		if strings.Contains(resp, stripeSecret) || (tc.hdr != nil && strings.Contains(resp, strings.Split(tc.hdr.Get("Stripe-Signature"), "v1=")[len(strings.Split(tc.hdr.Get("Stripe-Signature"), "v1="))-1])) {
			t.Errorf("%s: response leaks a secret or signature: %s", tc.name, resp)
		}
	}

	if ev := h.events("stripe", "evt_1"); len(ev) != 1 || ev[0].Deliveries != 3 {
		t.Fatalf("evt_1 = %+v, want one event with 3 deliveries", ev)
	}
	if ev := h.events("stripe", "evt_odd"); len(ev) != 1 || ev[0].Type != "brand.new.type" || ev[0].Disposition != "unrouted" {
		t.Fatalf("unknown type not stored as unrouted (WH05): %+v", ev)
	}
	for _, id := range []string{"evt_other"} {
		if ev := h.events("stripe", id); len(ev) != 0 {
			t.Fatalf("refused event %s was stored", id)
		}
	}

	// The tenant refusal is audited.
	st, err := storeopen.Open(context.Background(), h.cfg.Store)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rows, err := st.AuditList(context.Background(), &store.AuditListParams{Action: "tenant_mismatch"})
	if err != nil || len(rows) != 1 || rows[0].EventID != "evt_other" || !strings.Contains(rows[0].Detail, "acct_999") {
		t.Fatalf("tenant audit rows = %+v (%v)", rows, err)
	}
	// No flow subscribes to anything here: each new event was stored
	// unrouted at receipt, with its audit row, and duplicates add none.
	rows, err = st.AuditList(context.Background(), &store.AuditListParams{Action: "disposition"})
	if err != nil || len(rows) != 2 || rows[0].EventID != "evt_1" || rows[1].EventID != "evt_odd" || !strings.Contains(rows[1].Detail, "unrouted") {
		t.Fatalf("disposition audit rows = %+v (%v), want one per new event", rows, err)
	}

	// A weaker HubSpot scheme on the v3-pinned source is refused.
	v1, err := signature.New(signature.Options{Kind: "hubspot", Version: "v1", Secrets: []string{hubspotKey}})
	if err != nil {
		t.Fatal(err)
	}
	hsBody := []byte(`[{"eventId":1,"subscriptionId":2,"portalId":3,"occurredAt":1762160340000,"subscriptionType":"contact.creation","objectId":4}]`)
	v1h, _ := v1.Sign(&signature.Request{Method: "POST", URL: "https://hooks.example.com/hooks/crm", Body: hsBody}, t0, "")
	if code, resp, _ := h.post("/hooks/crm", hsBody, v1h); code != 401 {
		t.Errorf("v1 signature on a v3-pinned source: %d %s, want 401", code, resp)
	}
}

func TestAdminAPIAndProbes(t *testing.T) {
	h := start(t, sqliteURL(t))
	for i := range 5 {
		b := stripeBody(fmt.Sprint("evt_page_", i), "invoice.paid", "")
		if code, resp, _ := h.post("/hooks/stripe", b, stripeHeader(b, stripeSecret, t0)); code != 200 {
			t.Fatalf("post: %d %s", code, resp)
		}
	}
	if code, _ := h.get("/api/v1/events", ""); code != 401 {
		t.Errorf("no token: %d, want 401", code)
	}
	if code, _ := h.get("/api/v1/events", "wrong"); code != 401 {
		t.Errorf("wrong token: %d, want 401", code)
	}
	// Page through with cursors, two at a time.
	var ids []string
	cursor := ""
	for range 10 {
		code, b := h.get("/api/v1/events?source=stripe&limit=2&cursor="+cursor, adminToken)
		if code != 200 {
			t.Fatalf("page: %d %s", code, b)
		}
		var page api.EventListJSON
		if err := json.Unmarshal(b, &page); err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Events {
			ids = append(ids, e.EventID)
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if len(ids) != 5 || ids[0] != "evt_page_0" || ids[4] != "evt_page_4" {
		t.Fatalf("paged ids %v", ids)
	}
	if code, _ := h.get("/api/v1/events?cursor=garbage!", adminToken); code != 400 {
		t.Errorf("bad cursor: %d, want 400", code)
	}
	// The pinned JSON shape, key by key.
	_, b := h.get("/api/v1/events?source=stripe&event_id=evt_page_0", adminToken)
	var raw map[string][]map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"source", "event_id", "type", "entity", "occurred_at", "received_at", "deliveries", "disposition"} {
		if _, ok := raw["events"][0][k]; !ok {
			t.Errorf("event JSON lacks %q: %s", k, b)
		}
	}
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready", "/metrics": `hookledger_receive_requests_total{code="200",source="stripe"} 5`} {
		code, b := h.get(path, "")
		if code != 200 || !strings.Contains(string(b), want) {
			t.Errorf("%s: %d, body lacks %q", path, code, want)
		}
	}
}

// When the store cannot commit, the sender gets 503 with Retry-After and
// nothing is acknowledged; once the store is back, the retry is stored.
func TestStoreFailureIs503(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	h := start(t, dbURL)
	body := stripeBody("evt_before", "invoice.paid", "")
	if code, resp, _ := h.post("/hooks/stripe", body, stripeHeader(body, stripeSecret, t0)); code != 200 {
		t.Fatalf("before the outage: %d %s", code, resp)
	}

	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.ServerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	// The database refuses new connections and drops the server's.
	cutOff(t, admin, dbName)
	during := stripeBody("evt_during", "invoice.paid", "")
	code, resp, hdr := h.post("/hooks/stripe", during, stripeHeader(during, stripeSecret, t0))
	if code != 503 || hdr.Get("Retry-After") != "5" {
		t.Fatalf("during the outage: %d (Retry-After %q) %s, want 503 with Retry-After 5", code, hdr.Get("Retry-After"), resp)
	}
	if code, _ := h.get("/readyz", ""); code != 503 {
		t.Errorf("/readyz during the outage: %d, want 503", code)
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+dbName+" ALLOW_CONNECTIONS true"); err != nil {
		t.Fatal(err)
	}
	if ev := h.events("stripe", "evt_during"); len(ev) != 0 {
		t.Fatalf("an event answered 503 was stored: %+v", ev)
	}
	// The sender's retry succeeds.
	code, resp, _ = h.post("/hooks/stripe", during, stripeHeader(during, stripeSecret, t0))
	if code != 200 {
		t.Fatalf("retry after the outage: %d %s", code, resp)
	}
	if ev := h.events("stripe", "evt_during"); len(ev) != 1 || ev[0].Deliveries != 1 {
		t.Fatalf("retried event = %+v, want stored once", ev)
	}
}

// /readyz reflects whether the store can commit, not only whether it
// answers: with the SQLite write lock held by another process every webhook
// gets 503, so the process must not be ready either.
func TestReadyzFollowsCommits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ready.db")
	h := start(t, "sqlite:"+path)
	if code, b := h.get("/readyz", ""); code != 200 {
		t.Fatalf("/readyz at start: %d %s", code, b)
	}
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(100)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	h.clk.Advance(2 * time.Second) // past the cached answer
	if code, b := h.get("/readyz", ""); code != 503 || !strings.Contains(string(b), "cannot commit") {
		t.Fatalf("/readyz with the write lock held elsewhere: %d %s, want 503", code, b)
	}
	if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	// The probe that timed out may still be waiting for the lock; once it
	// ends, a fresh one commits.
	deadline := time.Now().Add(30 * time.Second)
	for {
		h.clk.Advance(2 * time.Second)
		code, b := h.get("/readyz", "")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz after the lock was released: still %d %s after 30 s", code, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// An event id at the 512-byte limit fits PostgreSQL's unique index, so it
// is stored and its retry is a duplicate (never a 503 loop); one byte more
// is a precise 400.
func TestLongEventIDsOnPostgres(t *testing.T) {
	h := start(t, pgtest.NewDatabase(t))
	atLimit := "evt_" + strings.Repeat("9", store.MaxIdentityBytes-4)
	body := stripeBody(atLimit, "invoice.paid", "")
	for i := range 2 {
		if code, resp, _ := h.post("/hooks/stripe", body, stripeHeader(body, stripeSecret, t0)); code != 200 {
			t.Fatalf("delivery %d of a %d-byte id: %d %s, want 200", i+1, len(atLimit), code, resp)
		}
	}
	if ev := h.events("stripe", atLimit); len(ev) != 1 || ev[0].Deliveries != 2 {
		t.Fatalf("events = %+v, want one event with two deliveries", ev)
	}
	over := atLimit + "9"
	body = stripeBody(over, "invoice.paid", "")
	code, resp, _ := h.post("/hooks/stripe", body, stripeHeader(body, stripeSecret, t0))
	if code != 400 || !strings.Contains(resp, "event id: is 513 bytes long") {
		t.Fatalf("513-byte id: %d %s, want 400 naming the limit", code, resp)
	}
}

// While the store is down the log says so once per failing activity, on one
// line each, instead of at every poll; when it is back, the log says that.
func TestStoreOutageIsLoggedOnceAndRecoveryToo(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	h := startFlows(t, dbURL) // flows and destinations: both background loops poll the store
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.ServerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	u, _ := url.Parse(dbURL)
	dbName := strings.TrimPrefix(u.Path, "/")
	cutOff(t, admin, dbName)
	// Until then a loop may fail on a new connection and then succeed on
	// one still open: that episode is logged and recovered before the
	// outage proper, which begins here.
	outage := len(h.logs.String())
	for i := range 20 {
		body := stripeBody(fmt.Sprintf("evt_down_%d", i), "invoice.paid", "")
		if code, _, _ := h.post("/hooks/stripe", body, stripeHeader(body, stripeSecret, t0)); code != 503 {
			t.Fatalf("during the outage: %d, want 503", code)
		}
	}
	// Wait until both background loops have failed a few times (each polls
	// every 10 ms), by what they log.
	waitFor(t, "the background loops to fail", func() bool {
		l := h.logs.String()
		return strings.Contains(l, "processing step failed") && strings.Contains(l, "delivery step failed")
	})
	time.Sleep(200 * time.Millisecond) // about twenty more polls of each loop
	logs := h.logs.String()
	for msg, recovered := range map[string]string{"cannot store webhook": "storing webhooks recovered",
		"processing step failed": "processing recovered", "delivery step failed": "delivery recovered"} {
		// The outage's episode starts after the last recovery, which must
		// come before the outage proper.
		from := strings.LastIndex(logs, recovered) + 1
		if from > outage {
			t.Errorf("%q logged during the outage:\n%s", recovered, logs)
		}
		if n := strings.Count(logs[from:], msg); n != 1 {
			t.Errorf("%q logged %d times during the outage, want once:\n%s", msg, n, logs)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		if !strings.HasPrefix(line, "time=") {
			t.Errorf("a log record spans several lines: %q", line)
		}
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+dbName+" ALLOW_CONNECTIONS true"); err != nil {
		t.Fatal(err)
	}
	body := stripeBody("evt_back", "invoice.paid", "")
	if code, resp, _ := h.post("/hooks/stripe", body, stripeHeader(body, stripeSecret, t0)); code != 200 {
		t.Fatalf("after the outage: %d %s", code, resp)
	}
	waitFor(t, "the recovery to be logged", func() bool {
		l := h.logs.String()
		return strings.Contains(l, "storing webhooks recovered") && strings.Contains(l, "processing recovered") &&
			strings.Contains(l, "delivery recovered")
	})
}

// cutOff makes the database refuse new connections and ends every
// connection it has, returning once none is left. A terminated backend
// ends on its own time, and one still alive could store a webhook the
// test expects refused. A connection that was past the database's check
// but not yet listed when connections were refused comes through after
// the first round of terminations and stays in the server's pool, so
// every poll terminates what it finds. Only client backends count: an
// autovacuum worker of the database is listed too, and the launcher may
// start one at any time.
func cutOff(t *testing.T, admin *pgx.Conn, dbName string) {
	t.Helper()
	ctx := context.Background()
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+dbName+" ALLOW_CONNECTIONS false"); err != nil {
		t.Fatal(err)
	}
	const clients = "FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'"
	waitFor(t, "the server's connections to end", func() bool {
		if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) "+clients, dbName); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) "+clients, dbName).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
}

// waitFor polls cond until it holds, failing with what it waited for after
// a generous deadline (the machine may be busy; nothing is timed).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after 60 s waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
