package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// An effect that settles into the exception queue without an owner takes
// its destination's configured owner; one a person assigned keeps theirs,
// and one that settles elsewhere takes none. The dead_letters signal then
// names the owners, not "unassigned".
func testSettleOwner(t *testing.T, o Opener) {
	f := newSig(t, o)
	es := f.seed("crm", "crm", "crm", "crm")
	t1 := t0.Add(time.Minute)
	withOwner := func(p *store.EffectSettleParams) { p.Owner = "team-crm" }
	f.settle(f.claimOne(es[0].ID, t1), t1, store.EffectDead, time.Time{}, withOwner)
	if _, err := f.operate(es[1].ID, store.OperateAssign, "", t1); err != nil { // owner bob
		t.Fatalf("assign: %v", err)
	}
	f.settle(f.claimOne(es[1].ID, t1), t1, store.EffectDead, time.Time{}, withOwner)
	f.settle(f.claimOne(es[2].ID, t1), t1, store.EffectRetryWait, t1.Add(time.Hour), withOwner)
	f.settle(f.claimOne(es[3].ID, t1), t1, store.EffectNeedsReconciliation, time.Time{}, withOwner,
		func(p *store.EffectSettleParams) { p.Class = store.ClassUnknown })
	for _, c := range []struct {
		i     int
		owner string
		why   string
	}{
		{0, "team-crm", "dead without an owner takes the configured one"},
		{1, "bob", "an assigned owner is kept"},
		{2, "", "retry_wait is not in the exception queue"},
		{3, "team-crm", "needs_reconciliation takes the configured one"},
	} {
		if got := f.get(es[c.i].ID).Owner; got != c.owner {
			t.Errorf("effect %d owner = %q, want %q: %s", c.i, got, c.owner, c.why)
		}
	}
	want(t, "owners", f.snap(t1)[store.SignalDeadLetters], 2, t1,
		bd{"owner": {"team-crm": 1, "bob": 1}, "kind": {"effects": 2}})
	// Listing by owner finds the configured one, as the console's filter
	// does.
	if got := f.effects(&store.EffectListParams{Owner: "team-crm", States: store.ExceptionStates()}); len(got) != 2 {
		t.Fatalf("effects owned by team-crm = %d, want 2", len(got))
	}
}

// The exception queue lists the dead and needs_reconciliation effects in
// id order, then the dead-lettered events in pk order, each with its
// reason, suggested repair, owner (assigned, else configured) and the
// time it began to wait; a cursor pages across the two kinds.
func testExceptionList(t *testing.T, o Opener) {
	f := newSig(t, o)
	es := f.seed("crm", "mail", "crm")
	t1 := t0.Add(time.Minute)
	f.into(es[0].ID, t1, store.EffectDead, time.Time{})
	f.settle(f.claimOne(es[1].ID, t1), t1, store.EffectNeedsReconciliation, time.Time{},
		func(p *store.EffectSettleParams) { p.Class, p.Reason = store.ClassUnknown, "timeout" })
	f.into(es[2].ID, t1, store.EffectDone, time.Time{}) // not an exception
	received := t0.Add(-time.Hour)
	dl := f.event("dl_evt", func(d *store.DeliveryInput) { d.ReceivedAt = received })
	f.route(t1, to(dl, rt("orders", "o9", "1"), store.Route{Flow: "billing", Failed: "entity: the expression gave an empty id"}))
	f.step("orders", "o9", t1, store.FlowApplyParams{Fail: "refetch: 410 gone"})
	ok := f.event("ok_evt")
	f.route(t1, to(ok, rt("orders", "o10", "1")))
	f.step("orders", "o10", t1, rev(1, `{}`))

	owners := store.Owners{Destinations: map[string]string{"crm": "team-crm"},
		Flows: map[string]string{"billing": "team-billing", "orders": "team-orders"}}
	list := func(p store.ExceptionListParams) *store.ExceptionListResult {
		t.Helper()
		p.Owners = owners
		res, err := store.ExceptionList(f.ctx, f.s, &p)
		if err != nil {
			t.Fatalf("ExceptionList %+v: %v", p, err)
		}
		return res
	}
	all := list(store.ExceptionListParams{})
	if len(all.Exceptions) != 3 || all.NextKind != "" {
		t.Fatalf("exceptions = %d (next %q), want 3 and no next page", len(all.Exceptions), all.NextKind)
	}
	e0, e1, ev := all.Exceptions[0], all.Exceptions[1], all.Exceptions[2]
	if e0.Kind != store.ExceptionEffect || e0.Effect.ID != es[0].ID || e0.Owner != "team-crm" ||
		e0.Reason != "503 from destination" || e0.Repair == "" || !e0.Since.Equal(t1) {
		t.Errorf("dead effect = %+v, want effect %d owned by team-crm (configured) with reason, repair and since %v", e0, es[0].ID, t1)
	}
	if e1.Kind != store.ExceptionEffect || e1.Effect.ID != es[1].ID || e1.Owner != "" || e1.Reason != "timeout" ||
		!strings.Contains(e1.Repair, "outcome of a call is unknown") {
		t.Errorf("needs_reconciliation effect = %+v, want no owner (mail has none) and the unknown-outcome repair", e1)
	}
	if ev.Kind != store.ExceptionEvent || ev.Event.EventID != "dl_evt" || !ev.Since.Equal(received) {
		t.Fatalf("third exception = %+v, want event dl_evt since its receipt", ev)
	}
	if ev.Owner != "team-orders, team-billing" && ev.Owner != "team-billing, team-orders" {
		t.Errorf("event owner = %q, want both flows' owners", ev.Owner)
	}
	for _, s := range []string{"flow orders: refetch: 410 gone", "flow billing: entity: the expression gave an empty id"} {
		if !strings.Contains(ev.Reason, s) {
			t.Errorf("event reason = %q, want it to hold %q", ev.Reason, s)
		}
	}
	for _, s := range []string{store.DeadLetterRepair("refetch:"), store.DeadLetterRepair("entity:")} {
		if !strings.Contains(ev.Repair, s) {
			t.Errorf("event repair = %q, want it to hold %q", ev.Repair, s)
		}
	}

	// Pages of two: the cursor crosses from the effects to the events.
	p1 := list(store.ExceptionListParams{Limit: 2})
	if len(p1.Exceptions) != 2 || p1.NextKind == "" {
		t.Fatalf("first page = %d (next %q), want 2 and a next page", len(p1.Exceptions), p1.NextKind)
	}
	p2 := list(store.ExceptionListParams{Limit: 2, AfterKind: p1.NextKind, AfterID: p1.NextID})
	if len(p2.Exceptions) != 1 || p2.Exceptions[0].Kind != store.ExceptionEvent || p2.NextKind != "" {
		t.Fatalf("second page = %+v, want the event alone and no next page", p2)
	}
	p1 = list(store.ExceptionListParams{Limit: 1})
	p2 = list(store.ExceptionListParams{Limit: 1, AfterKind: p1.NextKind, AfterID: p1.NextID})
	if len(p2.Exceptions) != 1 || p2.Exceptions[0].Kind != store.ExceptionEffect || p2.Exceptions[0].Effect.ID != es[1].ID {
		t.Fatalf("page 2 of 1 = %+v, want effect %d", p2.Exceptions, es[1].ID)
	}

	if evs := list(store.ExceptionListParams{Kind: store.ExceptionEvent}); len(evs.Exceptions) != 1 || evs.Exceptions[0].Kind != store.ExceptionEvent {
		t.Errorf("kind event = %+v, want the event alone", evs.Exceptions)
	}
	if efs := list(store.ExceptionListParams{Kind: store.ExceptionEffect}); len(efs.Exceptions) != 2 {
		t.Errorf("kind effect = %d, want 2", len(efs.Exceptions))
	}
	if _, err := store.ExceptionList(f.ctx, f.s, &store.ExceptionListParams{Kind: "effects"}); err == nil {
		t.Error("kind effects (plural) accepted, want ErrInvalidArgument")
	}

	// A resolved event leaves the queue.
	if _, err := f.s.EventResolve(f.ctx, &store.EventResolveParams{Source: "crm", EventID: "dl_evt",
		Actor: "operator:alice", Note: "refunded by hand", Now: t1}); err != nil {
		t.Fatalf("EventResolve: %v", err)
	}
	if evs := list(store.ExceptionListParams{Kind: store.ExceptionEvent}); len(evs.Exceptions) != 0 {
		t.Errorf("after resolve the queue holds %+v, want no event", evs.Exceptions)
	}
}

// Every way into the exception queue stamps the configured owner on an
// effect without one, as a settle does: a deadline's escalation to dead,
// a verification mismatch and a release of an abandoned call to
// needs_reconciliation. An owner a person assigned is kept, and a release
// that does not enter the queue stamps none.
func testExceptionOwnerStamped(t *testing.T, o Opener) {
	f := newOutc(t, o)
	es := f.seed("crm", "crm", "crm", "crm", "crm")
	late, lateAssigned, verified, abandoned, released := es[0], es[1], es[2], es[3], es[4]
	owners := store.Owners{Destinations: map[string]string{"crm": "team-crm"}}
	f.deadline(late.ID, t0.Add(time.Hour), "dead")
	f.deadline(lateAssigned.ID, t0.Add(time.Hour), "dead")
	if _, err := f.operate(lateAssigned.ID, store.OperateAssign, "", t0); err != nil { // owner bob
		t.Fatalf("assign: %v", err)
	}
	f.into(verified.ID, t0, store.EffectDone, time.Time{})
	t2 := t0.Add(2 * time.Hour)
	if _, err := f.s.EffectDeadlineEscalate(f.ctx, &store.EffectDeadlineEscalateParams{Now: t2, Actor: "deadlines",
		Limit: 10, Owners: owners}); err != nil {
		t.Fatalf("EffectDeadlineEscalate: %v", err)
	}
	if ok, err := f.s.EffectMismatch(f.ctx, &store.EffectMismatchParams{EffectID: verified.ID, Actor: "verifier",
		Reason: "crm has no deal", Now: t2, Owner: "team-crm"}); !ok || err != nil {
		t.Fatalf("EffectMismatch: %v %v", ok, err)
	}
	// A call abandoned with its lease: the next claim finds its outcome
	// unknown, and giving that claim back leaves it to reconciliation.
	f.claimOne(abandoned.ID, t2)
	t3 := t2.Add(2 * time.Minute)
	c := f.claimOne(abandoned.ID, t3)
	release := func(c *store.ClaimedEffect) {
		if err := f.l.EffectRelease(f.ctx, &store.EffectReleaseParams{EffectID: c.ID, Token: c.Token, Now: t3,
			Owner: "team-crm"}); err != nil {
			t.Fatalf("EffectRelease %d: %v", c.ID, err)
		}
	}
	release(c)
	release(f.claimOne(released.ID, t3))
	for _, c := range []struct {
		e          *store.Effect
		state      store.EffectState
		owner, why string
	}{
		{late, store.EffectDead, "team-crm", "a deadline's escalation to dead takes the configured owner"},
		{lateAssigned, store.EffectDead, "bob", "an assigned owner is kept"},
		{verified, store.EffectNeedsReconciliation, "team-crm", "a mismatch takes the configured owner"},
		{abandoned, store.EffectNeedsReconciliation, "team-crm", "a release to needs_reconciliation takes the configured owner"},
		{released, store.EffectApproved, "", "a release outside the exception queue takes none"},
	} {
		if g := f.get(c.e.ID); g.State != c.state || g.Owner != c.owner {
			t.Errorf("effect %d: %s owned by %q, want %s owned by %q: %s", c.e.ID, g.State, g.Owner, c.state, c.owner, c.why)
		}
	}
}
