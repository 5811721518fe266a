package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

const token = "admin-token"

var t0 = time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)

// fixture is the API in front of a real SQLite store, with helpers that
// put events and effects into it through the store's own methods.
type fixture struct {
	t   *testing.T
	st  *sqlite.Store
	srv *httptest.Server
	log *bytes.Buffer
	ctx context.Context
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "api.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	h := api.New(st, token, slog.New(slog.NewTextHandler(&log, nil)), func() time.Time { return t0.Add(time.Hour) })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &fixture{t: t, st: st, srv: srv, log: &log, ctx: ctx}
}

// event stores one delivery and returns the event's pk.
func (f *fixture) event(source, id, typ, entity string) int64 {
	f.t.Helper()
	res, err := f.st.InboxCommit(f.ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "r-" + id, Source: source, EventID: id, Type: typ, Entity: entity, ReceivedAt: t0, Body: []byte(`{}`),
	}}}}})
	if err != nil || res[0].Err != nil {
		f.t.Fatal(err, res)
	}
	return res[0].Items[0].EventPK
}

func (f *fixture) route(pk int64, routes ...store.Route) {
	f.t.Helper()
	if err := f.st.EventRoute(f.ctx, &store.EventRouteParams{Now: t0, Decisions: []*store.RouteDecision{{EventPK: pk, Routes: routes}}}); err != nil {
		f.t.Fatal(err)
	}
}

// apply processes the pending work of flow/entity, each item asking for
// one effect to dest, and returns the effects' ids.
func (f *fixture) apply(flow, entity, dest string) []int64 {
	f.t.Helper()
	leases, err := f.st.EntityClaim(f.ctx, &store.EntityClaimParams{Owner: "w", Now: t0, LeaseFor: time.Minute, Limit: 100})
	if err != nil {
		f.t.Fatal(err)
	}
	var ids []int64
	for _, l := range leases {
		if l.Flow == flow && l.Entity == entity {
			work, err := f.st.WorkListPending(f.ctx, &store.WorkListPendingParams{Flow: flow, Entity: entity})
			if err != nil {
				f.t.Fatal(err)
			}
			for _, w := range work {
				key := fmt.Sprintf("%s:%s:r%d:notify", flow, entity, w.Event.PK)
				if _, err := f.st.FlowApply(f.ctx, &store.FlowApplyParams{Lease: l, Now: t0, WorkID: w.ID, EventPK: w.Event.PK, Actor: "w",
					Version: fmt.Sprint("r", w.Event.PK), VersionSort: fmt.Sprintf("%010d", w.Event.PK), Ordered: true, State: json.RawMessage(`{}`),
					Effects: []*store.EffectInsert{{EpisodeKey: key, Effect: fmt.Sprint("notify", w.Event.PK), Destination: dest, Request: json.RawMessage(`{}`)}},
				}); err != nil {
					f.t.Fatal(err)
				}
				es, err := f.st.EffectList(f.ctx, &store.EffectListParams{Flow: flow, Entity: entity, Limit: 1000})
				if err != nil {
					f.t.Fatal(err)
				}
				ids = append(ids, es[len(es)-1].ID)
			}
		}
		if err := f.st.EntityRelease(f.ctx, &store.EntityReleaseParams{Lease: l, Now: t0}); err != nil {
			f.t.Fatal(err)
		}
	}
	return ids
}

// settle claims effect id (giving back any other due effect) and settles
// it in state with class.
func (f *fixture) settle(id int64, state store.EffectState, class store.ErrorClass) {
	f.t.Helper()
	claims, err := f.st.EffectClaim(f.ctx, &store.EffectClaimParams{Owner: "d", Now: t0, LeaseFor: time.Minute, Limit: 100})
	if err != nil {
		f.t.Fatal(err)
	}
	found := false
	for _, c := range claims {
		if c.ID != id {
			if err := f.st.EffectRelease(f.ctx, &store.EffectReleaseParams{EffectID: c.ID, Token: c.Token, Now: t0}); err != nil {
				f.t.Fatal(err)
			}
			continue
		}
		found = true
		if err := f.st.EffectSettle(f.ctx, &store.EffectSettleParams{EffectID: id, Token: c.Token, Now: t0, Actor: "d", State: state,
			AddAttempt: true, Class: class, Reason: "HTTP 400", Attempt: &store.Attempt{StartedAt: t0, Status: 400, Class: class}}); err != nil {
			f.t.Fatal(err)
		}
	}
	if !found {
		f.t.Fatalf("effect %d not claimable", id)
	}
}

func (f *fixture) do(method, path, body string) (int, []byte) {
	f.t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.StatusCode, b
}

func (f *fixture) get(path string, into any) int {
	f.t.Helper()
	code, b := f.do(http.MethodGet, path, "")
	if code == http.StatusOK && into != nil {
		if err := json.Unmarshal(b, into); err != nil {
			f.t.Fatalf("GET %s: %v in %s", path, err, b)
		}
	}
	return code
}

// A store that fails (here: closed under the running API) is answered 503
// "store unavailable" by every resource, for reads and operator actions
// alike; what the database said goes to the log only.
func TestStoreFailureIs503(t *testing.T) {
	f := newFixture(t)
	pk := f.event("shop", "e1", "order.created", "")
	f.route(pk, store.Route{Flow: "orders", Entity: "o1", OrderKey: "1"})
	id := f.apply("orders", "o1", "crm")[0]
	f.settle(id, store.EffectDead, store.ClassPermanent)
	if err := f.st.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/api/v1/events", ""},
		{"GET", "/api/v1/events?entity=o1", ""},
		{"GET", "/api/v1/effects", ""},
		{"GET", "/api/v1/effects?state=exceptions", ""},
		{"GET", fmt.Sprintf("/api/v1/effects/%d", id), ""},
		{"POST", fmt.Sprintf("/api/v1/effects/%d/retry", id), `{"note":"fixed"}`},
		{"POST", fmt.Sprintf("/api/v1/effects/%d/resolve", id), `{"note":"done by hand"}`},
		{"POST", fmt.Sprintf("/api/v1/effects/%d/assign", id), `{"owner":"bob"}`},
		{"GET", "/api/v1/audit?entity=o1", ""},
	} {
		f.log.Reset()
		code, b := f.do(c.method, c.path, c.body)
		if code != http.StatusServiceUnavailable || strings.TrimSpace(string(b)) != `{"error":"store unavailable"}` {
			t.Errorf("%s %s: %d %s, want 503 {\"error\":\"store unavailable\"}", c.method, c.path, code, b)
		}
		if !strings.Contains(f.log.String(), "database is closed") {
			t.Errorf("%s %s: the store's error is not in the log: %q", c.method, c.path, f.log.String())
		}
	}
}

// An operator's mistakes are 4xx naming what is wrong; nothing changes.
func TestOperateRefusals(t *testing.T) {
	f := newFixture(t)
	pk := f.event("shop", "e1", "order.created", "")
	f.route(pk, store.Route{Flow: "orders", Entity: "o1", OrderKey: "1"})
	id := f.apply("orders", "o1", "crm")[0]
	f.settle(id, store.EffectDone, store.ClassNone)
	for _, c := range []struct {
		path, body string
		code       int
		says       string
	}{
		{fmt.Sprintf("/api/v1/effects/%d/resolve", id), `{}`, 400, "note"},
		{fmt.Sprintf("/api/v1/effects/%d/assign", id), `{"ownr":"bob"}`, 400, "ownr"},
		{fmt.Sprintf("/api/v1/effects/%d/assign", id), `{"owner":`, 400, "body"},
		{fmt.Sprintf("/api/v1/effects/%d/retry", id), `{"note":"again"}`, 409, "retry"},
		{"/api/v1/effects/424242/retry", `{"note":"again"}`, 404, "no such effect"},
		{"/api/v1/effects/x/retry", ``, 400, "id"},
	} {
		code, b := f.do(http.MethodPost, c.path, c.body)
		if code != c.code || !strings.Contains(string(b), c.says) {
			t.Errorf("POST %s %s: %d %s, want %d saying %s", c.path, c.body, code, b, c.code, c.says)
		}
	}
	var audit struct{ Audit []struct{ Actor string } }
	if f.get("/api/v1/audit?event_id=e1", &audit); slices.ContainsFunc(audit.Audit, func(a struct{ Actor string }) bool {
		return strings.HasPrefix(a.Actor, "operator:")
	}) {
		t.Fatalf("a refused action was audited: %+v", audit)
	}
}
