package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/openapi/openapitest"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

const compensateYAML = `sources:
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
    state: '{"status": event.status}'
    effects:
      - name: confirm
        destination: mail
        request: {path: '"/mails"', body: '{"order": entity}'}
        compensation:
          method: DELETE
          path: '"/mails/" + pathEscape(original.destination_ref)'
      - name: audit
        destination: mail
        request: {path: '"/audit"'}
destinations:
  - name: mail
    base_url: http://127.0.0.1:1
    allow_private_networks: true
`

// compensateFixture is the API with compensation served by a real flow
// engine over a real SQLite store: the order's two effects are done.
type compensateFixture struct {
	t       *testing.T
	ctx     context.Context
	st      *sqlite.Store
	srv     *httptest.Server
	eng     *flow.Engine
	confirm *store.Effect
	audit   *store.Effect
}

func newCompensateFixture(t *testing.T) *compensateFixture {
	t.Helper()
	ctx := context.Background()
	cfg, err := config.Parse("hookledger.yaml", []byte(compensateYAML), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "api.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(t0)
	eng := flow.New(cfg, st, flow.Options{Clock: clk})
	res, err := st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "r1", Source: "shop", EventID: "e1", Type: "order.placed", ReceivedAt: t0, OccurredAt: t0,
		Body: []byte(`{"order_id":"o1","rev":1,"status":"placed"}`),
	}}}}})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	if err := eng.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	claims, err := st.EffectClaim(ctx, &store.EffectClaimParams{Owner: "w", Now: t0, LeaseFor: time.Minute, Limit: 10})
	if err != nil || len(claims) != 2 {
		t.Fatalf("claims %v %v", claims, err)
	}
	f := &compensateFixture{t: t, ctx: ctx, st: st, eng: eng}
	for _, c := range claims {
		if err := st.EffectSettle(ctx, &store.EffectSettleParams{EffectID: c.ID, Token: c.Token, Now: t0, Actor: "w", State: store.EffectDone,
			AddAttempt: true, Attempt: &store.Attempt{Status: 201}, DestinationRef: "m-" + c.Effect.Effect}); err != nil {
			t.Fatal(err)
		}
		e, _ := st.EffectGet(ctx, c.ID)
		if c.Effect.Effect == "confirm" {
			f.confirm = e
		} else {
			f.audit = e
		}
	}
	h := api.New(st, token, slog.New(slog.DiscardHandler), func() time.Time { return t0.Add(time.Hour) })
	h.ServeCompensations(eng)
	f.srv = httptest.NewServer(openapitest.Wrap(t, h))
	t.Cleanup(f.srv.Close)
	return f
}

// post asks to compensate effect id and returns the status, the error
// message (if any) and the effect (if any) of the answer.
func (f *compensateFixture) post(id int64, body string) (int, string, json.RawMessage) {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/api/v1/effects/%d/compensate", f.srv.URL, id), bytes.NewReader([]byte(body)))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Error  string          `json:"error"`
		Effect json.RawMessage `json:"effect"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		f.t.Fatalf("answer %d is not JSON: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, out.Error, out.Effect
}

// The requests the endpoint refuses before the ledger changes.
func TestCompensateRefusals(t *testing.T) {
	f := newCompensateFixture(t)
	cases := []struct {
		name string
		id   int64
		body string
		code int
		want string
	}{
		{"no note", f.confirm.ID, `{}`, 400, "note: required"},
		{"blank note", f.confirm.ID, `{"note": "  "}`, 400, "note: required"},
		{"no body", f.confirm.ID, ``, 400, "note: required"},
		{"unknown field", f.confirm.ID, `{"note": "x", "reason": "y"}`, 400, `unknown field "reason"`},
		{"not JSON", f.confirm.ID, `note=x`, 400, "expected JSON"},
		{"unknown effect", 999, `{"note": "x"}`, 404, "no such effect"},
		{"no compensation template", f.audit.ID, `{"note": "x"}`, 422, `effect "audit" has no compensation request`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, msg, _ := f.post(tc.id, tc.body)
			if code != tc.code || !strings.Contains(msg, tc.want) {
				t.Fatalf("%d %s, want %d containing %q", code, msg, tc.code, tc.want)
			}
		})
	}
	if es, _ := f.st.EffectList(f.ctx, &store.EffectListParams{Limit: 10}); len(es) != 2 {
		t.Errorf("%d effects after refusals, want the 2 there were", len(es))
	}
}

// A done effect is compensated once: 201 with the new effect, rendered
// from the template with the destination's reference; a second request
// is a conflict.
func TestCompensateCreatesTheCompensationOnce(t *testing.T) {
	f := newCompensateFixture(t)
	code, msg, effect := f.post(f.confirm.ID, `{"note": "customer cancelled by phone", "actor": "alice"}`)
	if code != http.StatusCreated {
		t.Fatalf("compensate: %d %s", code, msg)
	}
	var e api.EffectJSON
	if err := json.Unmarshal(effect, &e); err != nil {
		t.Fatal(err)
	}
	if e.Compensates != f.confirm.ID || e.EpisodeKey != f.confirm.EpisodeKey+":compensate" || e.Effect != "confirm:compensate" ||
		e.State != "approved" || e.Destination != "mail" {
		t.Fatalf("compensation %+v", e)
	}
	stored, err := f.st.EffectGet(f.ctx, e.ID)
	if err != nil || stored == nil || string(stored.Request) != `{"method":"DELETE","path":"/mails/m-confirm"}` {
		t.Fatalf("stored compensation %+v %v", stored, err)
	}
	if code, msg, _ := f.post(f.confirm.ID, `{"note": "again"}`); code != http.StatusConflict || !strings.Contains(msg, "already compensated") {
		t.Fatalf("second compensate: %d %s, want 409", code, msg)
	}
	if code, msg, _ := f.post(e.ID, `{"note": "undo the undo"}`); code != http.StatusConflict || !strings.Contains(msg, "itself the compensation") {
		t.Fatalf("compensate a compensation: %d %s, want 409", code, msg)
	}
}

// An effect that was never done cannot be compensated: 409 naming its
// state, and nothing is created.
func TestCompensateWrongState(t *testing.T) {
	f := newCompensateFixture(t)
	res, err := f.st.InboxCommit(f.ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "r2", Source: "shop", EventID: "e2", Type: "order.placed", ReceivedAt: t0, OccurredAt: t0,
		Body: []byte(`{"order_id":"o2","rev":1,"status":"placed"}`),
	}}}}})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	if err := f.eng.Drain(f.ctx); err != nil {
		t.Fatal(err)
	}
	es, err := f.st.EffectList(f.ctx, &store.EffectListParams{Entity: "o2", Limit: 10})
	if err != nil || len(es) != 2 {
		t.Fatalf("o2 effects %v %v", es, err)
	}
	pending := es[0]
	code, msg, _ := f.post(pending.ID, `{"note": "x"}`)
	if code != http.StatusConflict || !strings.Contains(msg, "is approved; only a done, acknowledged or resolved effect") {
		t.Fatalf("%d %s, want 409 naming the state", code, msg)
	}
}
