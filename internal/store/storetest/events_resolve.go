package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// Closing a dead-lettered event by hand: what it changes, what it
// refuses, and what a later replay of the event does.

func (f *sig) resolveEvent(eventID, note string, at time.Time) (*store.Event, error) {
	return f.s.EventResolve(f.ctx, &store.EventResolveParams{Source: "crm", EventID: eventID, Actor: "operator:ann", Note: note, Now: at})
}

// routesOf maps an event's routes to flow -> disposition.
func routesOf(e *store.Event) map[string]store.Disposition {
	out := map[string]store.Disposition{}
	for _, r := range e.Routes {
		out[r.Flow] = r.Disposition
	}
	return out
}

func (f *sig) eventByID(eventID string) *store.Event {
	f.t.Helper()
	evs := events(f.t, f.s, &store.EventListParams{Source: "crm", EventID: eventID, WithRoutes: true})
	if len(evs) != 1 {
		f.t.Fatalf("event crm/%s: %d found", eventID, len(evs))
	}
	return evs[0]
}

func testEventResolve(t *testing.T, o Opener) {
	f := newSig(t, o)
	// evt_ok applies on orders/o1; evt_bad is the entity's newest event
	// and fails there (a version conflict no replay fixes), applies on
	// billing/b1, and could not be routed on ship at all.
	ok := f.event("evt_ok")
	f.route(t0, to(ok, rt("orders", "o1", "0001")))
	f.step("orders", "o1", t0, rev(1, `{"n":1}`))
	t1 := t0.Add(time.Minute)
	bad := f.event("evt_bad")
	f.route(t1, to(bad, rt("orders", "o1", "0002"), rt("billing", "b1", "0001"),
		store.Route{Flow: "ship", OrderKey: "0001", Failed: "entity: no field shipment_id"}))
	f.step("orders", "o1", t1, store.FlowApplyParams{Fail: "version_conflict: r2 seen with two states"})
	f.step("billing", "b1", t1, rev(1, `{"b":1}`))
	if d := f.disposition(bad); d != store.DispositionDeadLettered {
		t.Fatalf("evt_bad is %s, want dead_lettered", d)
	}
	f.event("evt_new") // stored, not routed yet: accepted

	snap := f.snap(t1)
	if m := snap[store.SignalRevisionLag]; m.Value != 2 {
		t.Fatalf("revision_lag before = %d %v, want 2 (orders/o1 and ship's failed route)", m.Value, m.Breakdown)
	}
	if m := snap[store.SignalDeadLetters]; m.Value != 1 || m.Breakdown["kind"]["events"] != 1 {
		t.Fatalf("dead_letters before = %d %v, want one event", m.Value, m.Breakdown)
	}

	// Refusals change nothing.
	t2 := t1.Add(time.Minute)
	for _, c := range []struct {
		what, eventID, note string
		want                error
	}{
		{"an applied event", "evt_ok", "checked", store.ErrInvalidTransition},
		{"an accepted event", "evt_new", "checked", store.ErrInvalidTransition},
		{"no note", "evt_bad", "  ", store.ErrInvalidArgument},
		// Text no driver stores as given is refused alike on every driver.
		{"a note with NUL", "evt_bad", "fixed\x00by hand", store.ErrInvalidArgument},
		{"a note that is not UTF-8", "evt_bad", "fixed \xff", store.ErrInvalidArgument},
		{"a missing event", "evt_nope", "checked", store.ErrNotFound},
	} {
		e, err := f.resolveEvent(c.eventID, c.note, t2)
		if !errors.Is(err, c.want) || e != nil {
			t.Errorf("resolve %s: %v %v, want %v", c.what, e, err, c.want)
		}
	}
	if _, err := f.s.EventResolve(f.ctx, &store.EventResolveParams{EventID: "evt_bad", Note: "x", Now: t2}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("resolve without a source: %v, want ErrInvalidArgument", err)
	}
	var se *store.EventStateError
	if _, err := f.resolveEvent("evt_ok", "checked", t2); !errors.As(err, &se) || se.Disposition != store.DispositionApplied || se.Pending != 0 {
		t.Errorf("refusal of an applied event names %+v (%v), want applied", se, err)
	}
	if d := f.disposition(ok); d != store.DispositionApplied {
		t.Errorf("refused resolve moved evt_ok to %s", d)
	}
	if d := f.disposition(bad); d != store.DispositionDeadLettered {
		t.Errorf("refused resolve moved evt_bad to %s", d)
	}
	if rows := f.audit(store.ActionEventResolved); len(rows) != 0 {
		t.Fatalf("refusals wrote audit rows: %+v", rows)
	}

	// The resolve.
	e, err := f.resolveEvent("evt_bad", "r2 conflict confirmed with the CRM team; r3 will follow", t2)
	if err != nil {
		t.Fatalf("EventResolve: %v", err)
	}
	if e.Disposition != store.DispositionResolved || e.EventID != "evt_bad" || e.Source != "crm" || e.PK != bad || e.Deliveries != 1 {
		t.Fatalf("resolved event = %+v", e)
	}
	want := map[string]store.Disposition{"orders": store.DispositionResolved, "billing": store.DispositionApplied, "ship": store.DispositionResolved}
	if got := routesOf(e); len(got) != 3 || got["orders"] != want["orders"] || got["billing"] != want["billing"] || got["ship"] != want["ship"] {
		t.Fatalf("routes = %v, want %v (only the dead letters are resolved)", got, want)
	}
	if listed := f.eventByID("evt_bad"); listed.Disposition != store.DispositionResolved || len(listed.Routes) != 3 {
		t.Fatalf("listed after resolve = %+v", listed)
	}
	if got := events(t, f.s, &store.EventListParams{Disposition: store.DispositionResolved}); len(got) != 1 || got[0].PK != bad {
		t.Fatalf("resolved filter = %v", eventIDs(got))
	}
	rows := f.audit(store.ActionEventResolved)
	if len(rows) != 1 || rows[0].Actor != "operator:ann" || rows[0].Source != "crm" || rows[0].EventID != "evt_bad" ||
		!rows[0].At.Equal(t2) || !strings.Contains(rows[0].Detail, "r2 conflict confirmed with the CRM team") ||
		!strings.Contains(rows[0].Detail, "flow orders entity o1") || !strings.Contains(rows[0].Detail, "flow ship") ||
		strings.Contains(rows[0].Detail, "billing") {
		t.Fatalf("audit = %+v", rows)
	}
	snap = f.snap(t2)
	want0 := func(name string) {
		if m := snap[name]; m.Value != 0 {
			t.Errorf("%s after resolve = %d %v, want 0", name, m.Value, m.Breakdown)
		}
	}
	want0(store.SignalRevisionLag)
	want0(store.SignalDeadLetters)
	// A resolved event is terminal: a second resolve is refused.
	if _, err := f.resolveEvent("evt_bad", "again", t2); !errors.Is(err, store.ErrInvalidTransition) {
		t.Errorf("second resolve: %v, want ErrInvalidTransition", err)
	}
	if r, err := f.s.InvariantCheck(f.ctx, &store.InvariantCheckParams{}); err != nil || len(r.Findings) != 0 {
		t.Errorf("invariant check after resolve: %v %s", err, findings(r))
	}

	// A later replay runs and settles on its own, but the event stays
	// resolved: the aggregate rule moves accepted and dead_lettered only.
	t3 := t2.Add(time.Minute)
	if _, err := f.s.ReplayCreate(f.ctx, &store.ReplayCreateParams{Now: t3, Actor: "operator:ann", Selection: "evt_bad",
		Decisions: []*store.RouteDecision{to(bad, rt("orders", "o1", "0002"))}}); err != nil {
		t.Fatalf("ReplayCreate: %v", err)
	}
	if r := f.step("orders", "o1", t3, rev(2, `{"n":2}`)); r.Disposition != store.DispositionApplied {
		t.Fatalf("replay of the resolved event: %+v", r)
	}
	after := f.eventByID("evt_bad")
	if after.Disposition != store.DispositionResolved || routesOf(after)["orders"] != store.DispositionApplied {
		t.Fatalf("after a replay: %s %v, want resolved with the replay's route applied", after.Disposition, routesOf(after))
	}
	if m := f.snap(t3)[store.SignalRevisionLag]; m.Value != 0 {
		t.Errorf("revision_lag after the replay = %d, want 0", m.Value)
	}
}

// An event whose replay is still pending cannot be closed by hand: the
// replay may yet repair it. Once it settles dead-lettered again, it can.
func testEventResolvePendingReplay(t *testing.T, o Opener) {
	f := newSig(t, o)
	pk := f.event("evt_retry")
	f.route(t0, to(pk, rt("orders", "o7", "0001")))
	f.step("orders", "o7", t0, store.FlowApplyParams{Fail: "payload: amount is not a number"})
	t1 := t0.Add(time.Minute)
	if _, err := f.s.ReplayCreate(f.ctx, &store.ReplayCreateParams{Now: t1, Actor: "operator:ann", Selection: "evt_retry",
		Decisions: []*store.RouteDecision{to(pk, rt("orders", "o7", "0001"))}}); err != nil {
		t.Fatalf("ReplayCreate: %v", err)
	}
	var se *store.EventStateError
	if _, err := f.resolveEvent("evt_retry", "sender will not fix it", t1); !errors.Is(err, store.ErrInvalidTransition) ||
		!errors.As(err, &se) || se.Disposition != store.DispositionDeadLettered || se.Pending != 1 {
		t.Fatalf("resolve with a replay pending: %v, want ErrInvalidTransition naming 1 pending item", err)
	}
	if n := f.workCount(); n != 1 {
		t.Fatalf("WorkCount = %d after a refused resolve, want the replay's 1", n)
	}
	f.step("orders", "o7", t1, store.FlowApplyParams{Fail: "payload: amount is not a number"})
	if m := f.snap(t1)[store.SignalRevisionLag]; m.Value != 1 {
		t.Fatalf("revision_lag before = %d, want 1", m.Value)
	}
	e, err := f.resolveEvent("evt_retry", "sender will not fix it", t1)
	if err != nil || e.Disposition != store.DispositionResolved || routesOf(e)["orders"] != store.DispositionResolved {
		t.Fatalf("resolve after the replay settled: %+v %v", e, err)
	}
	if m := f.snap(t1)[store.SignalRevisionLag]; m.Value != 0 {
		t.Errorf("revision_lag after = %d, want 0", m.Value)
	}
	if m := f.snap(t1)[store.SignalDeadLetters]; m.Value != 0 {
		t.Errorf("dead_letters after = %d, want 0", m.Value)
	}
}
