package flow

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/replay"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

var t0 = time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)

type fixture struct {
	t   *testing.T
	st  store.Store
	clk *clock.Fake
	eng *Engine
	cfg *config.Config
	n   int
}

func newFixture(t *testing.T, yaml string) *fixture {
	t.Helper()
	cfg, err := config.Parse("flow.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "flow.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(t0)
	return &fixture{t: t, st: s, clk: clk, cfg: cfg, eng: New(cfg, s, Options{Clock: clk, LeaseFor: 10 * time.Second, RetryDelay: 5 * time.Second})}
}

func (f *fixture) send(source, eventID, body string) {
	f.t.Helper()
	f.n++
	res, err := f.st.InboxCommit(context.Background(), &store.InboxCommitParams{Submissions: []*store.Submission{{
		Deliveries: []*store.DeliveryInput{{
			RequestID: fmt.Sprint("req-", f.n), Source: source, EventID: eventID, Type: "order.updated",
			OccurredAt: t0, ReceivedAt: f.clk.Now(), Body: []byte(body),
		}},
	}}})
	if err != nil || res[0].Err != nil {
		f.t.Fatalf("commit: %v %v", err, res)
	}
}

func (f *fixture) drain() {
	f.t.Helper()
	if err := f.eng.Drain(context.Background()); err != nil {
		f.t.Fatalf("drain: %v", err)
	}
}

func (f *fixture) disposition(source, eventID string) string {
	f.t.Helper()
	r, err := f.st.EventList(context.Background(), &store.EventListParams{Source: source, EventID: eventID})
	if err != nil || len(r.Events) != 1 {
		f.t.Fatalf("event %s: %v %v", eventID, r, err)
	}
	return string(r.Events[0].Disposition)
}

func (f *fixture) effects(flow string) []string {
	f.t.Helper()
	es, err := f.st.EffectList(context.Background(), &store.EffectListParams{Flow: flow})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.EpisodeKey+"="+string(e.State))
	}
	return out
}

const sources = `destinations:
  - name: crm
    base_url: http://127.0.0.1:1
    allow_private_networks: true
sources:
  - name: shop
    kind: hmac
    secrets: [x]
    hmac: {header: X-Sig}
    api:
      base_url: %s
      allow_private_networks: true
      bearer_token: api-token
`

// The source API: the current truth per order, changed by the test, with
// injectable failures.
type fakeAPI struct {
	mu     sync.Mutex
	truth  map[string]string
	status int // non-zero: answer this instead
	calls  int
	auth   string
}

func (a *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	a.auth = r.Header.Get("Authorization")
	if a.status != 0 {
		w.WriteHeader(a.status)
		return
	}
	id := strings.TrimPrefix(r.URL.Path, "/orders/")
	st, ok := a.truth[id]
	if !ok {
		http.NotFound(w, r)
		return
	}
	fmt.Fprintf(w, `{"id":%q,"status":%q,"total":42}`, id, st)
}

const refetchFlow = `flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version:
      mode: refetch
      path: '"/orders/" + entity'
      hash: [object.status, object.total]
    state: '{"status": object.status}'
    effects:
      - name: sync
        destination: crm
        request: {path: '"/deals/" + entity', body: 'state'}
`

func TestRefetchHashVersions(t *testing.T) {
	api := &fakeAPI{truth: map[string]string{"o1": "paid"}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	f := newFixture(t, fmt.Sprintf(sources, srv.URL)+refetchFlow)

	// Two events for the same change refetch the same state: the second is
	// a no-op, whatever its payload claims.
	f.send("shop", "e1", `{"order_id":"o1","status":"ignored"}`)
	f.send("shop", "e2", `{"order_id":"o1","status":"also ignored"}`)
	f.drain()
	if d1, d2 := f.disposition("shop", "e1"), f.disposition("shop", "e2"); d1 != "applied" || d2 != "duplicate" {
		t.Fatalf("dispositions %s, %s; want applied, duplicate", d1, d2)
	}
	if api.auth != "Bearer api-token" {
		t.Errorf("refetch sent Authorization %q", api.auth)
	}
	// The truth changes: the next event applies the new state and the
	// projection never holds payload state.
	api.truth["o1"] = "refunded"
	f.send("shop", "e3", `{"order_id":"o1"}`)
	f.drain()
	if d := f.disposition("shop", "e3"); d != "applied" {
		t.Fatalf("e3 = %s, want applied", d)
	}
	p, err := f.st.ProjectionGet(context.Background(), &store.ProjectionGetParams{Flow: "orders", Entity: "o1"})
	if err != nil || p == nil || string(p.State) != `{"status":"refunded"}` || !strings.HasPrefix(p.Version, "h") {
		t.Fatalf("projection %+v %v", p, err)
	}
	if got := f.effects("orders"); len(got) != 2 || !strings.HasSuffix(got[0], "=superseded") || !strings.HasSuffix(got[1], "=approved") {
		t.Fatalf("effects %v: want the paid sync superseded by the refunded one", got)
	}
}

func TestRefetchFailuresDeferOrDeadLetter(t *testing.T) {
	api := &fakeAPI{truth: map[string]string{"o1": "paid"}, status: http.StatusServiceUnavailable}
	srv := httptest.NewServer(api)
	defer srv.Close()
	f := newFixture(t, fmt.Sprintf(sources, srv.URL)+refetchFlow)
	f.send("shop", "e1", `{"order_id":"o1"}`)
	f.send("shop", "e9", `{"order_id":"o9"}`)
	f.drain()
	// 503: the events stay pending, visibly, and the entity is deferred.
	if d := f.disposition("shop", "e1"); d != "accepted" {
		t.Fatalf("after a 503, e1 = %s, want still accepted (pending)", d)
	}
	calls := api.calls
	f.drain()
	if api.calls != calls {
		t.Fatalf("a deferred entity was retried before its delay (%d calls, then %d)", calls, api.calls)
	}
	api.status = 0
	f.clk.Advance(6 * time.Second)
	f.drain()
	if d := f.disposition("shop", "e1"); d != "applied" {
		t.Fatalf("after recovery e1 = %s, want applied", d)
	}
	// 404 is permanent: dead-lettered with the reason, not retried.
	if d := f.disposition("shop", "e9"); d != "dead_lettered" {
		t.Fatalf("e9 (404) = %s, want dead_lettered", d)
	}
	n, err := f.st.WorkCount(context.Background())
	if err != nil || n != 0 {
		t.Fatalf("pending work %d %v, want 0", n, err)
	}
}

const revisionFlow = `flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.rev}
    state: event.state
    effects:
      - name: upsert
        destination: crm
        request: {path: '"/deals/" + entity', body: '{"state": state, "rev": version}'}
  - name: audit_only
    source: shop
    events: ["order.*"]
    when: event.state == "CANCELLED"
    entity: event.order_id
    version: {mode: revision, revision: event.rev}
`

func TestRevisionGuardAndReplay(t *testing.T) {
	f := newFixture(t, fmt.Sprintf(sources, "https://api.invalid")+revisionFlow)
	// Queued together, events run in business order: r2 before r3.
	f.send("shop", "e3", `{"order_id":"o1","rev":3,"state":"CANCELLED"}`)
	f.send("shop", "e2", `{"order_id":"o1","rev":2,"state":"CONFIRMED"}`)
	f.drain()
	// r1 arriving after r3 was applied is stale.
	f.send("shop", "e1", `{"order_id":"o1","rev":1,"state":"CREATED"}`)
	f.send("shop", "e3b", `{"order_id":"o1","rev":3,"state":"CANCELLED"}`)
	f.send("shop", "ebad", `{"order_id":"o1","rev":"three","state":"X"}`)
	f.send("shop", "enone", `{"rev":1}`)
	f.drain()
	for id, want := range map[string]string{"e3": "applied", "e2": "applied", "e1": "stale", "e3b": "duplicate", "ebad": "dead_lettered", "enone": "dead_lettered"} {
		if d := f.disposition("shop", id); d != want {
			t.Errorf("%s = %s, want %s", id, d, want)
		}
	}
	before := f.effects("orders")
	if strings.Join(before, " ") != "orders:o1:r2:upsert=superseded orders:o1:r3:upsert=approved" {
		t.Fatalf("effects %v", before)
	}
	// Replay everything: identities kept, no new effects, applied stays.
	res, err := replay.Run(context.Background(), f.st, f.eng, replay.Selection{Source: "shop"}, f.clk.Now())
	if err != nil || res.ReplayID == 0 || res.Events == 0 {
		t.Fatalf("replay: %+v %v", res, err)
	}
	f.drain()
	if after := f.effects("orders"); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Fatalf("replay changed the ledger: %v -> %v", before, after)
	}
	if d := f.disposition("shop", "e3"); d != "applied" {
		t.Fatalf("after replay e3 = %s, want applied", d)
	}
	if _, err := replay.Run(context.Background(), f.st, f.eng, replay.Selection{Source: "shop", Flow: "nosuch"}, f.clk.Now()); err == nil {
		t.Fatal("an empty selection replayed")
	}
}

// A worker that dies holding a lease delays its entity only until the lease
// expires; other entities go on meanwhile.
func TestAbandonedLeaseIsTakenOver(t *testing.T) {
	f := newFixture(t, fmt.Sprintf(sources, "https://api.invalid")+revisionFlow)
	f.send("shop", "a1", `{"order_id":"oa","rev":1,"state":"CREATED"}`)
	f.send("shop", "b1", `{"order_id":"ob","rev":1,"state":"CREATED"}`)
	if _, err := f.eng.RouteOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	dead, err := f.st.EntityClaim(context.Background(), &store.EntityClaimParams{Owner: "dead-worker", Now: f.clk.Now(), LeaseFor: 10 * time.Second, Limit: 1})
	if err != nil || len(dead) != 1 {
		t.Fatalf("claim: %v %v", dead, err)
	}
	f.drain()
	other := map[string]string{"oa": "b1", "ob": "a1"}[dead[0].Entity]
	held := map[string]string{"oa": "a1", "ob": "b1"}[dead[0].Entity]
	if d := f.disposition("shop", other); d != "applied" {
		t.Fatalf("the other entity's event = %s, want applied while the first is held", d)
	}
	if d := f.disposition("shop", held); d != "accepted" {
		t.Fatalf("the held entity's event = %s, want pending", d)
	}
	f.clk.Advance(11 * time.Second)
	f.drain()
	if d := f.disposition("shop", held); d != "applied" {
		t.Fatalf("after the lease expired = %s, want applied", d)
	}
}

// An effect may compare the new state with the previously applied one.
func TestPreviousState(t *testing.T) {
	f := newFixture(t, fmt.Sprintf(sources, "https://api.invalid")+`flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.rev}
    state: event.state
    effects:
      - name: changed
        when: previous != null && previous != state
        destination: crm
        request: {path: '"/changes"', body: '{"from": previous, "to": state}'}
`)
	if !f.cfg.Flows[0].Compiled.ReadsPrevious {
		t.Fatal("the flow reads previous but is not marked so")
	}
	f.send("shop", "e1", `{"order_id":"o1","rev":1,"state":"CREATED"}`)
	f.drain()
	f.send("shop", "e2", `{"order_id":"o1","rev":2,"state":"CREATED"}`)
	f.drain()
	f.send("shop", "e3", `{"order_id":"o1","rev":3,"state":"PAID"}`)
	f.drain()
	got := f.effects("orders")
	if len(got) != 1 || got[0] != "orders:o1:r3:changed=approved" {
		t.Fatalf("effects %v, want only the change at r3", got)
	}
	es, err := f.st.EffectList(context.Background(), &store.EffectListParams{Flow: "orders"})
	if err != nil || !strings.Contains(string(es[0].Request), `"from":"CREATED"`) {
		t.Fatalf("request %s (%v)", es[0].Request, err)
	}
}

// A refetch never follows a redirect: the source API's credentials would go
// to whatever address the answer names. The redirect is a permanent
// failure of that refetch, reported with where it pointed.
func TestRefetchDoesNotFollowRedirects(t *testing.T) {
	var stolen sync.Map // what reached the second listener
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stolen.Store(r.URL.Path, r.Header.Get("Authorization")+" "+r.Header.Get("X-Api-Key"))
		fmt.Fprint(w, `{"id":"o1","status":"paid","total":42}`)
	}))
	defer other.Close()
	for _, target := range []string{other.URL, strings.Replace(other.URL, "127.0.0.1", "localhost", 1)} {
		api := httptest.NewServer(http.RedirectHandler(target+"/stolen?token=s3cret", http.StatusFound))
		f := newFixture(t, fmt.Sprintf(sources, api.URL)+"      headers: {X-Api-Key: key-123}\n"+refetchFlow)
		f.send("shop", "e1", `{"order_id":"o1"}`)
		f.drain()
		api.Close()
		if d := f.disposition("shop", "e1"); d != "dead_lettered" {
			t.Fatalf("redirect to %s: e1 = %s, want dead_lettered", target, d)
		}
		audit, err := f.st.AuditList(context.Background(), &store.AuditListParams{Action: "dead_lettered"})
		if err != nil || len(audit) != 1 {
			t.Fatalf("audit %v %v", audit, err)
		}
		if d := audit[0].Detail; !strings.Contains(d, "HTTP 302") || !strings.Contains(d, "redirected to "+target+"/stolen") || strings.Contains(d, "s3cret") {
			t.Errorf("dead-letter reason %q: want the 302 and its target without the query", d)
		}
	}
	stolen.Range(func(k, v any) bool {
		t.Errorf("the redirect was followed: %v received credentials %q", k, v)
		return true
	})
}

// A refetch whose connection fails is logged and retried; neither the log
// nor a reason shows the token in api.base_url's query string.
func TestRefetchErrorsNeverShowTheQueryString(t *testing.T) {
	// The source API hangs up on every request (http.ErrAbortHandler).
	// A closed server's port was not enough: under a full test run another
	// listener could take the freed port and answer, and the event was
	// dead-lettered. This server holds its port for the whole test.
	hangsUp := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }))
	defer hangsUp.Close()
	f := newFixture(t, fmt.Sprintf(sources, hangsUp.URL+"/?token=s3cret")+refetchFlow)
	var logs strings.Builder
	f.eng = New(f.cfg, f.st, Options{Clock: f.clk, LeaseFor: 10 * time.Second, RetryDelay: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	f.send("shop", "e1", `{"order_id":"o1"}`)
	f.drain()
	if d := f.disposition("shop", "e1"); d != "accepted" {
		t.Fatalf("e1 = %s, want pending after a connection the source hung up", d)
	}
	out := logs.String()
	if !strings.Contains(out, "deferring entity") || !strings.Contains(out, hangsUp.URL+"/") || strings.Contains(out, "s3cret") {
		t.Fatalf("log:\n%s", out)
	}
}

// The refetch path is built from payload data: a value that would leave
// api.base_url's path or add query parameters is refused before the token
// is sent anywhere (permanent: the event is dead-lettered); escaped values
// and parameters from version.query arrive as one segment and escaped.
func TestRefetchPathAndQuery(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.RequestURI)
		mu.Unlock()
		fmt.Fprintf(w, `{"id":%q,"status":"paid","total":42}`, strings.TrimPrefix(r.URL.Path, "/api/orders/"))
	}))
	defer srv.Close()
	// The effect's path escapes the entity too: an unescaped "?" in it
	// would dead-letter the event at apply time (request.path).
	flows := func(path string) string {
		return strings.Replace(strings.Replace(refetchFlow, `path: '"/orders/" + entity'`, path, 1),
			`'"/deals/" + entity'`, `'"/deals/" + pathEscape(entity)'`, 1)
	}
	f := newFixture(t, fmt.Sprintf(sources, srv.URL+"/api")+flows(`path: '"/orders/" + entity'`))
	f.send("shop", "e1", `{"order_id":"../../admin/secret"}`)
	f.send("shop", "e2", `{"order_id":"x?admin=1&y=2"}`)
	f.drain()
	for _, id := range []string{"e1", "e2"} {
		if d := f.disposition("shop", id); d != "dead_lettered" {
			t.Errorf("%s = %s, want dead_lettered", id, d)
		}
	}
	audit, err := f.st.AuditList(context.Background(), &store.AuditListParams{Action: "dead_lettered"})
	if err != nil || len(audit) != 2 || !strings.Contains(audit[0].Detail+audit[1].Detail, "dot segment") ||
		!strings.Contains(audit[0].Detail+audit[1].Detail, "pathEscape") {
		t.Fatalf("audit %+v %v", audit, err)
	}
	if len(seen) != 0 {
		t.Fatalf("the API was called: %q", seen)
	}

	f = newFixture(t, fmt.Sprintf(sources, srv.URL+"/api")+flows(`path: '"/orders/" + pathEscape(entity)'
      query: '{"expand": "items", "ref": entity}'`))
	f.send("shop", "e3", `{"order_id":"x?admin=1&y=2"}`)
	f.drain()
	if d := f.disposition("shop", "e3"); d != "applied" {
		t.Fatalf("e3 = %s, want applied", d)
	}
	if want := "/api/orders/x%3Fadmin=1&y=2?expand=items&ref=x%3Fadmin%3D1%26y%3D2"; len(seen) != 1 || seen[0] != want {
		t.Fatalf("requests %q, want %q", seen, want)
	}
}

// An effect's query is evaluated at apply time and stored with its
// request; an effect without one stores no query at all, as before.
func TestEffectQueryIsStored(t *testing.T) {
	f := newFixture(t, fmt.Sprintf(sources, "https://api.invalid")+`flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.rev}
    state: event.state
    effects:
      - name: with_query
        destination: crm
        request: {method: PATCH, path: '"/deals/" + pathEscape(entity)', query: '{"idProperty": "order_id", "v": version, "none": null}'}
      - name: without
        destination: crm
        request: {path: '"/notes"'}
`)
	f.send("shop", "e1", `{"order_id":"o/1","rev":2,"state":"PAID"}`)
	f.drain()
	es, err := f.st.EffectList(context.Background(), &store.EffectListParams{Flow: "orders"})
	if err != nil || len(es) != 2 {
		t.Fatalf("effects %v %v", es, err)
	}
	got := map[string]string{es[0].Effect: string(es[0].Request), es[1].Effect: string(es[1].Request)}
	if want := `{"method":"PATCH","path":"/deals/o%2F1","query":{"idProperty":["order_id"],"v":["2"]}}`; got["with_query"] != want {
		t.Errorf("stored %s, want %s", got["with_query"], want)
	}
	if want := `{"method":"POST","path":"/notes"}`; got["without"] != want {
		t.Errorf("stored %s, want %s", got["without"], want)
	}
}

// A source API without allow_private_networks on a non-public address is
// refused on the address about to be dialled: nothing is sent (not the
// token either), and the event is dead-lettered at once, with the address,
// the rule and the key that would allow it, instead of being deferred
// forever as if the API were down.
func TestRefetchFromANonPublicAddressIsRefused(t *testing.T) {
	api := &fakeAPI{truth: map[string]string{"o1": `{"id":"o1","status":"paid","total":42}`}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	yaml := strings.Replace(fmt.Sprintf(sources, srv.URL), "      allow_private_networks: true\n", "", 1) + refetchFlow
	f := newFixture(t, yaml)
	f.send("shop", "e1", `{"order_id":"o1"}`)
	f.drain()
	if d := f.disposition("shop", "e1"); d != "dead_lettered" {
		t.Fatalf("e1 = %s, want dead_lettered", d)
	}
	audit, err := f.st.AuditList(context.Background(), &store.AuditListParams{Action: "dead_lettered"})
	if err != nil || len(audit) != 1 {
		t.Fatalf("audit %v %v", audit, err)
	}
	if d := audit[0].Detail; !strings.Contains(d, "127.0.0.1 is not a public address (loopback") || !strings.Contains(d, "sources[shop].api") ||
		!strings.Contains(d, "allow_private_networks") {
		t.Errorf("dead-letter reason %q", d)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if api.calls != 0 {
		t.Fatalf("the API on loopback was called %d times", api.calls)
	}
}
