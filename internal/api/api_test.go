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
	"github.com/hookledger/hookledger/internal/openapi/openapitest"
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
	h   *api.Handler
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
	srv := httptest.NewServer(openapitest.Wrap(t, h))
	t.Cleanup(srv.Close)
	return &fixture{t: t, st: st, srv: srv, h: h, log: &log, ctx: ctx}
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

type eventList struct {
	Events []struct {
		Source, Type, Entity, Disposition string
		EventID                           string `json:"event_id"`
		Routes                            []api.RouteJSON
	}
	NextCursor string `json:"next_cursor"`
}

type effectList struct {
	Effects []struct {
		ID         int64
		State      string
		EpisodeKey string `json:"episode_key"`
	}
	NextCursor string `json:"next_cursor"`
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
		{"GET", "/api/v1/exceptions", ""},
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

// Every list answers 400 naming the parameter for a parameter it does not
// know, one given twice, or a value it cannot use.
func TestListsRefuseWhatTheyCannotUse(t *testing.T) {
	f := newFixture(t)
	for path, param := range map[string]string{
		"/api/v1/events?entitty=o1":              "entitty",
		"/api/v1/events?state=dead":              "state",
		"/api/v1/events?disposition=bogus":       "disposition",
		"/api/v1/events?received_from=yesterday": "received_from",
		"/api/v1/events?occurred_to=2026-11-03":  "occurred_to",
		"/api/v1/events?received_from=2026-11-03T10:00:00Z&received_to=2026-11-03T09:00:00Z": "received_to",
		"/api/v1/events?limit=0":              "limit",
		"/api/v1/events?limit=1001":           "limit",
		"/api/v1/events?cursor=garbage!":      "cursor",
		"/api/v1/events?source=a&source=b":    "source",
		"/api/v1/audit?flow=orders":           "flow",
		"/api/v1/audit?from=now":              "from",
		"/api/v1/audit?limit=x":               "limit",
		"/api/v1/effects?state=bogus":         "state",
		"/api/v1/effects?state=dead,bogus":    "state",
		"/api/v1/effects?class=flaky":         "class",
		"/api/v1/effects?updated_from=1h":     "updated_from",
		"/api/v1/effects?deadline_missed=yes": "deadline_missed",
		"/api/v1/effects?compensations=1":     "compensations",
		"/api/v1/effects?disposition=applied": "disposition",
		"/api/v1/effects/1?verbose=1":         "verbose",
		// Text no driver can compare is the client's mistake, never a
		// store failure (503) the client would retry.
		"/api/v1/events?event_id=a%00b":                    "event_id",
		"/api/v1/events?entity=%ff":                        "entity",
		"/api/v1/effects?flow=%00":                         "flow",
		"/api/v1/audit?source=x%00":                        "source",
		"/api/v1/exceptions?kind=effects":                  "kind",
		"/api/v1/exceptions?state=dead":                    "state",
		"/api/v1/exceptions?cursor=" + api.EncodeCursor(3): "cursor",
		"/api/v1/exceptions?limit=0":                       "limit",
	} {
		code, b := f.do(http.MethodGet, path, "")
		var e struct{ Error, Param string }
		if code != http.StatusBadRequest || json.Unmarshal(b, &e) != nil || e.Param != param || !strings.HasPrefix(e.Error, param+": ") {
			t.Errorf("GET %s: %d %s, want 400 naming %q", path, code, b, param)
		}
	}
}

// The event filters select; the events show the entity each flow computed.
func TestEventFiltersAndRoutes(t *testing.T) {
	f := newFixture(t)
	// The envelope has no entity; two flows agree on c9.
	agreed := f.event("crm", "e1", "contact.created", "")
	f.route(agreed, store.Route{Flow: "contacts", Entity: "c9", OrderKey: "1"}, store.Route{Flow: "mail", Entity: "c9", OrderKey: "1"})
	f.apply("contacts", "c9", "crm")
	// Two flows disagree: the event's entity stays empty.
	split := f.event("crm", "e2", "deal.updated", "")
	f.route(split, store.Route{Flow: "deals", Entity: "d1", OrderKey: "1"}, store.Route{Flow: "mail", Entity: "c9", OrderKey: "2"})
	// An envelope entity is kept as it is; this one is unrouted.
	f.event("stripe", "e3", "invoice.paid", "sub_1")
	unrouted := f.event("stripe", "e4", "invoice.paid", "sub_2")
	f.route(unrouted)

	var all eventList
	if code := f.get("/api/v1/events", &all); code != 200 || len(all.Events) != 4 {
		t.Fatalf("all events: %d %+v", code, all)
	}
	e := all.Events[0]
	if e.Entity != "c9" || !slices.Equal(e.Routes, []api.RouteJSON{{Flow: "contacts", Entity: "c9", Disposition: "applied"},
		{Flow: "mail", Entity: "c9", Disposition: "accepted"}}) {
		t.Errorf("agreeing routes: %+v", e)
	}
	if e := all.Events[1]; e.Entity != "" || len(e.Routes) != 2 {
		t.Errorf("disagreeing routes: %+v", e)
	}
	if e := all.Events[2]; e.Entity != "sub_1" || e.Routes == nil || len(e.Routes) != 0 {
		t.Errorf("envelope entity, no routes: %+v", e)
	}
	// The pinned fields are all there, and routes is an array.
	_, raw := f.do(http.MethodGet, "/api/v1/events?limit=1", "")
	var shape struct{ Events []map[string]json.RawMessage }
	if err := json.Unmarshal(raw, &shape); err != nil || len(shape.Events) != 1 {
		t.Fatalf("%s: %v", raw, err)
	}
	for _, k := range []string{"source", "event_id", "type", "entity", "occurred_at", "received_at", "deliveries", "disposition", "routes"} {
		if _, ok := shape.Events[0][k]; !ok {
			t.Errorf("event lacks %q: %s", k, raw)
		}
	}

	for query, want := range map[string][]string{
		"entity=c9":                   {"e1", "e2"},
		"entity=sub_2":                {"e4"},
		"entity=c9&type=deal.updated": {"e2"},
		"disposition=unrouted":        {"e4"},
		"disposition=accepted":        {"e1", "e2", "e3"},
		"event_id=e3":                 {"e3"},
		"source=stripe&event_id=e3":   {"e3"},
		"received_from=2026-11-03T09:00:00Z&received_to=2026-11-03T09:00:00.000001Z": {"e1", "e2", "e3", "e4"},
		"received_from=2026-11-03T09:00:00.000001Z":                                  nil,
		"occurred_from=2026-11-03T00:00:00Z":                                         nil,
		"source=":                                                                    {"e1", "e2", "e3", "e4"},
	} {
		var got eventList
		if code := f.get("/api/v1/events?"+query, &got); code != 200 {
			t.Errorf("%s: %d", query, code)
			continue
		}
		var ids []string
		for _, e := range got.Events {
			ids = append(ids, e.EventID)
		}
		if !slices.Equal(ids, want) {
			t.Errorf("%s: %v, want %v", query, ids, want)
		}
	}

	// Paging by entity, one a page.
	var ids []string
	cursor := ""
	for range 4 {
		var page eventList
		if code := f.get("/api/v1/events?entity=c9&limit=1&cursor="+cursor, &page); code != 200 {
			t.Fatalf("page: %d", code)
		}
		for _, e := range page.Events {
			ids = append(ids, e.EventID)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if !slices.Equal(ids, []string{"e1", "e2"}) {
		t.Fatalf("paged by entity: %v", ids)
	}
}

func TestEffectFiltersAndPaging(t *testing.T) {
	f := newFixture(t)
	var ids []int64
	for i, dest := range []string{"crm", "crm", "erp", "erp"} {
		pk := f.event("shop", fmt.Sprint("e", i), "order.created", "")
		f.route(pk, store.Route{Flow: "orders", Entity: fmt.Sprint("o", i), OrderKey: "1"})
		ids = append(ids, f.apply("orders", fmt.Sprint("o", i), dest)...)
	}
	f.settle(ids[0], store.EffectDead, store.ClassPermanent)
	f.settle(ids[1], store.EffectNeedsReconciliation, store.ClassUnknown)
	f.settle(ids[2], store.EffectDone, store.ClassNone)
	if code, b := f.do(http.MethodPost, fmt.Sprintf("/api/v1/effects/%d/assign", ids[0]), `{"owner":"bob","actor":"alice"}`); code != 200 {
		t.Fatalf("assign: %d %s", code, b)
	}
	list := func(query string) []string {
		t.Helper()
		var got effectList
		if code := f.get("/api/v1/effects?"+query, &got); code != 200 {
			t.Fatalf("%s: %d", query, code)
		}
		var out []string
		for _, e := range got.Effects {
			out = append(out, e.State)
		}
		return out
	}
	every := []string{"dead", "needs_reconciliation", "done", "approved"}
	for query, want := range map[string][]string{
		"":                             every,
		"state=any":                    every,
		"state=exceptions":             {"dead", "needs_reconciliation"},
		"state=dead":                   {"dead"},
		"state=done,approved":          {"done", "approved"},
		"destination=erp":              {"done", "approved"},
		"owner=bob":                    {"dead"},
		"class=unknown_outcome":        {"needs_reconciliation"},
		"entity=o3":                    {"approved"},
		"flow=orders&state=exceptions": {"dead", "needs_reconciliation"},
		"created_from=2026-11-03T09:00:00Z&created_to=2026-11-03T09:00:01Z": every,
		"updated_from=2026-11-03T09:30:00Z":                                 {"dead"},
	} {
		if got := list(query); !slices.Equal(got, want) {
			t.Errorf("%q: %v, want %v", query, got, want)
		}
	}
	// Keyset paging through the exception queue.
	var page effectList
	if f.get("/api/v1/effects?state=exceptions&limit=1", &page); len(page.Effects) != 1 || page.Effects[0].ID != ids[0] || page.NextCursor == "" {
		t.Fatalf("first page: %+v", page)
	}
	next := page.NextCursor
	page = effectList{}
	if f.get("/api/v1/effects?state=exceptions&limit=1&cursor="+next, &page); len(page.Effects) != 1 || page.Effects[0].ID != ids[1] || page.NextCursor != "" {
		t.Fatalf("second page: %+v", page)
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

// The audit filters select.
func TestAuditFilters(t *testing.T) {
	f := newFixture(t)
	for i, a := range []store.AuditInsertParams{
		{Actor: "receiver", Action: "tenant_mismatch", Source: "stripe", EventID: "e1", Entity: "sub_1", Detail: "a"},
		{Actor: "router", Action: "disposition", Source: "crm", EventID: "e2", Entity: "c9", Detail: "b"},
		{Actor: "router", Action: "disposition", Source: "stripe", EventID: "e1", Entity: "sub_1", Detail: "c"},
	} {
		a.At = t0.Add(time.Duration(i) * time.Minute)
		if _, err := f.st.AuditInsert(f.ctx, &a); err != nil {
			t.Fatal(err)
		}
	}
	for query, want := range map[string]string{
		"":                                 "abc",
		"entity=sub_1":                     "ac",
		"event_id=e2":                      "b",
		"action=disposition&source=stripe": "c",
		"from=2026-11-03T09:01:00Z":        "bc",
		"to=2026-11-03T09:01:00Z":          "a",
		"entity=sub_1&limit=1":             "a",
	} {
		var got struct{ Audit []struct{ Detail string } }
		if code := f.get("/api/v1/audit?"+query, &got); code != 200 {
			t.Fatalf("%s: %d", query, code)
		}
		s := ""
		for _, a := range got.Audit {
			s += a.Detail
		}
		if s != want {
			t.Errorf("%q: %q, want %q", query, s, want)
		}
	}
}

// compensate applies a newer version of flow/entity (already routed as
// pk) whose only effect compensates effect id, and returns the result.
func (f *fixture) compensate(pk int64, flow, entity string, id int64) *store.FlowApplyResult {
	f.t.Helper()
	leases, err := f.st.EntityClaim(f.ctx, &store.EntityClaimParams{Owner: "w", Now: t0, LeaseFor: time.Minute, Limit: 100})
	if err != nil || len(leases) != 1 || leases[0].Entity != entity {
		f.t.Fatalf("claim %s: %v %v", entity, leases, err)
	}
	work, err := f.st.WorkListPending(f.ctx, &store.WorkListPendingParams{Flow: flow, Entity: entity})
	if err != nil || len(work) != 1 || work[0].Event.PK != pk {
		f.t.Fatalf("work of %s: %v %v", entity, work, err)
	}
	res, err := f.st.FlowApply(f.ctx, &store.FlowApplyParams{Lease: leases[0], Now: t0, WorkID: work[0].ID, EventPK: pk, Actor: "w",
		Version: "r9", VersionSort: "9999999999", Ordered: true, State: json.RawMessage(`{"cancelled":true}`), ReleaseIfDrained: true,
		Effects: []*store.EffectInsert{{EpisodeKey: fmt.Sprintf("undo:%d", id), Effect: "undo", Destination: "crm",
			Request: json.RawMessage(`{}`), Compensates: id}}})
	if err != nil {
		f.t.Fatal(err)
	}
	return res
}

// The outcome filters: compensations, and effects whose deadline was
// missed (none here: nothing escalated).
func TestEffectOutcomeFilters(t *testing.T) {
	f := newFixture(t)
	pk := f.event("shop", "e1", "order.created", "")
	f.route(pk, store.Route{Flow: "orders", Entity: "o1", OrderKey: "1"})
	ids := f.apply("orders", "o1", "crm")
	f.settle(ids[0], store.EffectDone, store.ClassNone)
	pk = f.event("shop", "e2", "order.cancelled", "")
	f.route(pk, store.Route{Flow: "orders", Entity: "o1", OrderKey: "2"})
	if r := f.compensate(pk, "orders", "o1", ids[0]); r.EffectsInserted != 1 {
		t.Fatalf("compensation: %+v", r)
	}
	keys := func(query string) []string {
		t.Helper()
		var got effectList
		if code := f.get("/api/v1/effects?"+query, &got); code != 200 {
			t.Fatalf("%s: %d", query, code)
		}
		out := []string{}
		for _, e := range got.Effects {
			out = append(out, e.EpisodeKey)
		}
		return out
	}
	undo := fmt.Sprintf("undo:%d", ids[0])
	for query, want := range map[string][]string{
		"compensations=true":                      {undo},
		"compensations=false":                     {"orders:o1:r1:notify", undo},
		"compensations=true&state=done":           {},
		"compensations=true&destination=crm":      {undo},
		"deadline_missed=true":                    {},
		"deadline_missed=false&state=done":        {"orders:o1:r1:notify"},
		"deadline_missed=true&compensations=true": {},
	} {
		if got := keys(query); !slices.Equal(got, want) {
			t.Errorf("%q: %v, want %v", query, got, want)
		}
	}
}

// GET /api/v1/effects/{id} carries the effect's stored request, as JSON,
// so that a client of the API (effects show --server) shows what the
// console shows; lists leave it out (they never read it).
func TestEffectCarriesItsRequest(t *testing.T) {
	f := newFixture(t)
	pk := f.event("shop", "e1", "order.created", "")
	f.route(pk, store.Route{Flow: "orders", Entity: "o1", OrderKey: "1"})
	id := f.apply("orders", "o1", "crm")[0]
	var one struct {
		Effect map[string]json.RawMessage `json:"effect"`
	}
	if code := f.get(fmt.Sprintf("/api/v1/effects/%d", id), &one); code != 200 {
		t.Fatalf("get: %d", code)
	}
	if got := string(one.Effect["request"]); got != `{}` {
		t.Errorf("effect request = %q, want the stored {}", got)
	}
	var list struct {
		Effects []map[string]json.RawMessage `json:"effects"`
	}
	if code := f.get("/api/v1/effects?state=any", &list); code != 200 || len(list.Effects) != 1 {
		t.Fatalf("list: %d %v", code, list)
	}
	if _, ok := list.Effects[0]["request"]; ok {
		t.Errorf("a listed effect carries its request: %s", list.Effects[0]["request"])
	}
	// A request that is not JSON is answered as a JSON string rather than
	// breaking the answer.
	j := api.NewEffectJSON(&store.Effect{ID: 1, Request: json.RawMessage("a=1&b=<2>")})
	b, err := json.Marshal(j)
	if err != nil || !strings.Contains(string(b), `"request":"a=1\u0026b=\u003c2\u003e"`) {
		t.Errorf("non-JSON request: %s %v", b, err)
	}
}

// applyKey processes the pending work of flow/entity, each item asking
// for the effect with episode key key.
func (f *fixture) applyKey(flow, entity, key string) {
	f.t.Helper()
	leases, err := f.st.EntityClaim(f.ctx, &store.EntityClaimParams{Owner: "w", Now: t0, LeaseFor: time.Minute, Limit: 100})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, l := range leases {
		work, err := f.st.WorkListPending(f.ctx, &store.WorkListPendingParams{Flow: l.Flow, Entity: l.Entity})
		if err != nil {
			f.t.Fatal(err)
		}
		for _, w := range work {
			if l.Flow != flow || l.Entity != entity {
				break
			}
			if _, err := f.st.FlowApply(f.ctx, &store.FlowApplyParams{Lease: l, Now: t0, WorkID: w.ID, EventPK: w.Event.PK, Actor: "w",
				Version: "r1", VersionSort: "0000000001", Ordered: true, State: json.RawMessage(`{}`),
				Effects: []*store.EffectInsert{{EpisodeKey: key, Effect: "notify", Destination: "crm", Request: json.RawMessage(`{}`)}},
			}); err != nil {
				f.t.Fatal(err)
			}
		}
		if err := f.st.EntityRelease(f.ctx, &store.EntityReleaseParams{Lease: l, Now: t0}); err != nil {
			f.t.Fatal(err)
		}
	}
}

// source_event_ids names every event that asked for an effect, oldest
// first, in the list and in the effect alike; an effect that only its
// source event asked for names that one: the field is always present.
func TestEffectSourceEventIDs(t *testing.T) {
	f := newFixture(t)
	a := f.event("shop", "evt_a", "order.created", "")
	b := f.event("shop", "evt_b", "order.created", "")
	c := f.event("shop", "evt_c", "order.created", "")
	f.route(a, store.Route{Flow: "orders", Entity: "o1", OrderKey: "1"})
	f.route(b, store.Route{Flow: "orders", Entity: "o2", OrderKey: "1"})
	f.route(c, store.Route{Flow: "orders", Entity: "o3", OrderKey: "1"})
	f.applyKey("orders", "o1", "orders:o1:notify")
	f.applyKey("orders", "o2", "orders:o1:notify") // a duplicate with a new id
	f.applyKey("orders", "o3", "orders:o3:notify")
	want := map[string]string{"orders:o1:notify": `["evt_a","evt_b"]`, "orders:o3:notify": `["evt_c"]`}
	var list struct {
		Effects []map[string]json.RawMessage `json:"effects"`
	}
	if code := f.get("/api/v1/effects?state=any", &list); code != 200 || len(list.Effects) != 2 {
		t.Fatalf("list: %d %v", code, list)
	}
	for _, e := range list.Effects {
		var key string
		if err := json.Unmarshal(e["episode_key"], &key); err != nil {
			t.Fatal(err)
		}
		if got := string(e["source_event_ids"]); got != want[key] {
			t.Errorf("listed %s: source_event_ids = %s, want %s", key, got, want[key])
		}
		var one struct {
			Effect map[string]json.RawMessage `json:"effect"`
		}
		if code := f.get("/api/v1/effects/"+string(e["id"]), &one); code != 200 {
			t.Fatalf("get %s: %d", e["id"], code)
		}
		if got := string(one.Effect["source_event_ids"]); got != want[key] {
			t.Errorf("effect %s: source_event_ids = %s, want %s", key, got, want[key])
		}
	}
}
