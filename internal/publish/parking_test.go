package publish

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/store"
)

// A 410 disables the endpoint at once and parks the message that got it;
// every later one parks without being sent; the owner is told; enabling
// the endpoint re-drives the parked messages in publication order, once
// each, and leaves other endpoints' parked messages alone.
func TestGoneParksUntilEnabled(t *testing.T) { eachStore(t, testGoneParksUntilEnabled) }

func testGoneParksUntilEnabled(t *testing.T, storeURL string) {
	// One delivery at a time: the order is what this checks.
	e := newEnv(t, storeURL, "publish:\n  max_in_flight: 1\n")
	rcv, other := newReceiver(t), newReceiver(t)
	rcv.setStatus(http.StatusGone)
	owner := "integrations"
	id, url, yes := "partner", rcv.srv.URL, true
	if _, err := e.s.Create(e.ctx, &EndpointInput{ID: &id, URL: &url, Owner: &owner, AllowPrivateNetworks: &yes}, "test"); err != nil {
		t.Fatal(err)
	}
	e.create("other", other.srv.URL)
	if _, err := e.s.SetEnabled(e.ctx, "other", false, "by test", "test"); err != nil {
		t.Fatal(err)
	}

	ids := []string{e.publish("k1", "invoice.paid", `{"n":1}`).ID}
	e.drain()
	ep := e.stored("partner")
	if ep.Enabled || ep.DisabledReason != "it answered 410 Gone at 2026-12-01T10:00:00Z" || !ep.DisabledAt.Equal(t0) {
		t.Fatalf("after a 410 partner is enabled=%v reason %q at %v", ep.Enabled, ep.DisabledReason, ep.DisabledAt)
	}
	dead := e.effects("partner", store.EffectDead)
	if len(dead) != 1 || !strings.HasPrefix(dead[0].Reason, "HTTP 410 Gone") || !strings.Contains(dead[0].SuggestedRepair, "enable endpoint partner") {
		t.Fatalf("the message answered 410: %d dead, reason %q, repair %q; want dead with the repair to enable the endpoint", len(dead), dead[0].Reason, dead[0].SuggestedRepair)
	}
	notes := e.notifications()
	if len(notes) != 1 || notes[0].Destination != "endpoint partner" || notes[0].Owner != owner ||
		!strings.Contains(notes[0].Reason, "410 Gone") || !strings.Contains(notes[0].SuggestedRepair, `PATCH /api/v1/endpoints/partner {"enabled": true}`) {
		t.Fatalf("notifications %+v, want one to integrations naming the 410 and the repair", notes)
	}
	if v := e.counter(e.s.m.disabled); v != 1 {
		t.Fatalf("hookledger_endpoints_disabled_total = %v, want 1", v)
	}

	for i := 2; i <= 3; i++ {
		ids = append(ids, e.publish(fmt.Sprint("k", i), "invoice.paid", fmt.Sprintf(`{"n":%d}`, i)).ID)
	}
	e.drain()
	if n := len(rcv.deliveries()); n != 1 {
		t.Fatalf("the disabled endpoint received %d requests, want only the one answered 410", n)
	}
	dead = e.effects("partner", store.EffectDead)
	for _, f := range dead[1:] {
		if !strings.HasPrefix(f.Reason, "parked: endpoint partner is disabled (it answered 410 Gone") || f.Attempts != 0 {
			t.Errorf("later message %s: reason %q after %d attempts, want parked unsent", f.EpisodeKey, f.Reason, f.Attempts)
		}
	}
	backlogs, err := e.s.Backlogs(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b := backlogs["partner"]; len(dead) != 3 || b.Parked != 3 || b.Pending != 0 || backlogs["other"].Parked != 3 {
		t.Fatalf("parked %d; backlogs %+v, want 3 parked for partner and for other", len(dead), backlogs)
	}

	// Enabling re-drives the parked messages, oldest first; a disabled
	// endpoint's notification is not repeated.
	rcv.setStatus(http.StatusNoContent)
	wakes := e.wakeCount()
	if _, err := e.s.SetEnabled(e.ctx, "partner", true, "by test", "operator:alice"); err != nil {
		t.Fatal(err)
	}
	if e.wakeCount() != wakes+1 {
		t.Fatal("enabling with parked messages did not wake the worker")
	}
	e.drain()
	if got := rcv.ids()[1:]; !slices.Equal(got, ids) {
		t.Fatalf("after enabling partner received %v, want %v in publication order", got, ids)
	}
	if done := e.effects("partner", store.EffectDone); len(done) != 3 {
		t.Fatalf("%d of partner's messages done, want 3", len(done))
	}
	backlogs, _ = e.s.Backlogs(e.ctx)
	if backlogs["partner"].Parked != 0 || backlogs["other"].Parked != 3 || len(other.deliveries()) != 0 {
		t.Fatalf("backlogs %+v after enabling partner: want partner's cleared, other's kept", backlogs)
	}
	audits, err := e.st.AuditList(e.ctx, &store.AuditListParams{Action: "effect_retry", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(audits) != 3 || audits[0].Actor != "operator:alice" || !strings.Contains(audits[0].Detail, "endpoint partner enabled") {
		t.Fatalf("audit rows of the re-drive %+v, want three retries by operator:alice", audits)
	}
	if len(e.notifications()) != 1 {
		t.Fatalf("notifications %+v, want only the first", e.notifications())
	}
}

// An endpoint whose every delivery has failed for publish.disable_after
// is disabled and its owner told; one success ends a run of failures; the
// messages waiting for a retry park at once instead of at their retry.
func TestFailingEndpointDisabled(t *testing.T) { eachStore(t, testFailingEndpointDisabled) }

func testFailingEndpointDisabled(t *testing.T, storeURL string) {
	e := newEnv(t, storeURL, "publish:\n  disable_after: 1h\n  schedule: [1m]\n  max_in_flight: 2\n")
	rcv := newReceiver(t)
	rcv.setStatus(http.StatusInternalServerError)
	e.create("partner", rcv.srv.URL)
	waiting := func() int { return len(e.effects("partner", store.EffectRetryWait)) }

	e.publish("early", "a.b", `{"n":0}`)
	e.drain()
	if ep := e.stored("partner"); !ep.FailingSince.Equal(t0) || waiting() != 1 {
		t.Fatalf("after a failure failing_since %v, %d waiting; want %v, 1", ep.FailingSince, waiting(), t0)
	}
	// A success ends the run.
	rcv.setStatus(http.StatusOK)
	e.clk.Advance(50 * time.Minute)
	e.drain()
	if ep := e.stored("partner"); !ep.FailingSince.IsZero() || !ep.Enabled {
		t.Fatalf("after a success failing_since %v enabled %v, want cleared and enabled", ep.FailingSince, ep.Enabled)
	}

	// 500, not 503: a 503 says the endpoint is overloaded and would keep
	// one delivery in flight at a time, where this needs two.
	rcv.setStatus(http.StatusInternalServerError)
	started := e.clk.Now()
	e.publish("fail-1", "a.b", `{"n":1}`)
	e.publish("fail-2", "a.b", `{"n":2}`)
	e.drain()
	for e.clk.Now().Sub(started) < time.Hour {
		if ep := e.stored("partner"); !ep.Enabled || !ep.FailingSince.Equal(started) || waiting() != 2 {
			t.Fatalf("after %s of failures: enabled %v since %v, %d waiting; want enabled since %v, 2 waiting",
				e.clk.Now().Sub(started), ep.Enabled, ep.FailingSince, waiting(), started)
		}
		e.clk.Advance(10 * time.Minute)
		e.drain()
	}
	ep := e.stored("partner")
	if ep.Enabled || !strings.Contains(ep.DisabledReason, "every delivery has failed since "+started.Format(time.RFC3339)) ||
		!strings.Contains(ep.DisabledReason, "publish.disable_after 1h0m0s") {
		t.Fatalf("after an hour of failures enabled %v, reason %q", ep.Enabled, ep.DisabledReason)
	}
	// Both calls were in flight when the endpoint was disabled: they
	// wait for their retry, and park then without another request.
	sent := len(rcv.deliveries())
	if waiting() != 2 {
		t.Fatalf("%d waiting right after the disable, want the 2 in flight then", waiting())
	}
	e.clk.Advance(time.Minute)
	e.drain()
	dead := e.effects("partner", store.EffectDead)
	if len(dead) != 2 || waiting() != 0 || len(rcv.deliveries()) != sent {
		t.Fatalf("after the disable: %d parked, %d waiting, %d more requests; want 2, 0, 0", len(dead), waiting(), len(rcv.deliveries())-sent)
	}
	notes := e.notifications()
	if len(notes) != 1 || !strings.Contains(notes[0].Reason, "disabled: every delivery has failed") {
		t.Fatalf("notifications %+v, want one naming the run of failures", notes)
	}
	if v := e.counter(e.s.m.disabled); v != 1 {
		t.Fatalf("hookledger_endpoints_disabled_total = %v, want 1", v)
	}
	// Enabling clears the run, so one failure does not disable it again.
	if ep, err := e.s.SetEnabled(e.ctx, "partner", true, "by test", "test"); err != nil || !ep.FailingSince.IsZero() || ep.DisabledReason != "" {
		t.Fatalf("enable: %+v, %v; want failing_since and the reason cleared", ep, err)
	}
	e.drain()
	if ep := e.stored("partner"); !ep.Enabled || !ep.FailingSince.Equal(e.clk.Now()) {
		t.Fatalf("a failure after enabling: enabled %v since %v, want enabled, failing since now", ep.Enabled, ep.FailingSince)
	}
}

// Disabling an endpoint by hand brings its messages waiting for a retry
// forward, so they park now, unsent; retrying a parked message while the
// endpoint is still disabled parks it again.
func TestDisableParksWaitingMessages(t *testing.T) { eachStore(t, testDisableParksWaitingMessages) }

func testDisableParksWaitingMessages(t *testing.T, storeURL string) {
	e := newEnv(t, storeURL, "{}")
	rcv := newReceiver(t)
	rcv.setStatus(http.StatusTooManyRequests)
	e.create("partner", rcv.srv.URL)
	e.publish("k", "a.b", `{}`)
	e.drain()
	if w := e.effects("partner", store.EffectRetryWait); len(w) != 1 || !w[0].NextAttemptAt.After(t0) {
		t.Fatalf("after a 429: %+v, want one waiting for a later retry", w)
	}
	backlogs, _ := e.s.Backlogs(e.ctx)
	if b := backlogs["partner"]; b.Pending != 1 || b.Parked != 0 {
		t.Fatalf("backlog %+v, want 1 pending", b)
	}
	wakes := e.wakeCount()
	if _, err := e.s.SetEnabled(e.ctx, "partner", false, "maintenance", "operator:bob"); err != nil {
		t.Fatal(err)
	}
	if e.wakeCount() != wakes+1 {
		t.Fatal("disabling with a waiting message did not wake the worker")
	}
	e.drain() // the clock has not moved: only the disable made it due
	dead := e.effects("partner", store.EffectDead)
	if len(dead) != 1 || dead[0].Reason != "parked: endpoint partner is disabled (maintenance)" || len(rcv.deliveries()) != 1 {
		t.Fatalf("after the disable %+v and %d requests, want it parked unsent", dead, len(rcv.deliveries()))
	}
	// No audit of a second disable, no notification: a person did it.
	if len(e.notifications()) != 0 || e.counter(e.s.m.disabled) != 0 {
		t.Fatalf("notifications %v, disabled metric %v: an operator's disable is not the delivery's", e.notifications(), e.counter(e.s.m.disabled))
	}

	if _, err := e.st.EffectOperate(e.ctx, &store.EffectOperateParams{EffectID: dead[0].ID, Action: store.OperateRetry,
		Actor: "operator:bob", Now: e.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	e.drain()
	if dead := e.effects("partner", store.EffectDead); len(dead) != 1 || !strings.HasPrefix(dead[0].Reason, "parked:") || len(rcv.deliveries()) != 1 {
		t.Fatalf("a retry while disabled: %+v, %d requests; want parked again, unsent", dead, len(rcv.deliveries()))
	}
}

// A delivery the worker had taken up when its endpoint was disabled is not
// sent: it waits for its retry and parks then.
func TestDeliveryTakenUpBeforeADisableParks(t *testing.T) {
	e := newEnv(t, sqliteURLOf(t), "{}")
	rcv := newReceiver(t)
	e.create("partner", rcv.srv.URL)
	// The worker goes on seeing the destinations as they were before the
	// disable, as one that took them in just before it does.
	src := &frozenSource{}
	src.v, src.ds = e.s.RuntimeDestinations()
	w, err := deliver.New(e.cfg, e.st, deliver.Options{Clock: e.clk, Actions: e.s.Actions(), Runtime: src, Rand: func() float64 { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.SetEnabled(e.ctx, "partner", false, "by test", "test"); err != nil {
		t.Fatal(err)
	}
	e.publish("k", "a.b", `{}`)
	if err := w.Drain(e.ctx); err != nil {
		t.Fatal(err)
	}
	waiting := e.effects("partner", store.EffectRetryWait)
	if len(waiting) != 1 || !strings.Contains(waiting[0].Reason, "endpoint partner was disabled before this delivery began") {
		t.Fatalf("the delivery taken up before the disable: %+v, want it waiting for a retry, naming the disable", waiting)
	}
	// Its retry finds the destination disabled, and parks it.
	e.clk.Advance(5 * time.Second)
	e.drain()
	if dead := e.effects("partner", store.EffectDead); len(dead) != 1 || !strings.HasPrefix(dead[0].Reason, "parked:") {
		t.Fatalf("at its retry: %+v, want parked", dead)
	}
	if n := len(rcv.deliveries()); n != 0 {
		t.Fatalf("the disabled endpoint received %d requests, want none", n)
	}
}

// frozenSource offers the worker one snapshot of the destinations.
type frozenSource struct {
	v  uint64
	ds []*config.Destination
}

func (f *frozenSource) RuntimeDestinations() (uint64, []*config.Destination) { return f.v, f.ds }

// Deleting an endpoint is refused while it is enabled or has messages to
// deliver, parked ones included, and for an endpoint of the config file;
// once its messages are resolved it goes, and its id can be used again.
func TestDeleteRules(t *testing.T) { eachStore(t, testDeleteRules) }

func testDeleteRules(t *testing.T, storeURL string) {
	e := newEnv(t, storeURL, `endpoints:
  - id: from-file
    url: https://file.example/hooks
    types: ["file.*"]
`)
	rcv := newReceiver(t)
	e.create("partner", rcv.srv.URL)
	if err := e.s.Delete(e.ctx, "partner", "test"); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "is enabled: disable it first") {
		t.Fatalf("delete an enabled endpoint: %v", err)
	}
	if _, err := e.s.SetEnabled(e.ctx, "partner", false, "by test", "test"); err != nil {
		t.Fatal(err)
	}
	e.publish("k", "a.b", `{}`)
	if err := e.s.Delete(e.ctx, "partner", "test"); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "is approved") {
		t.Fatalf("delete with a message not yet delivered: %v", err)
	}
	e.drain()
	dead := e.effects("partner", store.EffectDead)
	if err := e.s.Delete(e.ctx, "partner", "test"); !errors.Is(err, ErrConflict) ||
		!strings.Contains(err.Error(), fmt.Sprintf("effect %d is dead", dead[0].ID)) {
		t.Fatalf("delete with a parked message: %v", err)
	}
	if _, err := e.st.EffectOperate(e.ctx, &store.EffectOperateParams{EffectID: dead[0].ID, Action: store.OperateResolve,
		Actor: "test", Note: "sent by hand", Now: e.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Delete(e.ctx, "partner", "test"); err != nil {
		t.Fatalf("delete once resolved: %v", err)
	}
	if ep, err := e.s.Get(e.ctx, "partner"); ep != nil || err != nil {
		t.Fatalf("Get after delete: %v, %v; want nothing", ep, err)
	}
	if _, ds := e.s.RuntimeDestinations(); len(ds) != 1 || ds[0].Name != "endpoint:from-file" {
		t.Fatalf("destinations after the delete %+v, want from-file only", ds)
	}
	if err := e.s.Delete(e.ctx, "partner", "test"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	if err := e.s.Delete(e.ctx, "from-file", "test"); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "config file") {
		t.Fatalf("delete an endpoint of the file: %v", err)
	}
	// The id can be used again, by a new endpoint with its own key.
	again := e.create("partner", rcv.srv.URL)
	if !again.Enabled || again.Deleted {
		t.Fatalf("re-created %+v", again)
	}
	list, err := e.s.List(e.ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("list %v, %v; want from-file and partner", list, err)
	}
}
