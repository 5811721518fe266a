package storetest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// The outcome signals, measured on a store driven through the pipeline
// and the ledger with explicit times (the store's only clock).

// sig is one signals test's store.
type sig struct {
	*led
}

func newSig(t *testing.T, o Opener) *sig { return &sig{newLed(t, o)} }

// snap measures every signal at `at` with a one-hour window.
func (f *sig) snap(at time.Time) map[string]*store.SignalMeasure {
	f.t.Helper()
	return f.snapP(store.SignalSnapshotParams{Now: at, Window: time.Hour})
}

func (f *sig) snapP(p store.SignalSnapshotParams) map[string]*store.SignalMeasure {
	f.t.Helper()
	s, err := f.s.SignalSnapshot(f.ctx, &p)
	if err != nil {
		f.t.Fatalf("SignalSnapshot: %v", err)
	}
	if !s.At.Equal(p.Now) {
		f.t.Fatalf("snapshot at %v, want %v", s.At, p.Now)
	}
	var names []string
	out := map[string]*store.SignalMeasure{}
	for _, m := range s.Measures {
		names = append(names, m.Name)
		out[m.Name] = m
	}
	if !slices.Equal(names, store.SignalNames()) {
		f.t.Fatalf("snapshot names %v, want %v", names, store.SignalNames())
	}
	return out
}

// want checks one measure's value, oldest and breakdown (nil: none).
func want(t *testing.T, what string, m *store.SignalMeasure, value int64, oldest time.Time, breakdown map[string]map[string]int64) {
	t.Helper()
	if m.Value != value || !m.Oldest.Equal(oldest) {
		t.Errorf("%s: %s = %d oldest %v, want %d oldest %v", what, m.Name, m.Value, m.Oldest, value, oldest)
	}
	got := m.Breakdown
	if len(got) == 0 {
		got = nil
	}
	if !maps.EqualFunc(got, breakdown, func(a, b map[string]int64) bool { return maps.Equal(a, b) }) {
		t.Errorf("%s: %s breakdown %v, want %v", what, m.Name, m.Breakdown, breakdown)
	}
}

type bd = map[string]map[string]int64

// effAt is an effect insert with a business deadline.
func effAt(key, name string, warn, deadline time.Time) *store.EffectInsert {
	e := eff(key, name)
	e.DeadlineWarnAt, e.DeadlineAt = warn, deadline
	return e
}

// apply routes a new event to flow/entity with order key and applies ap
// to it at `at`.
func (f *sig) apply(flow, entity, key string, at time.Time, ap store.FlowApplyParams) *store.FlowApplyResult {
	f.t.Helper()
	f.n++
	pk := f.event(fmt.Sprintf("sig_%03d", f.n))
	f.route(at, to(pk, rt(flow, entity, key)))
	return f.step(flow, entity, at, ap)
}

func (f *sig) byKey(key string) *store.Effect {
	f.t.Helper()
	for _, e := range f.effects(&store.EffectListParams{Limit: 1000}) {
		if e.EpisodeKey == key {
			return e
		}
	}
	f.t.Fatalf("no effect %s", key)
	return nil
}

func testSignalsEmpty(t *testing.T, o Opener) {
	f := newSig(t, o)
	for name, m := range f.snap(t0) {
		want(t, "empty store", m, 0, time.Time{}, nil)
		if m.Near != 0 || m.Passed != 0 {
			t.Errorf("%s: near %d passed %d on an empty store", name, m.Near, m.Passed)
		}
	}
}

// A dead-lettered newest event leaves its entity behind until a newer
// version applies; pending work counts while it waits.
func testSignalRevisionLag(t *testing.T, o Opener) {
	f := newSig(t, o)
	e1 := f.event("lag_1")
	f.route(t0, to(e1, rt("orders", "o1", "0001")))
	want(t, "routed, pending", f.snap(t0)[store.SignalRevisionLag], 1, t0,
		bd{"flow": {"orders": 1}, "largest_gap": {"orders/o1": 1}})
	f.step("orders", "o1", t0.Add(time.Second), rev(1, `{"n":1}`))
	want(t, "applied", f.snap(t0.Add(time.Second))[store.SignalRevisionLag], 0, time.Time{}, nil)

	// The newest event dead-letters: the entity lags from its routing on.
	t1 := t0.Add(10 * time.Second)
	e2 := f.event("lag_2")
	f.route(t1, to(e2, rt("orders", "o1", "0002")))
	if r := f.step("orders", "o1", t1, store.FlowApplyParams{Fail: "refetch: 404"}); r.Disposition != store.DispositionDeadLettered {
		t.Fatalf("fail: %+v", r)
	}
	want(t, "dead-lettered newest", f.snap(t1)[store.SignalRevisionLag], 1, t1,
		bd{"flow": {"orders": 1}, "largest_gap": {"orders/o1": 1}})

	// A newer event waits behind it: the gap grows, the lag keeps its start.
	t2 := t1.Add(10 * time.Second)
	e3 := f.event("lag_3")
	f.route(t2, to(e3, rt("orders", "o1", "0003")))
	// A failed route on another entity lags too.
	e4 := f.event("lag_4")
	f.route(t2, &store.RouteDecision{EventPK: e4, Routes: []store.Route{{Flow: "billing", Entity: "b1", OrderKey: "0001", Failed: "entity: no field id"}}})
	want(t, "two behind", f.snap(t2)[store.SignalRevisionLag], 2, t1,
		bd{"flow": {"orders": 1, "billing": 1}, "largest_gap": {"orders/o1": 2}})

	// A stale version settles but does not catch up.
	e5 := f.event("lag_5")
	f.route(t2, to(e5, rt("orders", "o1", "0000")))
	if r := f.step("orders", "o1", t2, rev(0, `{"n":0}`)); r.Disposition != store.DispositionStale {
		t.Fatalf("stale: %+v", r)
	}
	want(t, "after stale", f.snap(t2)[store.SignalRevisionLag], 2, t1,
		bd{"flow": {"orders": 1, "billing": 1}, "largest_gap": {"orders/o1": 2}})

	// The newer version applies: o1 caught up, b1 still behind.
	if r := f.step("orders", "o1", t2, rev(3, `{"n":3}`)); r.Disposition != store.DispositionApplied {
		t.Fatalf("newer: %+v", r)
	}
	want(t, "newer applied", f.snap(t2)[store.SignalRevisionLag], 1, t2,
		bd{"flow": {"billing": 1}, "largest_gap": {"billing/b1": 1}})

	// Falling behind again starts a new lag.
	t3 := t2.Add(time.Minute)
	e6 := f.event("lag_6")
	f.route(t3, to(e6, rt("orders", "o1", "0004")))
	m := f.snap(t3)[store.SignalRevisionLag]
	want(t, "behind again", m, 2, t2, bd{"flow": {"orders": 1, "billing": 1}, "largest_gap": {"billing/b1": 1}})
	// A replay of the newest event is routed news too, and a duplicate
	// of what is applied catches the entity up.
	if r := f.step("orders", "o1", t3, rev(4, `{"n":4}`)); r.Disposition != store.DispositionApplied {
		t.Fatalf("r4: %+v", r)
	}
	if _, err := f.s.ReplayCreate(f.ctx, &store.ReplayCreateParams{Now: t3, Actor: "op", Selection: "lag_6",
		Decisions: []*store.RouteDecision{to(e6, rt("orders", "o1", "0005"))}}); err != nil {
		t.Fatalf("ReplayCreate: %v", err)
	}
	want(t, "replayed", f.snap(t3)[store.SignalRevisionLag], 2, t2,
		trimGap(bd{"flow": {"orders": 1, "billing": 1}, "largest_gap": {"billing/b1": 1, "orders/o1": 1}}))
	if r := f.step("orders", "o1", t3, rev(4, `{"n":4}`)); r.Disposition != store.DispositionDuplicate {
		t.Fatalf("replayed r4: %+v", r)
	}
	want(t, "duplicate settles", f.snap(t3)[store.SignalRevisionLag], 1, t2,
		bd{"flow": {"billing": 1}, "largest_gap": {"billing/b1": 1}})
}

// trimGap resolves a tie for the largest gap the way the store does: the
// first (flow, entity) in byte order.
func trimGap(b bd) bd {
	keys := slices.Sorted(maps.Keys(b["largest_gap"]))
	b["largest_gap"] = map[string]int64{keys[0]: b["largest_gap"][keys[0]]}
	return b
}

func testSignalUnfinishedEvents(t *testing.T, o Opener) {
	f := newSig(t, o)
	var ds []*store.DeliveryInput
	for i, src := range []string{"stripe", "stripe", "crm", "shop"} {
		d := delivery(src, fmt.Sprintf("unf_%d", i), 10-i)
		ds = append(ds, d)
	}
	res := commit(t, f.s, one(ds...))
	m := f.snap(t0.Add(time.Hour))[store.SignalUnfinishedEvents]
	want(t, "accepted", m, 4, t0.Add(7*time.Second), bd{"source": {"stripe": 2, "crm": 1, "shop": 1}})
	m = f.snapP(store.SignalSnapshotParams{Now: t0, Window: time.Hour, BreakdownLimit: 1})[store.SignalUnfinishedEvents]
	want(t, "breakdown limit", m, 4, t0.Add(7*time.Second), bd{"source": {"stripe": 2}})
	// Routing to no flow settles an event (unrouted): it no longer counts.
	f.route(t0, &store.RouteDecision{EventPK: res[0].Items[3].EventPK})
	want(t, "one unrouted", f.snap(t0)[store.SignalUnfinishedEvents], 3, t0.Add(8*time.Second),
		bd{"source": {"stripe": 2, "crm": 1}})
}

func testSignalDeadlineRisk(t *testing.T, o Opener) {
	f := newSig(t, o)
	a := effAt("dl:a", "push", t0.Add(time.Hour), t0.Add(2*time.Hour))
	b := effAt("dl:b", "push", t0.Add(10*time.Minute), t0.Add(30*time.Minute))
	b.Destination = "mail"
	b.OnDeadline = "dead"
	done := effAt("dl:done", "push", t0, t0.Add(time.Minute))
	f.apply("o", "a", "1", t0, rev(1, `{}`, a))
	f.apply("o", "b", "1", t0, rev(1, `{}`, b))
	f.apply("o", "c", "1", t0, rev(1, `{}`, eff("dl:none", "push")))
	f.apply("o", "d", "1", t0, rev(1, `{}`, done))
	f.into(f.byKey("dl:done").ID, t0, store.EffectDone, time.Time{})

	got := f.byKey("dl:b")
	if !got.DeadlineAt.Equal(t0.Add(30*time.Minute)) || !got.DeadlineWarnAt.Equal(t0.Add(10*time.Minute)) ||
		got.OnDeadline != "dead" || !got.DeadlineMissedAt.IsZero() || got.Compensates != 0 {
		t.Fatalf("stored deadline: %+v", got)
	}
	if none := f.byKey("dl:none"); !none.DeadlineAt.IsZero() || !none.DeadlineWarnAt.IsZero() || none.OnDeadline != "" {
		t.Fatalf("effect without a deadline: %+v", none)
	}

	check := func(what string, at time.Time, near, passed int64, oldest time.Time, b bd) {
		t.Helper()
		m := f.snap(at)[store.SignalDeadlineRisk]
		want(t, what, m, near+passed, oldest, b)
		if m.Near != near || m.Passed != passed {
			t.Errorf("%s: near %d passed %d, want %d and %d", what, m.Near, m.Passed, near, passed)
		}
	}
	check("before any warning", t0.Add(10*time.Minute-time.Microsecond), 0, 0, time.Time{}, nil)
	check("warning comes", t0.Add(10*time.Minute), 1, 0, time.Time{}, bd{"state": {"near": 1}, "destination": {"mail": 1}})
	check("deadline reached", t0.Add(30*time.Minute), 0, 1, t0.Add(30*time.Minute),
		bd{"state": {"passed": 1}, "destination": {"mail": 1}})
	check("one near one passed", t0.Add(90*time.Minute), 1, 1, t0.Add(30*time.Minute),
		bd{"state": {"near": 1, "passed": 1}, "destination": {"mail": 1, "crm": 1}})
	check("both passed", t0.Add(3*time.Hour), 0, 2, t0.Add(30*time.Minute),
		bd{"state": {"passed": 2}, "destination": {"mail": 1, "crm": 1}})
	// A claimed (submitting) effect is still pending; a done one is not.
	c := f.claimOne(f.byKey("dl:a").ID, t0.Add(3*time.Hour))
	if !c.DeadlineAt.Equal(t0.Add(2 * time.Hour)) {
		t.Fatalf("claim without its deadline: %+v", c.Effect)
	}
	check("submitting counts", t0.Add(3*time.Hour), 0, 2, t0.Add(30*time.Minute),
		bd{"state": {"passed": 2}, "destination": {"mail": 1, "crm": 1}})
	f.settle(c, t0.Add(3*time.Hour), store.EffectDone, time.Time{})
	check("done leaves", t0.Add(3*time.Hour), 0, 1, t0.Add(30*time.Minute),
		bd{"state": {"passed": 1}, "destination": {"mail": 1}})
}

func testSignalUnknownOutcomes(t *testing.T, o Opener) {
	f := newSig(t, o)
	es := f.seed("crm", "mail", "crm")
	t1 := t0.Add(time.Minute)
	f.settle(f.claimOne(es[0].ID, t1), t1, store.EffectNeedsReconciliation, time.Time{}, func(p *store.EffectSettleParams) {
		p.Class, p.Reason = store.ClassUnknown, "timeout after send"
	})
	t2 := t0.Add(2 * time.Minute)
	f.claimOne(es[1].ID, t2) // submitting, lease until t2+1m
	want(t, "lease live", f.snap(t2.Add(59 * time.Second))[store.SignalUnknownOutcomes], 1, t1, bd{"destination": {"crm": 1}})
	want(t, "lease ran out", f.snap(t2.Add(time.Minute))[store.SignalUnknownOutcomes], 2, t1,
		bd{"destination": {"crm": 1, "mail": 1}})
	// Resolving the reconciliation closes it.
	if _, err := f.operate(es[0].ID, store.OperateResolve, "checked in the CRM: created", t2); err != nil {
		t.Fatalf("resolve: %v", err)
	}
	want(t, "resolved", f.snap(t2.Add(time.Minute))[store.SignalUnknownOutcomes], 1, t2, bd{"destination": {"mail": 1}})
}

func testSignalKeyConflicts(t *testing.T, o Opener) {
	f := newSig(t, o)
	k := eff("shared:key", "push")
	f.apply("a", "x", "1", t0, rev(1, `{}`, k))
	// The same key with the same request: an ordinary existing effect.
	t1 := t0.Add(time.Minute)
	if r := f.apply("b", "x", "1", t1, rev(1, `{}`, eff("shared:key", "push"))); r.EffectsExisting != 1 {
		t.Fatalf("same request: %+v", r)
	}
	if rows := f.audit("key_conflict"); len(rows) != 0 {
		t.Fatalf("same request recorded a conflict: %+v", rows)
	}
	// The same key with another request: recorded.
	other := eff("shared:key", "push")
	other.Request = []byte(`{"k":"something else"}`)
	if r := f.apply("c", "x", "1", t1, rev(1, `{}`, other)); r.EffectsExisting != 1 || r.EffectsInserted != 0 {
		t.Fatalf("other request: %+v", r)
	}
	// A version conflict: the same version with another state.
	t2 := t0.Add(2 * time.Minute)
	f.apply("d", "y", "1a", t2, rev(5, `{"s":1}`))
	if r := f.apply("d", "y", "1b", t2, rev(5, `{"s":2}`)); r.Disposition != store.DispositionDeadLettered {
		t.Fatalf("version conflict: %+v", r)
	}
	rows := f.audit("key_conflict")
	if len(rows) != 2 || rows[0].Detail != "episode_key shared:key: exists with a different request" ||
		!strings.HasPrefix(rows[1].Detail, "version r5") || !rows[0].At.Equal(t1) || rows[1].Entity != "y" {
		t.Fatalf("key_conflict rows: %+v", rows)
	}
	if dl := f.audit("dead_lettered"); len(dl) != 1 || !strings.Contains(dl[0].Detail, "version_conflict") {
		t.Fatalf("dead_lettered rows: %+v", dl)
	}
	want(t, "both in the window", f.snap(t2)[store.SignalKeyConflicts], 2, t1, bd{"kind": {"episode_key": 1, "version": 1}})
	// The window's query also returns the loop guard's rows: each signal
	// counts its own actions only.
	want(t, "no loop blocks", f.snap(t2)[store.SignalLoopBlocks], 0, time.Time{}, nil)
	// The window's lower edge is inclusive: at t1+1h the first still counts.
	want(t, "window edge", f.snap(t1.Add(time.Hour))[store.SignalKeyConflicts], 2, t1,
		bd{"kind": {"episode_key": 1, "version": 1}})
	want(t, "first left the window", f.snap(t1.Add(time.Hour + time.Microsecond))[store.SignalKeyConflicts], 1, t2,
		bd{"kind": {"version": 1}})
	want(t, "window empty", f.snap(t2.Add(2 * time.Hour))[store.SignalKeyConflicts], 0, time.Time{}, nil)
	m := f.snapP(store.SignalSnapshotParams{Now: t2.Add(2 * time.Hour), Window: 3 * time.Hour})[store.SignalKeyConflicts]
	want(t, "wider window", m, 2, t1, bd{"kind": {"episode_key": 1, "version": 1}})
}

func testSignalDeadLetters(t *testing.T, o Opener) {
	f := newSig(t, o)
	es := f.seed("crm", "crm", "mail")
	t1 := t0.Add(time.Minute)
	f.into(es[0].ID, t1, store.EffectDead, time.Time{})
	t2 := t0.Add(2 * time.Minute)
	f.into(es[1].ID, t2, store.EffectDead, time.Time{})
	if _, err := f.operate(es[1].ID, store.OperateAssign, "", t2); err != nil { // owner bob
		t.Fatalf("assign: %v", err)
	}
	pk := f.event("dl_evt", func(d *store.DeliveryInput) { d.ReceivedAt = t0.Add(-time.Hour) })
	f.route(t2, to(pk, rt("orders", "o9", "1")))
	f.step("orders", "o9", t2, store.FlowApplyParams{Fail: "refetch: 410 gone"})
	// The event is its flow's owner's, unassigned while the flow has none.
	want(t, "two effects one event", f.snap(t2)[store.SignalDeadLetters], 3, t0.Add(-time.Hour),
		bd{"owner": {"unassigned": 2, "bob": 1}, "kind": {"effects": 2, "events": 1}})
	owned := store.SignalSnapshotParams{Now: t2, Window: time.Hour, FlowOwners: map[string]string{"orders": "team-orders"}}
	want(t, "the flow's owner", f.snapP(owned)[store.SignalDeadLetters], 3, t0.Add(-time.Hour),
		bd{"owner": {"unassigned": 1, "bob": 1, "team-orders": 1}, "kind": {"effects": 2, "events": 1}})
	if _, err := f.operate(es[0].ID, store.OperateResolve, "sent by hand", t2); err != nil {
		t.Fatalf("resolve: %v", err)
	}
	want(t, "one resolved", f.snapP(owned)[store.SignalDeadLetters], 2, t0.Add(-time.Hour),
		bd{"owner": {"bob": 1, "team-orders": 1}, "kind": {"effects": 1, "events": 1}})
	if _, err := f.s.EventResolve(f.ctx, &store.EventResolveParams{Source: "crm", EventID: "dl_evt", Now: t2, Actor: "operator:ann", Note: "fixed upstream"}); err != nil {
		t.Fatalf("resolve the event: %v", err)
	}
	want(t, "the event resolved", f.snapP(owned)[store.SignalDeadLetters], 1, t2,
		bd{"owner": {"bob": 1}, "kind": {"effects": 1}})
}

func testSignalLoopBlocks(t *testing.T, o Opener) {
	f := newSig(t, o)
	step := func(flow, key, cause string, hop int, at time.Time) *store.FlowApplyResult {
		f.n++
		pk := f.event(fmt.Sprintf("loop_%d", f.n), caused(cause, hop))
		f.route(at, to(pk, rt(flow, "acct", key)))
		ap := rev(hop+1, fmt.Sprintf(`{"h":%d}`, hop))
		ap.CausationID, ap.Hop, ap.MaxHops = cause, hop, 3
		return f.step(flow, "acct", at, ap)
	}
	step("f1", "1", "c1", 0, t0)
	t1 := t0.Add(time.Minute)
	if r := step("f1", "2", "c1", 1, t1); !strings.HasPrefix(r.Reason, "loop_blocked") {
		t.Fatalf("second visit: %+v", r)
	}
	t2 := t0.Add(2 * time.Minute)
	if r := step("f2", "1", "c2", 3, t2); !strings.HasPrefix(r.Reason, "loop_hop_limit") {
		t.Fatalf("hop limit: %+v", r)
	}
	want(t, "both", f.snap(t2)[store.SignalLoopBlocks], 2, t1, bd{"kind": {"loop_blocked": 1, "loop_hop_limit": 1}})
	want(t, "window", f.snap(t2.Add(time.Hour))[store.SignalLoopBlocks], 1, t2, bd{"kind": {"loop_hop_limit": 1}})
	if m := f.snap(t2)[store.SignalKeyConflicts]; m.Value != 0 {
		t.Fatalf("loop blocks counted as key conflicts: %+v", m)
	}
}

// comp is a compensation insert of original.
func comp(original *store.Effect) *store.EffectInsert {
	e := eff(original.EpisodeKey+":compensate", original.Effect+":compensate")
	e.Compensates = original.ID
	e.Destination = original.Destination
	return e
}

func testSignalCompensation(t *testing.T, o Opener) {
	f := newSig(t, o)
	// Never sent: superseded, nothing inserted.
	f.apply("orders", "a", "1", t0, rev(1, `{}`, eff("a:r1:mail", "mail")))
	orig := f.byKey("a:r1:mail")
	r := f.apply("orders", "a", "2", t0, rev(2, `{"cancelled":true}`, comp(orig)))
	if r.EffectsInserted != 0 || r.Superseded != 1 {
		t.Fatalf("unsent original: %+v", r)
	}
	if got := f.get(orig.ID); got.State != store.EffectSuperseded {
		t.Fatalf("unsent original is %s, want superseded", got.State)
	}
	if rows := f.audit("effect_superseded"); len(rows) != 1 || !strings.HasPrefix(rows[0].Detail, "a:r1:mail") {
		t.Fatalf("effect_superseded rows: %+v", rows)
	}

	// Done: compensated, at most once.
	f.apply("orders", "b", "1", t0, rev(1, `{}`, eff("b:r1:mail", "mail"), eff("b:r1:note", "note")))
	done := f.byKey("b:r1:mail")
	f.into(done.ID, t0, store.EffectDone, time.Time{})
	t1 := t0.Add(time.Minute)
	// A second compensation of the done effect, named like the pending
	// ordinary effect "note", which it must not supersede by name.
	noteComp := comp(done)
	noteComp.EpisodeKey, noteComp.Effect = "b:extra:compensate", "note"
	r = f.apply("orders", "b", "2", t1, rev(2, `{"cancelled":true}`, comp(done)))
	if r.EffectsInserted != 1 || r.Superseded != 0 {
		t.Fatalf("done original: %+v", r)
	}
	c := f.byKey("b:r1:mail:compensate")
	if c.Compensates != done.ID || c.State != store.EffectApproved || c.Version != "r2" {
		t.Fatalf("compensation row: %+v", c)
	}
	if got := f.get(c.ID); got.Compensates != done.ID || f.get(done.ID).Compensates != 0 {
		t.Fatalf("EffectGet of the compensation: %+v", got)
	}
	if n := f.get(f.byKey("b:r1:note").ID); n.State != store.EffectApproved {
		t.Fatalf("ordinary effect of another name: %s", n.State)
	}
	want(t, "outstanding", f.snap(t1)[store.SignalCompensationOutstanding], 1, t1, bd{"destination": {"crm": 1}})
	if r := f.apply("orders", "b", "3", t1, rev(3, `{"cancelled":true}`, comp(done))); r.EffectsInserted != 0 || r.EffectsExisting != 1 {
		t.Fatalf("second compensation: %+v", r)
	}
	if rows := f.audit("key_conflict"); len(rows) != 0 {
		t.Fatalf("the same compensation again is no conflict: %+v", rows)
	}

	// A newer ordinary effect of the compensation's name supersedes
	// ordinary effects only; a compensation insert named like pending
	// effects supersedes none of them.
	f.apply("orders", "b", "4", t1, rev(4, `{}`, eff("b:r4:mail:compensate", "mail:compensate"), noteComp))
	if got := f.get(c.ID); got.State != store.EffectApproved {
		t.Fatalf("compensation superseded by name: %s", got.State)
	}
	if n := f.get(f.byKey("b:r1:note").ID); n.State != store.EffectApproved {
		t.Fatalf("a compensation insert superseded by name: %s", n.State)
	}

	// Dead or superseded originals need nothing.
	f.apply("orders", "c", "1", t0, rev(1, `{}`, eff("c:r1:mail", "mail")))
	dead := f.byKey("c:r1:mail")
	f.into(dead.ID, t0, store.EffectDead, time.Time{})
	if r := f.apply("orders", "c", "2", t1, rev(2, `{}`, comp(dead), comp(f.get(orig.ID)))); r.EffectsInserted != 0 || r.Superseded != 0 {
		t.Fatalf("dead and superseded originals: %+v", r)
	}

	// The list filter finds the compensations only.
	comps := f.effects(&store.EffectListParams{Compensations: true, Limit: 100})
	var keys []string
	for _, e := range comps {
		keys = append(keys, e.EpisodeKey)
	}
	if !slices.Equal(keys, []string{"b:r1:mail:compensate", "b:extra:compensate"}) {
		t.Fatalf("compensations listed: %v", keys)
	}
	want(t, "two outstanding", f.snap(t1)[store.SignalCompensationOutstanding], 2, t1, bd{"destination": {"crm": 2}})
	f.into(c.ID, t1, store.EffectDone, time.Time{})
	want(t, "one done", f.snap(t1)[store.SignalCompensationOutstanding], 1, t1, bd{"destination": {"crm": 1}})
	if got := f.effects(&store.EffectListParams{Compensations: true, State: store.EffectDone}); len(got) != 1 || got[0].ID != c.ID {
		t.Fatalf("done compensations: %v", got)
	}
}

// Mismatches and escalations are written by EffectMismatch and
// EffectDeadlineEscalate; this case measures what they leave behind.
func testSignalMismatchAndEscalation(t *testing.T, o Opener) {
	f := newSig(t, o)
	es := f.seed("crm", "mail", "crm")
	for _, e := range es {
		f.into(e.ID, t0, store.EffectDone, time.Time{})
	}
	t1 := t0.Add(time.Minute)
	for _, e := range es[:2] {
		ok, err := f.s.EffectMismatch(f.ctx, &store.EffectMismatchParams{EffectID: e.ID, Actor: "verifier", Reason: "404 at lookup", Now: t1})
		if err != nil {
			t.Fatalf("EffectMismatch: %v", err)
		}
		if !ok {
			t.Fatalf("mismatch of done effect %d not recorded", e.ID)
		}
	}
	if got := f.get(es[0].ID); !got.MismatchAt.Equal(t1) {
		t.Fatalf("mismatch mark: %+v", got)
	}
	want(t, "two marked", f.snap(t1)[store.SignalReconciliationMismatches], 2, t1, bd{"destination": {"crm": 1, "mail": 1}})
	if m := f.snap(t1)[store.SignalUnknownOutcomes]; m.Value != 0 {
		t.Fatalf("a mismatch counted as an unknown outcome: %+v", m)
	}
	// Settled done again (a retry) or resolved: the mark is cleared.
	t2 := t0.Add(2 * time.Minute)
	if _, err := f.operate(es[0].ID, store.OperateRetry, "re-send", t2); err != nil {
		t.Fatalf("retry: %v", err)
	}
	f.into(es[0].ID, t2, store.EffectDone, time.Time{})
	if _, err := f.operate(es[1].ID, store.OperateResolve, "present after all", t2); err != nil {
		t.Fatalf("resolve: %v", err)
	}
	for _, e := range es[:2] {
		if got := f.get(e.ID); !got.MismatchAt.IsZero() {
			t.Fatalf("mark kept after repair: %+v", got)
		}
	}
	want(t, "repaired", f.snap(t2)[store.SignalReconciliationMismatches], 0, time.Time{}, nil)

	// The deadline-missed list filter.
	f.apply("o", "late", "1", t0, rev(1, `{}`, effAt("late:mail", "mail", t0, t0.Add(time.Minute))))
	f.apply("o", "early", "1", t0, rev(1, `{}`, effAt("early:mail", "mail", t0, t0.Add(time.Hour))))
	if _, err := f.s.EffectDeadlineEscalate(f.ctx, &store.EffectDeadlineEscalateParams{Now: t2, Actor: "deadlines", Limit: 10}); err != nil {
		t.Fatalf("EffectDeadlineEscalate: %v", err)
	}
	got := f.effects(&store.EffectListParams{DeadlineMissed: true})
	if len(got) != 1 || got[0].EpisodeKey != "late:mail" || !got[0].DeadlineMissedAt.Equal(t2) {
		t.Fatalf("deadline missed list: %+v", got)
	}
}

func testSignalHistory(t *testing.T, o Opener) {
	f := newSig(t, o)
	rec := func(at time.Time, value int64, status string) error {
		return f.s.SignalHistoryRecord(f.ctx, &store.SignalHistoryRecordParams{Now: at, Points: []store.SignalHistoryInput{
			{Name: store.SignalDeadLetters, Value: value, Status: status},
			{Name: store.SignalLoopBlocks, Value: 0, Status: "ok"},
		}})
	}
	list := func(res string, from, to time.Time) []string {
		t.Helper()
		pts, err := f.s.SignalHistoryList(f.ctx, &store.SignalHistoryListParams{Name: store.SignalDeadLetters,
			Resolution: res, From: from, To: to})
		if err != nil {
			t.Fatalf("SignalHistoryList: %v", err)
		}
		var out []string
		for _, p := range pts {
			out = append(out, fmt.Sprintf("%s %d %s", p.Bucket.Format("01-02T15:04"), p.Value, p.Status))
		}
		return out
	}
	h0 := time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)
	steps := []struct {
		at     time.Time
		value  int64
		status string
	}{
		{h0.Add(30*time.Minute + 10*time.Second), 3, "warn"},
		{h0.Add(30*time.Minute + 50*time.Second), 1, "alert"}, // same minute: max value, worst status
		{h0.Add(31 * time.Minute), 2, "ok"},
		{h0.Add(75 * time.Minute), 7, "ok"},
	}
	for _, s := range steps {
		if err := rec(s.at, s.value, s.status); err != nil {
			t.Fatalf("record: %v", err)
		}
	}
	if got, w := list(store.ResolutionMinute, time.Time{}, time.Time{}),
		[]string{"11-03T09:30 3 alert", "11-03T09:31 2 ok", "11-03T10:15 7 ok"}; !slices.Equal(got, w) {
		t.Fatalf("minutes %v, want %v", got, w)
	}
	if got, w := list(store.ResolutionHour, time.Time{}, time.Time{}), []string{"11-03T09:00 3 alert", "11-03T10:00 7 ok"}; !slices.Equal(got, w) {
		t.Fatalf("hours %v, want %v", got, w)
	}
	if got, w := list(store.ResolutionMinute, h0.Add(31*time.Minute), h0.Add(75*time.Minute)), []string{"11-03T09:31 2 ok"}; !slices.Equal(got, w) {
		t.Fatalf("minutes in [09:31, 10:15) %v, want %v", got, w)
	}
	// A day later the first minutes are pruned; the hours stay.
	if err := rec(h0.Add(24*time.Hour+31*time.Minute), 0, "ok"); err != nil {
		t.Fatalf("record: %v", err)
	}
	if got, w := list(store.ResolutionMinute, time.Time{}, time.Time{}),
		[]string{"11-03T09:31 2 ok", "11-03T10:15 7 ok", "11-04T09:31 0 ok"}; !slices.Equal(got, w) {
		t.Fatalf("minutes after a day %v, want %v", got, w)
	}
	// Thirty days and an hour later the first hour is pruned too.
	if err := rec(h0.Add(30*24*time.Hour+time.Hour), 0, "ok"); err != nil {
		t.Fatalf("record: %v", err)
	}
	if got, w := list(store.ResolutionHour, time.Time{}, time.Time{}),
		[]string{"11-03T10:00 7 ok", "11-04T09:00 0 ok", "12-03T10:00 0 ok"}; !slices.Equal(got, w) {
		t.Fatalf("hours after thirty days %v, want %v", got, w)
	}
	if got := list(store.ResolutionMinute, time.Time{}, time.Time{}); !slices.Equal(got, []string{"12-03T10:00 0 ok"}) {
		t.Fatalf("minutes after thirty days %v", got)
	}
	if err := rec(h0, 1, "bad"); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("status bad: %v, want ErrInvalidArgument", err)
	}
	if _, err := f.s.SignalHistoryList(f.ctx, &store.SignalHistoryListParams{Name: store.SignalDeadLetters, Resolution: "day"}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("resolution day: %v, want ErrInvalidArgument", err)
	}
}

// A registry other than the built-in one is measured as given, in its
// order, from the same driver queries: a signal that only folds the rows
// of an existing query differently needs nothing from the driver. Every
// query the registry may name runs on the driver, and a query the driver
// does not have fails the snapshot, naming the signal and the query.
func testSignalRegistry(t *testing.T, o Opener) {
	f := newSig(t, o)
	es := f.seed("crm", "crm", "mail")
	t1 := t0.Add(time.Minute)
	f.into(es[0].ID, t1, store.EffectDead, time.Time{})
	f.into(es[1].ID, t1, store.EffectDead, time.Time{})
	pk := f.event("reg_evt", func(d *store.DeliveryInput) { d.ReceivedAt = t0.Add(-time.Hour) })
	f.route(t1, to(pk, rt("orders", "o9", "1")))
	f.step("orders", "o9", t1, store.FlowApplyParams{Fail: "refetch: 410 gone"})

	def := func(name string, measure func(*store.SignalMeasure, store.SignalRead) error) store.SignalDef {
		return store.SignalDef{Name: name, Title: name, Help: "A test signal.", Measure: measure,
			List: store.SignalList{Path: "/effects"}}
	}
	// Dead effects by owner, from the dead letters' query.
	deadEffects := def("dead_effects", func(m *store.SignalMeasure, read store.SignalRead) error {
		rows, err := read(store.SignalQueryDeadEffects)
		for _, r := range rows {
			m.Count(r.N, r.Oldest)
			m.Break("owner", r.Key, r.N)
		}
		return err
	})
	// Every query, each counted once when it answers.
	every := def("every_query", func(m *store.SignalMeasure, read store.SignalRead) error {
		for _, q := range store.SignalQueries() {
			if _, err := read(q); err != nil {
				return err
			}
			m.Count(1, time.Time{})
			m.Break("query", string(q), 1)
		}
		return nil
	})
	builtin, _ := store.BuiltinSignals().Lookup(store.SignalDeadLetters)
	reg, err := store.NewSignalRegistry(deadEffects, every, builtin)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := f.s.SignalSnapshot(f.ctx, &store.SignalSnapshotParams{Now: t1, Window: time.Hour, Signals: reg})
	if err != nil {
		t.Fatalf("SignalSnapshot: %v", err)
	}
	var names []string
	got := map[string]*store.SignalMeasure{}
	for _, m := range snap.Measures {
		names = append(names, m.Name)
		got[m.Name] = m
	}
	if !slices.Equal(names, reg.Names()) {
		t.Fatalf("measured %v, want %v", names, reg.Names())
	}
	want(t, "test signal", got["dead_effects"], 2, t1, bd{"owner": {"unassigned": 2}})
	if m := got["every_query"]; m.Value != int64(len(store.SignalQueries())) {
		t.Errorf("every query answered: %d of %d (%v)", m.Value, len(store.SignalQueries()), m.Breakdown)
	}
	want(t, "built-in entry", got[store.SignalDeadLetters], 3, t0.Add(-time.Hour),
		bd{"owner": {"unassigned": 3}, "kind": {"effects": 2, "events": 1}})

	bad, err := store.NewSignalRegistry(deadEffects, def("bogus", func(_ *store.SignalMeasure, read store.SignalRead) error {
		_, err := read("no_such_query")
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.s.SignalSnapshot(f.ctx, &store.SignalSnapshotParams{Now: t1, Window: time.Hour, Signals: bad})
	if !errors.Is(err, store.ErrUnknownSignalQuery) || !strings.Contains(err.Error(), "bogus: no_such_query") {
		t.Errorf("a query the driver lacks: %v, want ErrUnknownSignalQuery naming bogus and no_such_query", err)
	}
}
