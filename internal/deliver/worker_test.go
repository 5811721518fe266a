package deliver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/deliver/delivertest"
	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/outbound"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
	"github.com/hookledger/hookledger/internal/tracing"
)

var t0 = time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)

// jitter is the fixed draw of Options.Rand: every backoff wait is half its
// ceiling, so the tests know the exact next_attempt_at.
const jitter = 0.5

// world is one worker against a real SQLite ledger, a flow engine that
// creates its effects, the fault-injecting destination and a notification
// webhook, all on one fake clock.
type world struct {
	t      *testing.T
	ctx    context.Context
	clk    *clock.Fake
	st     *sqlite.Store
	cfg    *config.Config
	eng    *flow.Engine
	w      *deliver.Worker
	dest   *delivertest.Server
	hook   *hookRecorder
	logs   *lockedBuffer
	events int
	// traceparent is stored with each event commit stores, as the
	// receive span's context is.
	traceparent string
}

// lockedBuffer collects the worker's log records.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// hookRecorder is the Slack-compatible incoming webhook notifications go to.
type hookRecorder struct {
	*httptest.Server
	mu    sync.Mutex
	texts []string
}

func (h *hookRecorder) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.texts...)
}

// defaultRequest is the effect's request block: the fault server counts
// work per episode key, which the flow sends in a header of its own.
const defaultRequest = `path: '"/charges"'
headers: {X-Episode-Key: '"orders:" + entity + ":r" + string(version) + ":charge"'}
body: '{"order": entity, "rev": version, "state": state}'`

// setup is what a test changes: the destination block, the fault server
// and custom actions.
type setup struct {
	// request replaces defaultRequest (YAML lines, unindented).
	request string
	dest    string // destination fields beyond name, base_url, kind and timeout
	srv     delivertest.Options
	actions map[string]deliver.Action
	kind    string
	// baseURL replaces the fault server as the destination's base_url;
	// "{dest}" in it stands for the fault server's URL.
	baseURL string
	// client is the worker's injected Options.HTTPClient.
	client *http.Client
	// webhookURL replaces the recording notification webhook.
	webhookURL string
	// The test listeners are on loopback, so the destination and the
	// notification webhook allow private networks unless these are set.
	strictDest, strictHook bool
	// resolver replaces DNS for the destination's address check.
	resolver outbound.Resolver
	// tracing is the worker's tracer provider (nil: off).
	tracing *tracing.Provider
}

const flowYAML = `sources:
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
    state: event.state
    effects:
      - name: charge
        destination: dest
        request:
%s
notifications:
  webhook_url: %s
  allow_private_networks: %t
  timeout: 2s
delivery:
  lease: 30s
destinations:
  - name: dest
    base_url: %s
    allow_private_networks: %t
    kind: %s
    timeout: 10s
%s`

func newWorld(t *testing.T, s setup) *world {
	t.Helper()
	// The fault server counts work per episode key, which the flow sends in
	// a header of its own when no idempotency key carries it.
	s.srv.KeyHeader = "X-Episode-Key"
	// Timeout faults hang up at once: no test depends on a short timeout
	// that a busy machine could trip on a healthy call.
	s.srv.HangUp = true
	clk := clock.NewFake(t0)
	if s.srv.Now == nil {
		s.srv.Now = clk.Now
	}
	dest := delivertest.New(s.srv)
	t.Cleanup(dest.Close)
	hook := &hookRecorder{}
	hook.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]string
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &m); err != nil || m["text"] == "" {
			t.Errorf("notification is not a Slack message: %s", b)
		}
		hook.mu.Lock()
		hook.texts = append(hook.texts, m["text"])
		hook.mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	kind := s.kind
	if kind == "" {
		kind = "http"
	}
	if !strings.Contains(s.dest, "retry:") {
		s.dest += "\nretry: {base: 1s, cap: 1m, factor: 2, attempts: 4}"
	}
	indented := ""
	for _, l := range strings.Split(strings.TrimSpace(s.dest), "\n") {
		if l != "" {
			indented += "    " + l + "\n"
		}
	}
	base := dest.URL
	if s.baseURL != "" {
		base = strings.ReplaceAll(s.baseURL, "{dest}", dest.URL)
	}
	webhook := hook.URL
	if s.webhookURL != "" {
		webhook = s.webhookURL
	}
	if s.request == "" {
		s.request = defaultRequest
	}
	request := ""
	for _, l := range strings.Split(strings.TrimSpace(s.request), "\n") {
		request += "          " + l + "\n"
	}
	yaml := fmt.Sprintf(flowYAML, strings.TrimSuffix(request, "\n"), webhook, !s.strictHook, base, !s.strictDest, kind, indented)
	cfg, err := config.Parse("hookledger.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yaml)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "deliver.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	w, err := deliver.New(cfg, st, deliver.Options{Workers: 4, LeaseFor: cfg.Delivery.Lease.D(), Clock: clk,
		Rand: func() float64 { return jitter }, Actions: s.actions, Owner: "worker-a", HTTPClient: s.client, Resolver: s.resolver, Tracing: s.tracing,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	return &world{t: t, ctx: context.Background(), clk: clk, st: st, cfg: cfg, w: w, dest: dest, hook: hook, logs: logs,
		eng: flow.New(cfg, st, flow.Options{Clock: clk, LeaseFor: 10 * time.Second})}
}

// order sends one order event and processes it, returning the effect it
// approved.
func (x *world) order(id string, rev int) *store.Effect {
	x.t.Helper()
	x.commit(id, rev)
	key := fmt.Sprintf("orders:%s:r%d:charge", id, rev)
	for _, e := range x.effects() {
		if e.EpisodeKey == key {
			return e
		}
	}
	x.t.Fatalf("no effect %s", key)
	return nil
}

// commit stores one order event and processes it.
func (x *world) commit(id string, rev int) {
	x.t.Helper()
	x.events++
	body := fmt.Sprintf(`{"order_id":%q,"rev":%d,"state":"PAID"}`, id, rev)
	res, err := x.st.InboxCommit(x.ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{
		Deliveries: []*store.DeliveryInput{{RequestID: fmt.Sprint("req-", x.events), Source: "shop",
			EventID: fmt.Sprintf("evt_%s_%d", id, rev), Type: "order.paid", OccurredAt: x.clk.Now(),
			ReceivedAt: x.clk.Now(), TraceContext: x.traceparent, Body: []byte(body)}},
	}}})
	if err != nil || res[0].Err != nil {
		x.t.Fatalf("commit: %v %v", err, res)
	}
	if err := x.eng.Drain(x.ctx); err != nil {
		x.t.Fatalf("process: %v", err)
	}
}

// event returns a stored event with its routes.
func (x *world) event(eventID string) *store.Event {
	x.t.Helper()
	r, err := x.st.EventList(x.ctx, &store.EventListParams{Source: "shop", EventID: eventID, WithRoutes: true})
	if err != nil || len(r.Events) != 1 {
		x.t.Fatalf("event %s: %v %v", eventID, r, err)
	}
	return r.Events[0]
}

func (x *world) effects() []*store.Effect {
	x.t.Helper()
	es, err := x.st.EffectList(x.ctx, &store.EffectListParams{Flow: "orders", Limit: 1000})
	if err != nil {
		x.t.Fatal(err)
	}
	return es
}

func (x *world) get(id int64) *store.Effect {
	x.t.Helper()
	e, err := x.st.EffectGet(x.ctx, id)
	if err != nil || e == nil {
		x.t.Fatalf("effect %d: %v", id, err)
	}
	return e
}

func (x *world) attempts(id int64) []*store.Attempt {
	x.t.Helper()
	as, err := x.st.AttemptList(x.ctx, id)
	if err != nil {
		x.t.Fatal(err)
	}
	return as
}

func (x *world) drain() {
	x.t.Helper()
	if err := x.w.Drain(x.ctx); err != nil {
		x.t.Fatalf("drain: %v", err)
	}
}

// until drains and moves the fake clock to each scheduled retry until the
// effect reaches one of the states (a bounded number of rounds).
func (x *world) until(id int64, states ...store.EffectState) *store.Effect {
	x.t.Helper()
	for range 50 {
		x.drain()
		e := x.get(id)
		for _, s := range states {
			if e.State == s {
				return e
			}
		}
		if e.NextAttemptAt.IsZero() {
			x.t.Fatalf("effect %s is %s with nothing scheduled (%s), want %v", e.EpisodeKey, e.State, e.Reason, states)
		}
		x.clk.Set(e.NextAttemptAt)
	}
	x.t.Fatalf("effect %d never reached %v", id, states)
	return nil
}

func (x *world) wantState(e *store.Effect, want store.EffectState) {
	x.t.Helper()
	if e.State != want {
		x.t.Fatalf("%s is %s (%s: %s), want %s", e.EpisodeKey, e.State, e.ErrorClass, e.Reason, want)
	}
}

func TestSuccessIsDoneWithDestinationRef(t *testing.T) {
	x := newWorld(t, setup{})
	e := x.order("o1", 1)
	x.drain()
	e = x.get(e.ID)
	x.wantState(e, store.EffectDone)
	if !strings.HasPrefix(e.DestinationRef, "obj_") {
		t.Fatalf("destination_ref %q", e.DestinationRef)
	}
	as := x.attempts(e.ID)
	if len(as) != 1 || as[0].Status != 201 || as[0].Class != store.ClassNone {
		t.Fatalf("attempts %+v", as[0])
	}
	if x.dest.Executions(e.EpisodeKey) != 1 {
		t.Fatal("not executed once")
	}
}

func TestTransientThenSuccessWaitsWithJitter(t *testing.T) {
	x := newWorld(t, setup{})
	e := x.order("o1", 1)
	x.dest.Script(e.EpisodeKey, delivertest.Fail500)
	x.drain()
	e = x.get(e.ID)
	x.wantState(e, store.EffectRetryWait)
	as := x.attempts(e.ID)
	// Full jitter after attempt 1: a draw in [0, base) = [0, 1s).
	ceiling := deliver.Backoff{Base: time.Second, Factor: 2, Cap: time.Minute}.Ceiling(1)
	if len(as) != 1 || as[0].Status != 500 || as[0].Class != store.ClassTransient || as[0].Wait < 0 || as[0].Wait >= ceiling ||
		as[0].Wait != time.Duration(jitter*float64(ceiling)) {
		t.Fatalf("attempt %+v, want a 500 with a wait of %v", as[0], time.Duration(jitter*float64(ceiling)))
	}
	if !e.NextAttemptAt.Equal(t0.Add(as[0].Wait)) {
		t.Fatalf("next_attempt_at %v, want %v", e.NextAttemptAt, t0.Add(as[0].Wait))
	}
	// Not due before its time.
	x.clk.Advance(as[0].Wait - time.Millisecond)
	x.drain()
	if x.dest.Calls(e.EpisodeKey) != 1 {
		t.Fatal("retried before next_attempt_at")
	}
	x.clk.Advance(time.Millisecond)
	x.drain()
	e = x.get(e.ID)
	x.wantState(e, store.EffectDone)
	if x.dest.Calls(e.EpisodeKey) != 2 || x.dest.Executions(e.EpisodeKey) != 1 {
		t.Fatalf("calls %d executions %d", x.dest.Calls(e.EpisodeKey), x.dest.Executions(e.EpisodeKey))
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault delivertest.Fault
		dest  string
		raw   func(now time.Time) string
		unit  string
		wait  time.Duration
	}{
		{"seconds", delivertest.Fail429Seconds, "", func(time.Time) string { return "7" }, "seconds", 7 * time.Second},
		{"milliseconds", delivertest.Fail429Millis, "retry_after: {unit: milliseconds}", func(time.Time) string { return "7000" }, "milliseconds", 7 * time.Second},
		{"http-date", delivertest.Fail429Date, "", func(now time.Time) string { return now.Add(7 * time.Second).Format(http.TimeFormat) }, "date", 7 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newWorld(t, setup{dest: tc.dest, srv: delivertest.Options{RetryAfter: 7 * time.Second}})
			e := x.order("o1", 1)
			x.dest.Script(e.EpisodeKey, tc.fault)
			x.drain()
			e = x.get(e.ID)
			x.wantState(e, store.EffectRetryWait)
			a := x.attempts(e.ID)[0]
			if a.Status != 429 || a.Class != store.ClassQuota || a.RetryAfter != tc.raw(t0) || a.RetryAfterUnit != tc.unit || a.Wait != tc.wait {
				t.Fatalf("attempt: status %d class %s raw %q unit %q wait %v; want raw %q unit %q wait %v",
					a.Status, a.Class, a.RetryAfter, a.RetryAfterUnit, a.Wait, tc.raw(t0), tc.unit, tc.wait)
			}
			if !e.NextAttemptAt.Equal(t0.Add(tc.wait)) {
				t.Fatalf("next_attempt_at %v, want %v", e.NextAttemptAt, t0.Add(tc.wait))
			}
			x.clk.Advance(tc.wait - time.Millisecond)
			x.drain()
			if x.dest.Calls(e.EpisodeKey) != 1 {
				t.Fatal("called again before Retry-After")
			}
			x.clk.Advance(time.Millisecond)
			x.drain()
			x.wantState(x.get(e.ID), store.EffectDone)
		})
	}
}

// Attempts exhausted: dead with a reason, re-driven at 15 min, 1 h and 6 h,
// then left to a person (and they are told).
func TestExhaustedIsDeadThenRedrivenThenAPerson(t *testing.T) {
	x := newWorld(t, setup{dest: "retry: {base: 1s, cap: 10s, factor: 2, attempts: 3}"})
	e := x.order("o1", 1)
	faults := make([]delivertest.Fault, 12)
	for i := range faults {
		faults[i] = delivertest.Fail500
	}
	x.dest.Script(e.EpisodeKey, faults...)
	for i, redrive := range []time.Duration{15 * time.Minute, time.Hour, 6 * time.Hour} {
		e = x.until(e.ID, store.EffectDead)
		if e.ErrorClass != store.ClassTransient || !strings.Contains(e.Reason, "3 attempts made") ||
			!strings.Contains(e.Reason, fmt.Sprintf("re-drive %d of 3 scheduled", i+1)) || e.SuggestedRepair == "" {
			t.Fatalf("dead %d: [%s] %s / %s", i, e.ErrorClass, e.Reason, e.SuggestedRepair)
		}
		if !e.NextAttemptAt.Equal(x.clk.Now().Add(redrive)) {
			t.Fatalf("re-drive %d at %v, want now + %v", i+1, e.NextAttemptAt.Sub(x.clk.Now()), redrive)
		}
		if n := x.dest.Calls(e.EpisodeKey); n != 3*(i+1) {
			t.Fatalf("calls %d, want %d", n, 3*(i+1))
		}
		x.clk.Advance(redrive - time.Second)
		x.drain()
		if x.get(e.ID).State != store.EffectDead {
			t.Fatal("re-driven early")
		}
		x.clk.Advance(time.Second)
		x.drain()
		if e = x.get(e.ID); e.Redrives != i+1 {
			t.Fatalf("redrives %d, want %d", e.Redrives, i+1)
		}
	}
	e = x.until(e.ID, store.EffectDead)
	if !strings.Contains(e.Reason, "no re-drive left") || !e.NextAttemptAt.IsZero() {
		t.Fatalf("after the last re-drive: %s, next %v", e.Reason, e.NextAttemptAt)
	}
	x.clk.Advance(7 * 24 * time.Hour)
	x.drain()
	if n := x.dest.Calls(e.EpisodeKey); n != 12 {
		t.Fatalf("calls %d, want 12 (4 rounds of 3)", n)
	}
	texts := x.hook.all()
	if len(texts) != 1 || !strings.Contains(texts[0], e.EpisodeKey) || !strings.Contains(texts[0], "dead") {
		t.Fatalf("notifications %q", texts)
	}
	// Each state change a person must know of is logged at the default
	// level: three scheduled re-drives, then the hand-over to a person.
	logs := x.logs.String()
	if n := strings.Count(logs, `level=INFO msg="effect dead, re-drive scheduled"`); n != 3 {
		t.Errorf("%d re-drive records, want 3:\n%s", n, logs)
	}
	if n := strings.Count(logs, `level=WARN msg="effect needs a person"`); n != 1 {
		t.Errorf("%d hand-over records, want 1:\n%s", n, logs)
	}
}

func TestPermanentAndHiddenFailuresAreNeverRetried(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault delivertest.Fault
		dest  string
		class store.ErrorClass
	}{
		{"400", delivertest.Fail400, "", store.ClassPermanent},
		{"hidden failure (marketo preset)", delivertest.HiddenFailure, "preset: marketo", store.ClassHiddenFailure},
		{"batch with a failed record (classify rule)", delivertest.BatchPartial,
			`classify: [{status: 200, body_contains: '"status":"error"', class: hidden_failure, reason: a record of the batch failed}]`,
			store.ClassHiddenFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newWorld(t, setup{dest: tc.dest})
			e := x.order("o1", 1)
			x.dest.Script(e.EpisodeKey, tc.fault)
			x.drain()
			e = x.get(e.ID)
			x.wantState(e, store.EffectDead)
			if e.ErrorClass != tc.class || e.Reason == "" || e.SuggestedRepair == "" || !e.NextAttemptAt.IsZero() {
				t.Fatalf("dead: [%s] %q / %q next %v", e.ErrorClass, e.Reason, e.SuggestedRepair, e.NextAttemptAt)
			}
			for range 4 {
				x.clk.Advance(7 * time.Hour)
				x.drain()
			}
			if n := x.dest.Calls(e.EpisodeKey); n != 1 {
				t.Fatalf("destination saw %d calls, want exactly 1", n)
			}
			if texts := x.hook.all(); len(texts) != 1 || !strings.Contains(texts[0], e.EpisodeKey) {
				t.Fatalf("notifications %q", texts)
			}
		})
	}
}

// A destination that saved the 500 of a call it began (Stripe's rule) and
// replays it for the same key: with the replay marker known (the stripe
// preset sets it), the effect goes to a person at the first replay instead
// of burning its retries and re-drives on the same answer; without it, the
// retries run as for any 500.
func TestReplayedFailureGoesToAPersonAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		dest      string
		wantCalls int
	}{
		{"stripe preset", "preset: stripe", 2},
		{"explicit replayed_header", "idempotency: {header: Idempotency-Key, window: 24h, replayed_header: Idempotent-Replayed}", 2},
		{"no replay marker configured", idem + "\nretry: {attempts: 3, redrive: []}", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newWorld(t, setup{dest: tc.dest, srv: delivertest.Options{IdempotencyHeader: "Idempotency-Key", Window: 24 * time.Hour}})
			e := x.order("o1", 1)
			// The destination knows the effect by the key it was sent
			// (hashed under the stripe preset).
			key := deliver.IdempotencyKey(&x.cfg.Destinations[0], e.EpisodeKey)
			x.dest.Script(key, delivertest.Fail500Saved)
			e = x.until(e.ID, store.EffectDead)
			if e.ErrorClass != store.ClassTransient || e.SuggestedRepair == "" || !e.NextAttemptAt.IsZero() {
				t.Fatalf("dead: [%s] %q / %q next %v", e.ErrorClass, e.Reason, e.SuggestedRepair, e.NextAttemptAt)
			}
			replayed := strings.Contains(e.Reason, "Idempotent-Replayed: true") && strings.Contains(e.Reason, e.EpisodeKey) &&
				strings.Contains(e.Reason, "Idempotency-Key "+key)
			if replayed != (tc.wantCalls == 2) {
				t.Fatalf("reason %q: replay named %v, want %v", e.Reason, replayed, tc.wantCalls == 2)
			}
			for range 4 {
				x.clk.Advance(7 * time.Hour)
				x.drain()
			}
			if n := x.dest.Calls(key); n != tc.wantCalls {
				t.Fatalf("destination saw %d calls, want %d", n, tc.wantCalls)
			}
			if texts := x.hook.all(); len(texts) != 1 || !strings.Contains(texts[0], e.EpisodeKey) {
				t.Fatalf("notifications %q", texts)
			}
		})
	}
}

const idem = "idempotency: {header: Idempotency-Key, window: 24h}"

// A timeout after the work inside the key's window: resent under the same
// key, and the destination replays its saved answer instead of working
// again.
func TestUnknownOutcomeResentInsideWindow(t *testing.T) {
	x := newWorld(t, setup{dest: idem, srv: delivertest.Options{IdempotencyHeader: "Idempotency-Key", Window: 24 * time.Hour}})
	e := x.order("o1", 1)
	x.dest.Script(e.EpisodeKey, delivertest.TimeoutAfterWork)
	x.drain()
	e = x.get(e.ID)
	x.wantState(e, store.EffectRetryWait)
	if a := x.attempts(e.ID)[0]; a.Class != store.ClassUnknown || a.Status != 0 {
		t.Fatalf("attempt %+v", a)
	}
	e = x.until(e.ID, store.EffectDone)
	reqs := x.dest.Requests()
	if len(reqs) != 2 || !reqs[1].Replayed || reqs[0].Header.Get("Idempotency-Key") != e.EpisodeKey ||
		reqs[1].Header.Get("Idempotency-Key") != e.EpisodeKey {
		t.Fatalf("requests %+v", reqs)
	}
	if x.dest.Executions(e.EpisodeKey) != 1 || e.DestinationRef == "" {
		t.Fatalf("executions %d ref %q", x.dest.Executions(e.EpisodeKey), e.DestinationRef)
	}
}

// Outside the window and without lookup, a resend could do the work twice:
// a person decides, and is told.
func TestUnknownOutcomeOutsideWindowNeedsAPerson(t *testing.T) {
	x := newWorld(t, setup{dest: "idempotency: {header: Idempotency-Key, window: 1m}",
		srv: delivertest.Options{IdempotencyHeader: "Idempotency-Key", Window: time.Minute}})
	e := x.order("o1", 1)
	x.dest.Script(e.EpisodeKey, delivertest.TimeoutAfterWork)
	x.clk.Advance(2 * time.Minute) // the worker gets to it after the key's window
	x.drain()
	e = x.get(e.ID)
	x.wantState(e, store.EffectNeedsReconciliation)
	if e.ErrorClass != store.ClassUnknown || !strings.Contains(e.Reason, "no lookup is configured") || e.SuggestedRepair == "" {
		t.Fatalf("[%s] %s / %s", e.ErrorClass, e.Reason, e.SuggestedRepair)
	}
	x.clk.Advance(48 * time.Hour)
	x.drain()
	if x.dest.Calls(e.EpisodeKey) != 1 || x.dest.Executions(e.EpisodeKey) != 1 {
		t.Fatalf("calls %d executions %d", x.dest.Calls(e.EpisodeKey), x.dest.Executions(e.EpisodeKey))
	}
	texts := x.hook.all()
	if len(texts) != 1 || !strings.Contains(texts[0], e.EpisodeKey) || !strings.Contains(texts[0], "needs_reconciliation") ||
		!strings.Contains(texts[0], fmt.Sprintf("effect %d", e.ID)) {
		t.Fatalf("notifications %q", texts)
	}
}

const lookup = `lookup:
  path: '"/effects/" + episode_key'
  found: status == 200
  ref: body.id`

// With lookup: the unknown outcome is settled by asking, never by a second
// execution; a lookup that finds nothing makes the resend safe.
func TestUnknownOutcomeReconciledByLookup(t *testing.T) {
	x := newWorld(t, setup{dest: lookup})
	done := x.order("o1", 1)
	x.dest.Script(done.EpisodeKey, delivertest.TimeoutAfterWork)
	lost := x.order("o2", 1)
	x.dest.Script(lost.EpisodeKey, delivertest.TimeoutBeforeWork)
	x.drain()

	e := x.get(done.ID)
	x.wantState(e, store.EffectDone)
	if !strings.Contains(e.Reason, "reconciled") || !strings.HasPrefix(e.DestinationRef, "obj_") {
		t.Fatalf("%s / ref %q", e.Reason, e.DestinationRef)
	}
	if x.dest.Calls(e.EpisodeKey) != 1 || x.dest.Executions(e.EpisodeKey) != 1 || x.dest.Lookups(e.EpisodeKey) != 1 {
		t.Fatalf("calls %d executions %d lookups %d", x.dest.Calls(e.EpisodeKey), x.dest.Executions(e.EpisodeKey), x.dest.Lookups(e.EpisodeKey))
	}

	e = x.get(lost.ID)
	x.wantState(e, store.EffectRetryWait)
	if !strings.Contains(e.Reason, "lookup found nothing") {
		t.Fatal(e.Reason)
	}
	e = x.until(lost.ID, store.EffectDone)
	if x.dest.Calls(e.EpisodeKey) != 2 || x.dest.Executions(e.EpisodeKey) != 1 || x.dest.Lookups(e.EpisodeKey) != 1 {
		t.Fatalf("calls %d executions %d lookups %d", x.dest.Calls(e.EpisodeKey), x.dest.Executions(e.EpisodeKey), x.dest.Lookups(e.EpisodeKey))
	}
}

// A worker that dies during its call leaves the effect submitting; after
// the lease the next claim is Resumed and reconciles instead of resending.
func TestWorkerDiedMidCallIsReconciled(t *testing.T) {
	for _, tc := range []struct{ name, dest string }{
		{"lookup", lookup},
		{"idempotency key", idem},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newWorld(t, setup{dest: tc.dest, srv: delivertest.Options{IdempotencyHeader: "Idempotency-Key"}})
			e := x.order("o1", 1)
			claims, err := x.st.EffectClaim(x.ctx, &store.EffectClaimParams{Owner: "worker-dead", Now: x.clk.Now(),
				LeaseFor: 30 * time.Second, Limit: 10, Destinations: []string{"dest"}, MaxRedrives: 3})
			if err != nil || len(claims) != 1 {
				t.Fatalf("claim: %v %v", claims, err)
			}
			// The dead worker's call reached the destination, which did the
			// work; the worker never settled.
			var stored struct{ Body json.RawMessage }
			if err := json.Unmarshal(e.Request, &stored); err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest("POST", x.dest.URL+"/charges", strings.NewReader(string(stored.Body)))
			req.Header.Set("Idempotency-Key", e.EpisodeKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			x.drain()
			if x.get(e.ID).State != store.EffectSubmitting {
				t.Fatal("taken over while the lease holds")
			}
			x.clk.Advance(31 * time.Second)
			x.drain()
			e = x.until(e.ID, store.EffectDone)
			if x.dest.Executions(e.EpisodeKey) != 1 {
				t.Fatalf("executed %d times", x.dest.Executions(e.EpisodeKey))
			}
			if tc.dest == lookup && (x.dest.Calls(e.EpisodeKey) != 1 || x.dest.Lookups(e.EpisodeKey) != 1) {
				t.Fatalf("lookup path: calls %d lookups %d", x.dest.Calls(e.EpisodeKey), x.dest.Lookups(e.EpisodeKey))
			}
		})
	}
}

// The token bucket holds per fake-clock second; effects it refuses are
// released, not called.
func TestRateLimitIsRespected(t *testing.T) {
	x := newWorld(t, setup{dest: "rate_limit: {per_second: 2, burst: 2}"})
	for i := range 10 {
		x.order(fmt.Sprint("o", i), 1)
	}
	perSecond := map[int64]int{}
	for range 10 {
		// Steps rather than Drain: a released effect must not be claimed
		// again before its NotBefore, but the limit is checked here on its
		// own (see release_test.go for the release itself).
		for range 3 {
			if _, err := x.w.Step(x.ctx); err != nil {
				t.Fatal(err)
			}
		}
		x.clk.Advance(time.Second)
	}
	for _, r := range x.dest.Requests() {
		perSecond[r.At.Unix()]++
	}
	total := 0
	for s, n := range perSecond {
		total += n
		// burst 2 at the start, then 2 per second.
		if n > 2 {
			t.Errorf("second %d: %d calls, the limit is 2", s-t0.Unix(), n)
		}
	}
	if total != 10 {
		t.Fatalf("%d calls, want 10 (%v)", total, perSecond)
	}
	for _, e := range x.effects() {
		x.wantState(e, store.EffectDone)
	}
}

type queueAction struct {
	mu    sync.Mutex
	calls []*deliver.Call
}

func (q *queueAction) Do(_ context.Context, c *deliver.Call) (*deliver.Response, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.calls = append(q.calls, c)
	return &deliver.Response{Status: 202, Body: []byte(`{"id":"msg-1"}`), Sent: true}, nil
}

func TestCustomActionKind(t *testing.T) {
	q := &queueAction{}
	x := newWorld(t, setup{kind: "queue", actions: map[string]deliver.Action{"queue": q}})
	e := x.order("o1", 1)
	x.drain()
	e = x.get(e.ID)
	x.wantState(e, store.EffectDone)
	if len(q.calls) != 1 || q.calls[0].EpisodeKey != e.EpisodeKey || q.calls[0].Path != "/charges" || e.DestinationRef != "msg-1" {
		t.Fatalf("calls %+v ref %q", q.calls, e.DestinationRef)
	}
	if len(x.dest.Requests()) != 0 {
		t.Fatal("the http destination was called")
	}
}

func TestCausationHeaders(t *testing.T) {
	x := newWorld(t, setup{})
	e := x.order("o1", 1)
	if e.CausationID == "" {
		t.Fatal("effect has no causation")
	}
	x.drain()
	reqs := x.dest.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	h := reqs[0].Header
	if h.Get("X-Hookledger-Causation") != e.CausationID || h.Get("X-Hookledger-Hop") != fmt.Sprint(e.Hop) || e.Hop < 1 {
		t.Fatalf("headers %v, effect causation %q hop %d", h, e.CausationID, e.Hop)
	}
}
