package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

// signalsWorld is the destinations of the end-to-end signals test: a
// mailer that keeps what it was sent (by idempotency key) and answers
// lookups for it, a CRM that can hang after reading a call, a slow system
// that answers 503 until it is fixed, and two systems that echo each
// other's changes.
type signalsWorld struct {
	mu        sync.Mutex
	held      map[string]bool // mail idempotency keys the mailer holds
	voidDown  bool            // the mailer's void endpoint answers 503
	crmHangs  bool            // the CRM reads the call, then never answers
	slowDown  bool            // the slow system answers 503
	voidCalls int
}

func (w *signalsWorld) set(f func(w *signalsWorld)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(w)
}

func (w *signalsWorld) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w.mu.Lock()
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/mails":
		w.held[r.Header.Get("Idempotency-Key")] = true
		w.mu.Unlock()
		rw.WriteHeader(http.StatusCreated)
		_, _ = rw.Write([]byte(`{"id":"m_1"}`))
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/mails/"):
		found := w.held[strings.TrimPrefix(r.URL.Path, "/mails/")]
		w.mu.Unlock()
		if !found {
			http.NotFound(rw, r)
			return
		}
		_, _ = rw.Write([]byte(`{"id":"m_1"}`))
	case r.Method == http.MethodPost && r.URL.Path == "/mails/void":
		w.voidCalls++
		down := w.voidDown
		w.mu.Unlock()
		if down {
			http.Error(rw, "maintenance", http.StatusServiceUnavailable)
			return
		}
		w.set(func(w *signalsWorld) { w.held[r.Header.Get("Idempotency-Key")] = true })
		rw.WriteHeader(http.StatusCreated)
	case r.URL.Path == "/crm":
		hang := w.crmHangs
		w.mu.Unlock()
		if hang {
			<-r.Context().Done() // the call was read; its answer never comes
			return
		}
		rw.WriteHeader(http.StatusCreated)
	case r.URL.Path == "/slow":
		down := w.slowDown
		w.mu.Unlock()
		if down {
			http.Error(rw, "busy", http.StatusServiceUnavailable)
			return
		}
		rw.WriteHeader(http.StatusOK)
	default:
		w.mu.Unlock()
		rw.WriteHeader(http.StatusCreated) // the echoing systems
	}
}

const signalsFlows = `
processing:
  poll_interval: 5ms
delivery:
  poll_interval: 5ms
causation:
  trusted_sources: [sys_a, sys_b]
signals:
  interval: 20ms
  window: 1h
  thresholds:                         # one item is enough to alert here
    revision_lag: {alert: 1}
    unknown_outcomes: {alert: 1}
    key_conflicts: {alert: 1}
    dead_letters: {alert: 1}
    compensation_outstanding: {alert: 1}
    loop_blocks: {alert: 1}
destinations:
  - name: mailer
    base_url: "DEST_URL"
    allow_private_networks: true
    idempotency: {header: Idempotency-Key, window: 24h}
    lookup:
      path: '"/mails/" + pathEscape(episode_key)'
      found: status == 200
    verify: {sample: 1.0, after: 10m, per_second: 100}
  - name: crm
    base_url: "DEST_URL"
    allow_private_networks: true
    timeout: 300ms
  - name: slow
    base_url: "DEST_URL"
    allow_private_networks: true
    retry: {attempts: 20}
  - {name: sys_a, base_url: "DEST_URL", allow_private_networks: true}
  - {name: sys_b, base_url: "DEST_URL", allow_private_networks: true}
flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.revision}
    state: event.intent               # an event without an intent dead-letters
    effects:
      - name: confirm
        when: state == "CONFIRMED"
        destination: mailer
        request: {path: '"/mails"'}
        compensation: {path: '"/mails/void"'}
        compensate_when: state == "CANCELLED"
      - name: crm_sync
        when: state == "CREATED"
        destination: crm
        request: {path: '"/crm"'}
      - name: remind
        when: state == "PENDING"
        destination: slow
        request: {path: '"/slow"'}
        deadline: 30m
  - name: a_to_b
    source: sys_a
    events: ["*"]
    entity: event.id
    version: {mode: revision, revision: event.rev}
    effects:
      - {name: push_b, destination: sys_b, request: {path: '"/contacts"'}}
  - name: b_to_a
    source: sys_b
    events: ["*"]
    entity: event.id
    version: {mode: revision, revision: event.rev}
    effects:
      - {name: push_a, destination: sys_a, request: {path: '"/contacts"'}}
`

type signalJSON struct {
	Name      string                      `json:"name"`
	Value     int64                       `json:"value"`
	OldestAge *float64                    `json:"oldest_age_seconds"`
	Status    string                      `json:"status"`
	Breakdown map[string]map[string]int64 `json:"breakdown"`
}

// Each signal is driven from ok to alert by real traffic through a real
// server (real HTTP, real store, the server's fake clock), then back to ok
// by the repair docs/signals.md gives for it.
func TestSignalsEndToEnd(t *testing.T) { stores(t, testSignalsEndToEnd) }

func testSignalsEndToEnd(t *testing.T, storeURL string) {
	world := &signalsWorld{held: map[string]bool{}}
	dest := httptest.NewServer(world)
	t.Cleanup(dest.Close)
	yaml := strings.Replace(testConfig(storeURL), "sources:\n", "sources:\n"+flowSources(), 1) +
		strings.ReplaceAll(signalsFlows, "DEST_URL", dest.URL)
	h := startWith(t, yaml)
	st, err := storeopen.Open(context.Background(), h.cfg.Store)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()

	read := func() map[string]signalJSON {
		t.Helper()
		code, b := h.get("/api/v1/signals", adminToken)
		var doc struct {
			Signals []signalJSON `json:"signals"`
			At      string       `json:"at"`
		}
		if code != http.StatusOK || json.Unmarshal(b, &doc) != nil || doc.At == "" {
			t.Fatalf("GET /api/v1/signals: %d %s", code, b)
		}
		out := map[string]signalJSON{}
		var names []string
		for _, s := range doc.Signals {
			out[s.Name] = s
			names = append(names, s.Name)
		}
		if strings.Join(names, " ") != strings.Join(store.SignalNames(), " ") {
			t.Fatalf("signals %v, want the nine in order", names)
		}
		return out
	}
	waitStatus := func(name, status string) signalJSON {
		t.Helper()
		var last signalJSON
		waitFor(t, name+" to be "+status, func() bool {
			last = read()[name]
			return last.Status == status
		})
		return last
	}
	allOK := func(when string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			var bad []string
			for _, s := range read() {
				if s.Status != "ok" {
					bad = append(bad, fmt.Sprintf("%s=%d %s %v", s.Name, s.Value, s.Status, s.Breakdown))
				}
			}
			if len(bad) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("signals not ok %s: %s", when, strings.Join(bad, "; "))
			}
			time.Sleep(10 * time.Millisecond) // waiting for the server, not measuring time
		}
	}
	now := func() string { return h.clk.Now().UTC().Format(time.RFC3339) }
	order := func(id, entity string, rev int, intent string) string {
		in := ""
		if intent != "" {
			in = fmt.Sprintf(`,"intent":%q`, intent)
		}
		return fmt.Sprintf(`{"eventId":%q,"type":"order.updated","occurredAt":%q,"order_id":%q,"revision":%d%s}`,
			id, now(), entity, rev, in)
	}
	send := func(source, body string, hdr http.Header) {
		t.Helper()
		if code, resp := shopPost(t, h, source, body, hdr); code != http.StatusOK {
			t.Fatalf("post to %s: %d %s", source, code, resp)
		}
	}
	effectOf := func(flow, entity, name string) *store.Effect {
		t.Helper()
		var found *store.Effect
		waitFor(t, "effect "+name+" of "+entity, func() bool {
			es, err := st.EffectList(ctx, &store.EffectListParams{Flow: flow, Entity: entity})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				if e.Effect == name {
					found = e
					return true
				}
			}
			return false
		})
		return found
	}
	stateOf := func(id int64, want store.EffectState) {
		t.Helper()
		waitFor(t, fmt.Sprintf("effect %d to be %s", id, want), func() bool {
			e, err := st.EffectGet(ctx, id)
			return err == nil && e != nil && e.State == want
		})
	}
	api := func(path string, body any) {
		t.Helper()
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, h.base+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+adminToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			var msg bytes.Buffer
			_, _ = msg.ReadFrom(resp.Body)
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, msg.String())
		}
	}

	allOK("at start")

	// A dead-lettered newest revision: the entity is stuck at r1.
	send("shop", order("o1-r1", "ord-1", 1, "NEW"), nil)
	send("shop", order("o1-r2", "ord-1", 2, ""), nil)
	if d := settled(t, h, "shop", "o1-r2"); d != "dead_lettered" {
		t.Fatalf("r2 without an intent = %s, want dead_lettered", d)
	}
	lag := waitStatus(store.SignalRevisionLag, "alert")
	if lag.Value != 1 || lag.Breakdown["largest_gap"]["orders/ord-1"] != 1 {
		t.Fatalf("revision_lag = %+v, want ord-1 one event behind", lag)
	}
	if d := waitStatus(store.SignalDeadLetters, "alert"); d.Breakdown["kind"]["events"] != 1 {
		t.Fatalf("dead_letters = %+v, want the dead-lettered event", d)
	}

	// Two states for one revision: a version conflict.
	send("shop", order("o5-r1", "ord-5", 1, "NEW"), nil)
	send("shop", order("o5-r1-again", "ord-5", 1, "OTHER"), nil)
	if d := settled(t, h, "shop", "o5-r1-again"); d != "dead_lettered" {
		t.Fatalf("a second state for r1 = %s, want dead_lettered", d)
	}
	if k := waitStatus(store.SignalKeyConflicts, "alert"); k.Breakdown["kind"]["version"] != 1 {
		t.Fatalf("key_conflicts = %+v, want one version conflict", k)
	}

	// A -> B -> A under one causation: the second visit to A is blocked.
	cause := func(hop int) http.Header {
		return http.Header{"X-Hookledger-Causation": {"cause-7"}, "X-Hookledger-Hop": {fmt.Sprint(hop)}}
	}
	send("sys_a", `{"eventId":"a-1","type":"contact.updated","id":"c-1","rev":1}`, cause(0))
	if d := settled(t, h, "sys_a", "a-1"); d != "applied" {
		t.Fatalf("first visit to A = %s", d)
	}
	send("sys_b", `{"eventId":"b-1","type":"contact.updated","id":"c-1","rev":1}`, cause(1))
	if d := settled(t, h, "sys_b", "b-1"); d != "applied" {
		t.Fatalf("visit to B = %s", d)
	}
	send("sys_a", `{"eventId":"a-2","type":"contact.updated","id":"c-1","rev":2}`, cause(2))
	if d := settled(t, h, "sys_a", "a-2"); d != "duplicate" {
		t.Fatalf("second visit to A = %s, want blocked", d)
	}
	if l := waitStatus(store.SignalLoopBlocks, "alert"); l.Value != 1 {
		t.Fatalf("loop_blocks = %+v, want one block", l)
	}

	// A hang after the CRM read the call, with no lookup and no
	// idempotency: nobody knows whether the contact was created.
	world.set(func(w *signalsWorld) { w.crmHangs = true })
	send("shop", order("o2-r1", "ord-2", 1, "CREATED"), nil)
	if u := waitStatus(store.SignalUnknownOutcomes, "alert"); u.Breakdown["destination"]["crm"] != 1 {
		t.Fatalf("unknown_outcomes = %+v, want the CRM call", u)
	}
	crm := effectOf("orders", "ord-2", "crm_sync")

	// Repairs: a newer revision of ord-1 gets applied; the operator closes
	// the two dead-lettered events no replay can fix and resolves the CRM
	// call after checking the CRM.
	send("shop", order("o1-r3", "ord-1", 3, "NEW"), nil)
	if d := settled(t, h, "shop", "o1-r3"); d != "applied" {
		t.Fatalf("r3 = %s, want applied", d)
	}
	waitStatus(store.SignalRevisionLag, "ok")
	api("/api/v1/events/resolve", map[string]string{"source": "shop", "event_id": "o1-r2", "note": "the sender lost the intent; r3 supersedes it"})
	api("/api/v1/events/resolve", map[string]string{"source": "shop", "event_id": "o5-r1-again", "note": "the sender's retry carried a test state"})
	api(fmt.Sprintf("/api/v1/effects/%d/resolve", crm.ID), map[string]string{"note": "the contact exists in the CRM"})
	waitStatus(store.SignalDeadLetters, "ok")
	waitStatus(store.SignalUnknownOutcomes, "ok")

	// A confirmation the mailer loses after answering 201: verification
	// finds it once verify.after has passed on the server's clock.
	send("shop", order("o3-r1", "ord-3", 1, "CONFIRMED"), nil)
	confirm := effectOf("orders", "ord-3", "confirm")
	stateOf(confirm.ID, store.EffectDone)
	world.set(func(w *signalsWorld) { w.held = map[string]bool{} })
	h.clk.Advance(11 * time.Minute)
	if m := waitStatus(store.SignalReconciliationMismatches, "alert"); m.Breakdown["destination"]["mailer"] != 1 {
		t.Fatalf("reconciliation_mismatches = %+v", m)
	}
	// Repair: send it again.
	api(fmt.Sprintf("/api/v1/effects/%d/retry", confirm.ID), map[string]string{"note": "the mailer lost it"})
	stateOf(confirm.ID, store.EffectDone)
	waitStatus(store.SignalReconciliationMismatches, "ok")

	// The order is cancelled after its confirmation went out: the
	// confirmation is compensated, but the void endpoint is down.
	world.set(func(w *signalsWorld) { w.voidDown = true })
	send("shop", order("o3-r2", "ord-3", 2, "CANCELLED"), nil)
	if c := waitStatus(store.SignalCompensationOutstanding, "alert"); c.Value != 1 {
		t.Fatalf("compensation_outstanding = %+v", c)
	}
	comp := effectOf("orders", "ord-3", "confirm:compensate")
	if comp.Compensates != confirm.ID || comp.EpisodeKey != confirm.EpisodeKey+":compensate" {
		t.Fatalf("compensation %+v does not name confirmation %d", comp, confirm.ID)
	}

	// A reminder held back by a system answering 503 misses its deadline.
	world.set(func(w *signalsWorld) { w.slowDown = true })
	send("shop", order("o4-r1", "ord-4", 1, "PENDING"), nil)
	remind := effectOf("orders", "ord-4", "remind")
	// No call may be in flight when the clock jumps: its lease would run
	// out under it and leave its outcome unknown. So each jump waits for
	// the compensation and the reminder to have failed and to wait for a
	// retry that is not due yet.
	waitingRetry := func(what string) {
		t.Helper()
		waitFor(t, what, func() bool {
			for _, id := range []int64{comp.ID, remind.ID} {
				e, err := st.EffectGet(ctx, id)
				if err != nil || e == nil || e.State != store.EffectRetryWait || !e.NextAttemptAt.After(h.clk.Now()) {
					return false
				}
			}
			return true
		})
	}
	waitingRetry("the reminder and the compensation to be retried")
	h.clk.Advance(31 * time.Minute)
	if d := waitStatus(store.SignalDeadlineRisk, "alert"); d.Breakdown["state"]["passed"] != 1 {
		t.Fatalf("deadline_risk = %+v, want one passed deadline", d)
	}
	waitFor(t, "the missed deadline to be escalated once", func() bool {
		rows, err := st.AuditList(ctx, &store.AuditListParams{Action: "deadline_missed"})
		return err == nil && len(rows) == 1
	})

	// Repairs: the void endpoint and the slow system are back; their
	// retries come due, and the occurrences of the window (the loop block,
	// the version conflict) fall out of it.
	waitingRetry("the retries the deadline's jump made due to fail")
	world.set(func(w *signalsWorld) { w.voidDown, w.slowDown = false, false })
	h.clk.Advance(2 * time.Hour)
	stateOf(comp.ID, store.EffectDone)
	stateOf(remind.ID, store.EffectDone)
	allOK("after the repairs")

	// The store's own audit finds nothing wrong with all of it.
	res, err := st.InvariantCheck(ctx, &store.InvariantCheckParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Findings) != 0 {
		t.Fatalf("hookledger check found %+v", res.Findings)
	}
	world.mu.Lock()
	defer world.mu.Unlock()
	if world.voidCalls < 2 {
		t.Fatalf("the void endpoint was called %d times, want the refused call and the successful one", world.voidCalls)
	}
}
