package console

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// routeByEntity is a flow engine's routing for the tests: every stored
// event of stripe goes to billing_to_crm under its envelope entity.
type routeByEntity struct{}

func (routeByEntity) Routes(ev *store.RoutableEvent) []store.Route {
	if ev.Source != "stripe" || ev.Entity == "" {
		return nil
	}
	return []store.Route{{Flow: "billing_to_crm", Entity: ev.Entity, OrderKey: ev.EventID}}
}

// addEffect makes one more effect to dest through the pipeline, on an
// entity of its own, and leaves it in state (approved, done, dead or
// needs_reconciliation).
func (f *fixture) addEffect(t *testing.T, name, dest string, state store.EffectState) int64 {
	t.Helper()
	ctx := context.Background()
	res, err := f.st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "req_" + name, Source: "shop", EventID: name, Type: "order.updated", Entity: name,
		ReceivedAt: f.clk.Now(), Body: []byte(`{}`),
	}}}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("store %s: %v %v", name, err, res)
	}
	pk := res[0].Items[0].EventPK
	if err := f.st.EventRoute(ctx, &store.EventRouteParams{Now: f.clk.Now(), Decisions: []*store.RouteDecision{
		{EventPK: pk, Routes: []store.Route{{Flow: "orders", Entity: name, OrderKey: "1"}}}}}); err != nil {
		t.Fatalf("route %s: %v", name, err)
	}
	leases, err := f.st.EntityClaim(ctx, &store.EntityClaimParams{Owner: "test", Now: f.clk.Now(), LeaseFor: time.Minute, Limit: 10})
	if err != nil || len(leases) != 1 {
		t.Fatalf("claim %s: %v %v", name, leases, err)
	}
	work, err := f.st.WorkListPending(ctx, &store.WorkListPendingParams{Flow: "orders", Entity: name, Limit: 10})
	if err != nil || len(work) != 1 {
		t.Fatalf("work of %s: %v %v", name, work, err)
	}
	if _, err := f.st.FlowApply(ctx, &store.FlowApplyParams{Lease: leases[0], Now: f.clk.Now(), WorkID: work[0].ID, EventPK: pk,
		Actor: "worker", Ordered: true, Version: "r1", VersionSort: "0000000001", State: []byte(`{}`),
		Effects: []*store.EffectInsert{{EpisodeKey: "orders:" + name + ":r1:push", Effect: "push", Destination: dest, Request: []byte(`{}`)}}}); err != nil {
		t.Fatalf("apply %s: %v", name, err)
	}
	if err := f.st.EntityRelease(ctx, &store.EntityReleaseParams{Lease: leases[0], Now: f.clk.Now()}); err != nil {
		t.Fatalf("release %s: %v", name, err)
	}
	es, err := f.st.EffectList(ctx, &store.EffectListParams{Flow: "orders", Entity: name})
	if err != nil || len(es) != 1 {
		t.Fatalf("effect of %s: %v %v", name, es, err)
	}
	id := es[0].ID
	if state == store.EffectApproved {
		return id
	}
	cs, err := f.st.EffectClaim(ctx, &store.EffectClaimParams{Owner: "d", Now: f.clk.Now(), LeaseFor: time.Minute, Limit: 10})
	if err != nil || len(cs) != 1 || cs[0].ID != id {
		t.Fatalf("claim effect of %s: %v %v", name, cs, err)
	}
	sp := &store.EffectSettleParams{EffectID: id, Token: cs[0].Token, Now: f.clk.Now(), Actor: "worker", State: state, AddAttempt: true,
		Attempt: &store.Attempt{StartedAt: f.clk.Now(), Duration: 40 * time.Millisecond, Status: 200}}
	switch state {
	case store.EffectDead:
		sp.Class, sp.Reason, sp.Attempt.Status, sp.Attempt.Class = store.ClassPermanent, "400 from destination", 400, store.ClassPermanent
	case store.EffectNeedsReconciliation:
		sp.Class, sp.Reason, sp.Attempt.Status, sp.Attempt.Class = store.ClassUnknown, "timeout", 0, store.ClassUnknown
	}
	if err := f.st.EffectSettle(ctx, sp); err != nil {
		t.Fatalf("settle effect of %s: %v", name, err)
	}
	f.clk.Advance(time.Second)
	return id
}

// gatedStore is the real store with a gate after each retry: the test
// holds a bulk retry between two effects to cancel it or shut it down.
type gatedStore struct {
	*sqlite.Store
	retried chan int64
	resume  chan struct{}
}

func (g *gatedStore) EffectOperate(ctx context.Context, p *store.EffectOperateParams) (*store.Effect, error) {
	e, err := g.Store.EffectOperate(ctx, p)
	if err == nil && p.Action == store.OperateRetry {
		g.retried <- p.EffectID
		<-g.resume
	}
	return e, err
}

type opsEnv struct {
	f   *fixture
	con *Console
	srv *httptest.Server
	c   *client
}

func startOps(t *testing.T, st func(f *fixture) Store, a Attachments) *opsEnv {
	t.Helper()
	f := newFixture(t, 0)
	var s Store = f.st
	if st != nil {
		s = st(f)
	}
	con := New(s, testToken, slog.New(slog.DiscardHandler), f.clk)
	con.Attach(a)
	srv := httptest.NewServer(con)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = con.Close() })
	c := newClient(t, srv)
	c.login()
	return &opsEnv{f: f, con: con, srv: srv, c: c}
}

// jobOf follows a start's redirect to its job.
func (e *opsEnv) jobOf(t *testing.T, resp *http.Response, body string) *job {
	t.Helper()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/jobs/") {
		t.Fatalf("start: %d %s %s", resp.StatusCode, loc, body)
	}
	j := e.con.jobs.get(strings.TrimPrefix(loc, "/jobs/"))
	if j == nil {
		t.Fatalf("no job behind %s", loc)
	}
	return j
}

func waitJob(t *testing.T, j *job) jobProgress {
	t.Helper()
	select {
	case <-j.done:
	case <-time.After(30 * time.Second): // a bound on a hung job, not a wait
		t.Fatalf("job %s did not end: %+v", j.ID, j.progress())
	}
	return j.progress()
}

func (e *opsEnv) audit(t *testing.T, action string) []*store.AuditEntry {
	t.Helper()
	rows, err := e.f.st.AuditList(context.Background(), &store.AuditListParams{Action: action, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// The dry run counts what a bulk retry of the list will do, per
// destination and with the reasons for what it leaves alone; the run
// retries exactly those, reports its counts, and is audited once beside
// each effect's own row.
func TestBulkRetryDryRunThenRun(t *testing.T) {
	e := startOps(t, nil, Attachments{})
	f := e.f
	nr := f.addEffect(t, "o_nr", "crm", store.EffectNeedsReconciliation)
	done := f.addEffect(t, "o_done", "crm", store.EffectDone)
	deadErp := f.addEffect(t, "o_dead", "erp", store.EffectDead)

	_, list := e.c.get("/effects?state=any")
	if !strings.Contains(list, `href="/effects/bulk-retry?state=any"`) {
		t.Fatalf("the effects list has no bulk retry link with its filters")
	}
	resp, body := e.c.get("/effects/bulk-retry?state=any&cursor=" + url.QueryEscape("x") + "&limit=2")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("dry run: %d %s", resp.StatusCode, body)
	}
	for _, want := range []string{`id="plan-matched">4<`, `id="plan-retryable">3 `, `id="plan-skipped">1<`,
		"delivered", "<td>crm</td><td class=\"num\">2</td><td class=\"num\">1</td>", "<td>erp</td><td class=\"num\">1</td><td class=\"num\">0</td>",
		`name="planned" value="4"`, fmt.Sprintf(`name="upto" value="%d"`, deadErp), "Retry 3 effects"} {
		if !strings.Contains(body, want) {
			t.Errorf("dry run lacks %q", want)
		}
	}
	if st := f.effect(t, nr).State; st != store.EffectNeedsReconciliation {
		t.Fatalf("the dry run changed an effect: %s", st)
	}
	if resp, body := e.c.get("/effects/bulk-retry?state=bogus"); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "Filter state") {
		t.Errorf("dry run of a bad filter: %d, want 400 naming state", resp.StatusCode)
	}

	valid := url.Values{"csrf": {e.c.csrf}, "filter": {"state=any"}, "upto": {fmt.Sprint(deadErp)}, "planned": {"4"}}
	with := func(k, v string) url.Values {
		out := url.Values{}
		for kk, vv := range valid {
			out[kk] = vv
		}
		out.Set(k, v)
		return out
	}
	for name, c := range map[string]struct {
		form url.Values
		code int
	}{
		"no CSRF token":   {with("csrf", ""), http.StatusForbidden},
		"wrong CSRF":      {with("csrf", e.c.csrf+"x"), http.StatusForbidden},
		"bad filter":      {with("filter", "state=bogus"), http.StatusBadRequest},
		"unknown filter":  {with("filter", "colour=red"), http.StatusBadRequest},
		"no plan":         {with("upto", ""), http.StatusBadRequest},
		"plan too large":  {with("planned", fmt.Sprint(maxBulk+1)), http.StatusBadRequest},
		"negative upto":   {with("upto", "-3"), http.StatusBadRequest},
		"planned not int": {with("planned", "many"), http.StatusBadRequest},
	} {
		if resp, _ := e.c.post("/effects/bulk-retry", c.form); resp.StatusCode != c.code {
			t.Errorf("%s: %d, want %d", name, resp.StatusCode, c.code)
		}
	}
	if rows := e.audit(t, "effect_retry"); len(rows) != 0 {
		t.Fatalf("a refused bulk retry retried %d effects", len(rows))
	}

	resp, body = e.c.post("/effects/bulk-retry", valid)
	j := e.jobOf(t, resp, body)
	p := waitJob(t, j)
	if p.Done != 3 || p.Skipped != 1 || p.Failed != 0 || p.Outcome != "finished" || p.Total != 4 {
		t.Fatalf("bulk retry progress %+v; want 3 retried, 1 skipped, finished", p)
	}
	for _, id := range []int64{f.deadID, nr, deadErp} {
		if st := f.effect(t, id).State; st != store.EffectApproved {
			t.Errorf("effect %d after the bulk retry: %s, want approved", id, st)
		}
	}
	if st := f.effect(t, done).State; st != store.EffectDone {
		t.Errorf("the done effect: %s", st)
	}
	if rows := e.audit(t, "effect_retry"); len(rows) != 3 || rows[0].Actor != actor {
		t.Errorf("effect_retry rows: %d, want 3 by %s", len(rows), actor)
	}
	rows := e.audit(t, "bulk_retry")
	if len(rows) != 1 || rows[0].Actor != actor || !strings.Contains(rows[0].Detail, "finished: 3 retried, 0 failed, 1 skipped of 4 planned") ||
		!strings.Contains(rows[0].Detail, "filter state=any") {
		t.Fatalf("bulk_retry audit: %+v; want one row with the filter and the counts", rows)
	}
	_, page := e.c.get("/jobs/" + j.ID)
	if !strings.Contains(page, `id="job-done">3<`) || !strings.Contains(page, "finished") || strings.Contains(page, "hx-trigger") {
		t.Errorf("job page after the run: no counts, or still polling")
	}
	resp, frag := e.c.get("/jobs/"+j.ID+"/progress", "HX-Request", "true")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(frag, `<section id="job-progress"`) || strings.Contains(frag, "<html") {
		t.Errorf("progress fragment: %d %.80s", resp.StatusCode, frag)
	}
	// Nothing is left to retry.
	if _, body := e.c.get("/effects/bulk-retry?state=any"); !strings.Contains(body, `id="plan-retryable">0 `) || strings.Contains(body, `id="bulk-run"`) {
		t.Errorf("second dry run still offers a retry")
	}
}

// A cancelled bulk retry stops before its next effect, and a shutdown
// stops it the same way; each records how far it got in its audit row,
// and no job starts after the shutdown.
func TestBulkRetryCancelAndShutdown(t *testing.T) {
	var g *gatedStore
	e := startOps(t, func(f *fixture) Store {
		g = &gatedStore{Store: f.st, retried: make(chan int64), resume: make(chan struct{})}
		return g
	}, Attachments{})
	f := e.f
	f.addEffect(t, "o_a", "crm", store.EffectDead)
	last := f.addEffect(t, "o_b", "crm", store.EffectDead)
	form := url.Values{"csrf": {e.c.csrf}, "filter": {""}, "upto": {fmt.Sprint(last)}, "planned": {"3"}}

	resp, body := e.c.post("/effects/bulk-retry", form)
	j := e.jobOf(t, resp, body)
	<-g.retried // the first effect is retried; the job waits at the gate
	// A second job of the same session is refused while this one runs.
	if resp, _ := e.c.post("/effects/bulk-retry", form); resp.StatusCode != http.StatusConflict {
		t.Errorf("second job of the session: %d, want 409", resp.StatusCode)
	}
	if resp, _ := e.c.post("/jobs/"+j.ID+"/cancel", url.Values{}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("cancel without a CSRF token: %d, want 403", resp.StatusCode)
	}
	if resp, _ := e.c.post("/jobs/"+j.ID+"/cancel", url.Values{"csrf": {e.c.csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("cancel: %d", resp.StatusCode)
	}
	close(g.resume)
	p := waitJob(t, j)
	if p.Done != 1 || p.Outcome != "cancelled by the operator" {
		t.Fatalf("cancelled job %+v; want 1 retried and cancelled by the operator", p)
	}
	if rows := e.audit(t, "bulk_retry"); len(rows) != 1 || !strings.Contains(rows[0].Detail, "cancelled by the operator: 1 retried") {
		t.Fatalf("audit of the cancelled run: %+v", rows)
	}

	// Shutdown: the next run stops at its first gate.
	g.resume = make(chan struct{})
	resp, body = e.c.post("/effects/bulk-retry", form)
	j = e.jobOf(t, resp, body)
	<-g.retried
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = e.con.Close() }()
	<-j.ctxDone()
	close(g.resume)
	wg.Wait() // Close returns once the job has written its row
	if p := j.progress(); p.Outcome != "stopped by the server's shutdown" || p.Done != 1 {
		t.Fatalf("job at shutdown %+v", p)
	}
	if rows := e.audit(t, "bulk_retry"); len(rows) != 2 || !strings.Contains(rows[1].Detail, "stopped by the server's shutdown: 1 retried") {
		t.Fatalf("audit of the stopped run: %+v", rows)
	}
	if resp, _ := e.c.post("/effects/bulk-retry", form); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a job after shutdown: %d, want 503", resp.StatusCode)
	}
}

// The replay page plans a selection (events, effects already in the
// ledger, work that may create effects), then runs it as a job that
// follows the work through the audit trail to the end.
func TestReplayPlanThenRun(t *testing.T) {
	e := startOps(t, nil, Attachments{Router: routeByEntity{}})
	paused, resume := make(chan struct{}), make(chan struct{})
	e.con.jobs.pause = func(ctx context.Context) error {
		paused <- struct{}{}
		select {
		case <-resume:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	resp, body := e.c.get("/replay?source=stripe&plan=1")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("plan: %d %s", resp.StatusCode, body)
	}
	// evt_1 and evt_2 (sub_1) are replayed; evt_1 caused upsert_deal,
	// evt_2 (stale) caused nothing; evt_3 is unrouted.
	for _, want := range []string{`id="plan-events">2<`, `id="plan-items">2 `, `id="plan-in-ledger">1,`, `id="plan-may-create">1 `,
		`name="source" value="stripe"`, "Replay 2 work items"} {
		if !strings.Contains(body, want) {
			t.Errorf("plan lacks %q", want)
		}
	}
	if rows := e.audit(t, "replay"); len(rows) != 0 {
		t.Fatalf("the plan enqueued a replay")
	}
	if resp, body := e.c.get("/replay?from=yesterday&plan=1"); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "Field from") {
		t.Errorf("plan with a bad time: %d, want 400 naming from", resp.StatusCode)
	}
	if _, body := e.c.get("/replay?source=nobody&plan=1"); !strings.Contains(body, `id="plan-nothing"`) {
		t.Errorf("plan of nothing does not say so")
	}
	if resp, _ := e.c.post("/replay", url.Values{"source": {"stripe"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("replay without a CSRF token: %d, want 403", resp.StatusCode)
	}
	if resp, body := e.c.post("/replay", url.Values{"csrf": {e.c.csrf}, "to": {"2026-13-01T00:00"}}); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "Field to") {
		t.Errorf("replay with a bad time: %d, want 400 naming to", resp.StatusCode)
	}

	resp, body = e.c.post("/replay", url.Values{"csrf": {e.c.csrf}, "source": {"stripe"}, "from": {""}})
	j := e.jobOf(t, resp, body)
	<-paused // enqueued and polled once
	p := j.progress()
	if p.Replay == nil || p.Replay.ReplayID == 0 || p.Replay.WorkItems != 2 || p.Replay.Settled != 0 || p.Total != 2 {
		t.Fatalf("replay job after enqueue: %+v", p)
	}
	_, page := e.c.get("/jobs/" + j.ID)
	if !strings.Contains(page, `id="job-settled">0 of 2<`) || !strings.Contains(page, "hx-trigger") || !strings.Contains(page, `id="job-cancel"`) {
		t.Errorf("job page while the replay waits: %s", page)
	}
	rows := e.audit(t, "replay")
	if len(rows) != 1 || rows[0].Actor != actor {
		t.Fatalf("replay audit: %+v, want one row by %s", rows, actor)
	}
	e.f.processReplay(t)
	resume <- struct{}{}
	p = waitJob(t, j)
	if p.Outcome != "finished" || p.Replay.Settled != 2 || p.Replay.Duplicate != 1 || p.Replay.Stale != 1 || p.Replay.EffectsCreated != 0 {
		t.Fatalf("replay outcome %+v %+v; want evt_1 duplicate, evt_2 stale, no effect created", p, p.Replay)
	}
	_, hist := e.c.get("/replay")
	if want := fmt.Sprintf("replay %d: 2 work items", p.Replay.ReplayID); !strings.Contains(hist, want) || !strings.Contains(hist, actor) {
		t.Errorf("replay history lacks %q by %s", want, actor)
	}
}

// processReplay settles the pending work of sub_1 as the flow engine
// would: evt_1 at r2 (already applied: duplicate), evt_2 at r1 (stale).
func (f *fixture) processReplay(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	leases, err := f.st.EntityClaim(ctx, &store.EntityClaimParams{Owner: "test", Now: f.clk.Now(), LeaseFor: time.Minute, Limit: 10})
	if err != nil || len(leases) != 1 {
		t.Fatalf("claim entity: %v %v", leases, err)
	}
	work, err := f.st.WorkListPending(ctx, &store.WorkListPendingParams{Flow: "billing_to_crm", Entity: "sub_1", Limit: 10})
	if err != nil || len(work) != 2 {
		t.Fatalf("pending work: %v %v", work, err)
	}
	for _, w := range work {
		ap := &store.FlowApplyParams{Lease: leases[0], Now: f.clk.Now(), WorkID: w.ID, EventPK: w.Event.PK, Actor: "worker", Ordered: true,
			Version: "r1", VersionSort: "0000000001", State: []byte(`{"status":"trialing"}`)}
		if w.Event.EventID == "evt_1" {
			ap.Version, ap.VersionSort, ap.State = "r2", "0000000002", []byte(`{"status":"active","seats":3}`)
			ap.Effects = []*store.EffectInsert{{EpisodeKey: "billing_to_crm:sub_1:r2:upsert_deal", Effect: "upsert_deal",
				Destination: "crm", Request: []byte(`{"deal":"sub_1","seats":3}`)}}
		}
		if _, err := f.st.FlowApply(ctx, ap); err != nil {
			t.Fatalf("apply %s: %v", w.Event.EventID, err)
		}
	}
	if err := f.st.EntityRelease(ctx, &store.EntityReleaseParams{Lease: leases[0], Now: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
}

// Without a flow engine the replay page says it is off.
func TestReplayOffWithoutEngine(t *testing.T) {
	e := startOps(t, nil, Attachments{})
	if _, body := e.c.get("/replay?plan=1"); !strings.Contains(body, "Replay needs this server&#39;s flow engine") {
		t.Errorf("replay page without an engine does not say it is off")
	}
	if resp, _ := e.c.post("/replay", url.Values{"csrf": {e.c.csrf}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("replay without an engine: %d, want 404", resp.StatusCode)
	}
}

// The destinations and sources page: calls, success, latency and classes
// per destination from the attempts, parked effects, the token bucket; per
// source the last event, dispositions and the receiver's rejections.
func TestDestinationsPage(t *testing.T) {
	reg := prometheus.NewRegistry()
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: requestsMetric, Help: "test"}, []string{"source", "code"})
	reg.MustRegister(requests)
	requests.WithLabelValues("stripe", "200").Add(5)
	requests.WithLabelValues("stripe", "401").Add(2)
	requests.WithLabelValues("stripe", "403").Add(1)
	e := startOps(t, nil, Attachments{Metrics: reg, Sources: []string{"stripe", "quiet"}, Destinations: []string{"crm", "erp"},
		Limits: func() []DestinationLimit {
			return []DestinationLimit{{Destination: "crm", PerSecond: 5, Burst: 10, Tokens: 7.5, InFlight: 1, MaxInFlight: 4}}
		}})
	e.f.addEffect(t, "o_ok", "crm", store.EffectDone)
	e.f.addEffect(t, "o_nr", "crm", store.EffectNeedsReconciliation)
	if _, err := e.f.st.EffectOperate(context.Background(), &store.EffectOperateParams{EffectID: e.f.deadID, Action: store.OperateAssign,
		Actor: "operator:alice", Owner: "alice", Now: e.f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	resp, body := e.c.get("/destinations")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("destinations: %d %s", resp.StatusCode, body)
	}
	// crm: the fixture's 429 and 422, then a 200 and an unknown outcome:
	// 4 calls, 1 success.
	for _, want := range []string{
		`<td><a href="/effects?destination=crm&amp;state=any">crm</a></td>`, `<td class="num">4</td>`, "25.0%",
		"<div>quota 1</div>", "<div>permanent 1</div>", "<div>unknown_outcome 1</div>",
		"<div>alice 1</div>", "5/s, burst 10; 7.5 tokens now; 1 of 4 calls in flight",
		`<td><a href="/effects?destination=erp&amp;state=any">erp</a></td>`,
		`<a href="/events?source=quiet">quiet</a></td>`, "never",
		"<div>401: 2</div>", `<a href="/events?disposition=unrouted&amp;source=stripe">unrouted</a> 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("destinations page lacks %q", want)
		}
	}
	// p50 of 40ms, 40ms, 80ms, 95ms is 40ms; p99 95ms.
	if !strings.Contains(body, `<td class="num">40ms</td>`) || !strings.Contains(body, `<td class="num">95ms</td>`) {
		t.Errorf("latency percentiles missing")
	}
}
