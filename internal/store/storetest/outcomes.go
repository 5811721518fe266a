package storetest

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// outc is one outcomes test's ledger, with direct access to the database
// for what the contract has no call for.
type outc struct {
	*led
	o Opener
}

func newOutc(t *testing.T, o Opener) *outc {
	return &outc{led: newLed(t, o), o: o}
}

// tamper runs one statement behind the contract's back; a driver without
// Tamper skips the test.
func (f *outc) tamper(guard, query string, args ...any) {
	f.t.Helper()
	if f.o.Tamper == nil {
		f.t.Skipf("driver %s cannot plant rows directly", f.o.Name)
	}
	f.o.Tamper(f.t, f.s, guard, query, args...)
}

// deadline gives an effect a business deadline. It is planted directly so
// that these tests cover escalation alone, not how flows set deadlines.
func (f *outc) deadline(id int64, at time.Time, onDeadline string) {
	f.t.Helper()
	f.tamper(GuardNone, `UPDATE effects SET deadline_at = ?, deadline_warn_at = ?, on_deadline = ? WHERE id = ?`,
		at, at.Add(-30*time.Minute), onDeadline, id)
}

func (f *outc) escalate(at time.Time, limit int) []*store.Effect {
	f.t.Helper()
	es, err := f.s.EffectDeadlineEscalate(f.ctx, &store.EffectDeadlineEscalateParams{Now: at, Actor: "deadlines", Limit: limit})
	if err != nil {
		f.t.Fatalf("EffectDeadlineEscalate at %v: %v", at, err)
	}
	return es
}

func states(es []*store.Effect) map[int64]store.EffectState {
	m := map[int64]store.EffectState{}
	for _, e := range es {
		m[e.ID] = e.State
	}
	return m
}

// Missed deadlines are escalated once each; on_deadline dead moves the
// effect to a person, but never while its call may be in flight.
func testDeadlineEscalate(t *testing.T, o Opener) {
	f := newOutc(t, o)
	es := f.seed("crm", "crm", "crm", "crm", "crm", "crm")
	keep, toDead, busy, done, later, none := es[0], es[1], es[2], es[3], es[4], es[5]
	f.deadline(keep.ID, t0.Add(time.Hour), "")
	f.deadline(toDead.ID, t0.Add(time.Hour), "dead")
	f.deadline(busy.ID, t0.Add(time.Hour), "dead")
	f.deadline(done.ID, t0.Add(time.Hour), "dead")
	f.deadline(later.ID, t0.Add(3*time.Hour), "dead")
	f.into(toDead.ID, t0, store.EffectRetryWait, t0.Add(5*time.Hour))
	f.into(done.ID, t0, store.EffectDone, time.Time{})
	t2 := t0.Add(2 * time.Hour)
	c := f.claimOne(busy.ID, t2.Add(-10*time.Second))

	got := f.escalate(t2, 10)
	want := map[int64]store.EffectState{keep.ID: store.EffectApproved, toDead.ID: store.EffectDead, busy.ID: store.EffectSubmitting}
	if g := states(got); !mapsEqual(g, want) {
		t.Fatalf("escalated %v, want %v", g, want)
	}
	if !slices.Equal(idsOf(got...), idsOf(keep, toDead, busy)) {
		t.Fatalf("escalation order %v", idsOf(got...))
	}
	d := f.get(toDead.ID)
	if d.State != store.EffectDead || d.ErrorClass != store.ClassPermanent || !strings.Contains(d.Reason, "deadline missed") ||
		!d.NextAttemptAt.IsZero() || !d.UpdatedAt.Equal(t2) {
		t.Fatalf("effect past its deadline with on_deadline dead: %+v", d)
	}
	missed := f.audit("deadline_missed")
	if len(missed) != 3 || missed[0].Actor != "deadlines" || !strings.Contains(missed[0].Detail, keep.EpisodeKey) ||
		!strings.Contains(missed[0].Detail, "still trying") {
		t.Fatalf("deadline_missed audit = %+v", missed)
	}
	if dead := f.audit("effect_dead"); len(dead) != 1 || !strings.Contains(dead[0].Detail, toDead.EpisodeKey) ||
		!strings.Contains(dead[0].Detail, "retry_wait -> dead") {
		t.Fatalf("effect_dead audit = %+v", dead)
	}
	// Once each.
	if again := f.escalate(t2.Add(time.Second), 10); len(again) != 0 {
		t.Fatalf("escalated again: %v", states(again))
	}
	// The call in flight is settled still pending: now it goes to a person.
	f.settle(c, t2.Add(5*time.Second), store.EffectRetryWait, t2.Add(time.Hour))
	got = f.escalate(t2.Add(10*time.Second), 10)
	if g := states(got); !mapsEqual(g, map[int64]store.EffectState{busy.ID: store.EffectDead}) {
		t.Fatalf("after the settle escalated %v", g)
	}
	if n := len(f.audit("deadline_missed")); n != 3 {
		t.Fatalf("the settled effect's deadline was reported %d times in all", n)
	}
	if dead := f.audit("effect_dead"); len(dead) != 2 {
		t.Fatalf("effect_dead audit = %+v", dead)
	}
	// Limit, and a later deadline once it passes; done and deadline-less
	// effects are never touched.
	got = f.escalate(t0.Add(4*time.Hour), 1)
	if g := states(got); !mapsEqual(g, map[int64]store.EffectState{later.ID: store.EffectDead}) {
		t.Fatalf("later deadline escalated %v", g)
	}
	if g := f.get(done.ID); g.State != store.EffectDone {
		t.Fatalf("done effect moved to %s", g.State)
	}
	if got := f.escalate(t0.Add(100*time.Hour), 10); len(got) != 0 {
		t.Fatalf("nothing left to escalate, got %v", states(got))
	}
	// Dead by deadline waits for a person: no scheduled re-drive takes it.
	cs := f.claimP(store.EffectClaimParams{Now: t0.Add(100 * time.Hour), LeaseFor: time.Minute, Limit: 100, MaxRedrives: 5})
	if got := ids(cs); !slices.Equal(got, idsOf(keep, none)) {
		t.Fatalf("claimable long after the deadlines: %v, want only %v", got, idsOf(keep, none))
	}
}

func mapsEqual(a, b map[int64]store.EffectState) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func (f *outc) compensate(id int64, note, req string, at time.Time) (*store.Effect, error) {
	return f.s.EffectCompensate(f.ctx, &store.EffectCompensateParams{EffectID: id, Actor: "operator:alice", Note: note,
		Request: []byte(req), Now: at})
}

// An operator compensates a done, acknowledged or resolved effect once.
func testCompensate(t *testing.T, o Opener) {
	f := newOutc(t, o)
	es := f.seed("crm", "crm", "crm", "crm")
	done, ack, resolved, approved := es[0], es[1], es[2], es[3]
	f.into(done.ID, t0, store.EffectDone, time.Time{})
	f.into(ack.ID, t0, store.EffectAcknowledged, time.Time{})
	if _, err := f.operate(resolved.ID, store.OperateResolve, "made by hand", t0); err != nil {
		t.Fatal(err)
	}
	t1 := t0.Add(time.Hour)

	c, err := f.compensate(done.ID, "customer refunded", `{"undo":"deal-1"}`, t1)
	if err != nil {
		t.Fatalf("compensate: %v", err)
	}
	if c.EpisodeKey != done.EpisodeKey+":compensate" || c.Effect != done.Effect+":compensate" || c.State != store.EffectApproved ||
		c.Flow != done.Flow || c.Entity != done.Entity || c.Version != done.Version || c.Destination != done.Destination ||
		c.Source != done.Source || c.SourceEventID != done.SourceEventID || !jsonEqual(c.Request, `{"undo":"deal-1"}`) ||
		!c.CreatedAt.Equal(t1) || c.ID == done.ID {
		t.Fatalf("compensation = %+v", c)
	}
	if g := f.get(done.ID); g.State != store.EffectDone {
		t.Fatalf("the original moved to %s", g.State)
	}
	rows := f.audit("effect_compensation_approved")
	if len(rows) != 1 || rows[0].Actor != "operator:alice" || !strings.Contains(rows[0].Detail, "customer refunded") ||
		!strings.Contains(rows[0].Detail, c.EpisodeKey) || rows[0].EventID != done.SourceEventID {
		t.Fatalf("compensation audit = %+v", rows)
	}
	// The compensation is an ordinary effect for the worker.
	cs := f.claimAt(t1)
	if !slices.Contains(ids(cs), c.ID) {
		t.Fatalf("compensation not claimable: %v", ids(cs))
	}
	for _, cc := range cs {
		f.releaseC(cc, t1, time.Time{})
	}

	if _, err := f.compensate(done.ID, "again", `{}`, t1); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second compensation: %v, want ErrConflict", err)
	}
	if _, err := f.compensate(c.ID, "undo the undo", `{}`, t1); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("compensating a compensation: %v, want ErrInvalidArgument", err)
	}
	if _, err := f.compensate(approved.ID, "never sent", `{}`, t1); !errors.Is(err, store.ErrInvalidTransition) {
		t.Fatalf("compensating an approved effect: %v, want ErrInvalidTransition", err)
	}
	if _, err := f.compensate(1<<40, "gone", `{}`, t1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("compensating a missing effect: %v, want ErrNotFound", err)
	}
	if _, err := f.compensate(ack.ID, "  ", `{}`, t1); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("compensation without a note: %v, want ErrInvalidArgument", err)
	}
	if _, err := f.compensate(ack.ID, "bad body", `{`, t1); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("compensation with a request that is not JSON: %v, want ErrInvalidArgument", err)
	}
	if n := len(f.audit("effect_compensation_approved")); n != 1 {
		t.Fatalf("refused compensations wrote audit rows: %d in all", n)
	}
	for _, e := range []*store.Effect{ack, resolved} {
		if g, err := f.compensate(e.ID, "undo", `{}`, t1); err != nil || g.EpisodeKey != e.EpisodeKey+":compensate" {
			t.Fatalf("compensate %s: %+v %v", e.State, g, err)
		}
	}
}

func (f *outc) verifyNext(dest string, cutoff time.Time, limit int) ([]int64, int64) {
	f.t.Helper()
	r, err := f.s.VerifyNext(f.ctx, &store.VerifyNextParams{Destination: dest, Cutoff: cutoff, Limit: limit})
	if err != nil {
		f.t.Fatalf("VerifyNext %s: %v", dest, err)
	}
	for _, e := range r.Effects {
		if e.State != store.EffectDone || e.Destination != dest {
			f.t.Fatalf("VerifyNext %s returned %+v", dest, e)
		}
	}
	return idsOf(r.Effects...), r.Cursor
}

func (f *outc) advance(dest string, after int64) {
	f.t.Helper()
	if err := f.s.VerifyAdvance(f.ctx, &store.VerifyAdvanceParams{Destination: dest, AfterID: after, Now: t0}); err != nil {
		f.t.Fatalf("VerifyAdvance: %v", err)
	}
}

// Verification reads a destination's done effects in id order, passes
// over those that can never be done, and never passes one still young.
func testVerifyNext(t *testing.T, o Opener) {
	f := newOutc(t, o)
	es := f.seed("crm", "crm", "erp", "crm", "crm", "crm", "crm", "crm")
	a, b, x, c, d, e, g, h := es[0], es[1], es[2], es[3], es[4], es[5], es[6], es[7]
	f.into(a.ID, t0, store.EffectDone, time.Time{})
	if _, err := f.operate(b.ID, store.OperateResolve, "made by hand", t0.Add(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	f.into(x.ID, t0, store.EffectDone, time.Time{})
	f.into(c.ID, t0.Add(time.Minute), store.EffectRetryWait, t0.Add(time.Hour))
	f.into(d.ID, t0, store.EffectDone, time.Time{})
	f.into(e.ID, t0.Add(10*time.Minute), store.EffectDone, time.Time{})
	f.into(g.ID, t0, store.EffectDone, time.Time{})
	f.into(h.ID, t0.Add(30*time.Minute), store.EffectDead, time.Time{})

	cut := t0.Add(5 * time.Minute)
	// b is resolved (never done), c pending since before the cutoff; e is
	// done but young, so the page stops before it.
	if got, cur := f.verifyNext("crm", cut, 10); !slices.Equal(got, idsOf(a, d)) || cur != d.ID {
		t.Fatalf("first page %v cursor %d, want %v cursor %d", got, cur, idsOf(a, d), d.ID)
	}
	if got, cur := f.verifyNext("crm", cut, 1); !slices.Equal(got, idsOf(a)) || cur != a.ID {
		t.Fatalf("page of one %v cursor %d", got, cur)
	}
	f.advance("crm", d.ID)
	if got, cur := f.verifyNext("crm", cut, 10); len(got) != 0 || cur != d.ID {
		t.Fatalf("after advancing: %v cursor %d, want nothing at cursor %d", got, cur, d.ID)
	}
	// Later, e is old enough; h, dead since after the cutoff, may still be
	// retried into done: the page stops before it.
	later := t0.Add(20 * time.Minute)
	if got, cur := f.verifyNext("crm", later, 10); !slices.Equal(got, idsOf(e, g)) || cur != g.ID {
		t.Fatalf("later page %v cursor %d, want %v cursor %d", got, cur, idsOf(e, g), g.ID)
	}
	f.advance("crm", a.ID) // backward: ignored
	if got, _ := f.verifyNext("crm", later, 10); !slices.Equal(got, idsOf(e, g)) {
		t.Fatalf("the cursor moved back: %v", got)
	}
	if got, cur := f.verifyNext("erp", cut, 10); !slices.Equal(got, idsOf(x)) || cur != x.ID {
		t.Fatalf("erp page %v cursor %d", got, cur)
	}
	if got, cur := f.verifyNext("nowhere", cut, 10); len(got) != 0 || cur != 0 {
		t.Fatalf("unknown destination: %v cursor %d", got, cur)
	}
}

// A mismatch sends a done effect to a person, once.
func testMismatch(t *testing.T, o Opener) {
	f := newOutc(t, o)
	es := f.seed("crm", "crm")
	done, approved := es[0], es[1]
	f.into(done.ID, t0, store.EffectDone, time.Time{})
	t1 := t0.Add(time.Hour)
	mismatch := func(id int64, reason string) (bool, error) {
		return f.s.EffectMismatch(f.ctx, &store.EffectMismatchParams{EffectID: id, Actor: "verifier", Reason: reason, Now: t1})
	}
	if ok, err := mismatch(done.ID, "crm has no deal for the episode"); !ok || err != nil {
		t.Fatalf("mismatch: %v %v", ok, err)
	}
	g := f.get(done.ID)
	if g.State != store.EffectNeedsReconciliation || g.ErrorClass != store.ClassUnknown || g.Reason != "crm has no deal for the episode" ||
		!g.NextAttemptAt.IsZero() || !g.UpdatedAt.Equal(t1) || g.SuggestedRepair == "" {
		t.Fatalf("after mismatch: %+v", g)
	}
	// Unscheduled: it waits for a person.
	cs := f.claimAt(t1.Add(48 * time.Hour))
	if slices.Contains(ids(cs), done.ID) {
		t.Fatal("a mismatched effect was claimed")
	}
	for _, c := range cs {
		f.releaseC(c, t1, time.Time{})
	}
	rows := f.audit("reconciliation_mismatch")
	if len(rows) != 1 || rows[0].Actor != "verifier" || !strings.Contains(rows[0].Detail, "crm has no deal") ||
		!strings.Contains(rows[0].Detail, done.EpisodeKey) {
		t.Fatalf("mismatch audit = %+v", rows)
	}
	if ok, err := mismatch(done.ID, "still missing"); ok || err != nil {
		t.Fatalf("second mismatch: %v %v, want false, nil", ok, err)
	}
	if ok, err := mismatch(approved.ID, "not done"); ok || err != nil {
		t.Fatalf("mismatch of an approved effect: %v %v, want false, nil", ok, err)
	}
	if g := f.get(approved.ID); g.State != store.EffectApproved {
		t.Fatalf("approved effect moved to %s", g.State)
	}
	if n := len(f.audit("reconciliation_mismatch")); n != 1 {
		t.Fatalf("%d mismatch audit rows, want 1", n)
	}
	if _, err := mismatch(1<<40, "gone"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("mismatch of a missing effect: %v, want ErrNotFound", err)
	}
	if _, err := mismatch(approved.ID, " "); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("mismatch without a reason: %v, want ErrInvalidArgument", err)
	}
	if g, err := f.operate(done.ID, store.OperateResolve, "the deal was there under another id", t1); err != nil || g.State != store.EffectResolved {
		t.Fatalf("resolve after mismatch: %+v %v", g, err)
	}
}

// Escalators and operators racing each other still escalate each missed
// deadline once and compensate each effect once.
func testOutcomesConcurrent(t *testing.T, o Opener) {
	f := newOutc(t, o)
	dests := make([]string, 12)
	for i := range dests {
		dests[i] = "crm"
	}
	es := f.seed(dests...)
	for _, e := range es[1:] {
		f.deadline(e.ID, t0.Add(time.Hour), "dead")
	}
	f.into(es[0].ID, t0, store.EffectDone, time.Time{})
	t2 := t0.Add(2 * time.Hour)

	const n = 4
	var wg sync.WaitGroup
	escalated := make([][]*store.Effect, n)
	compensated := make([]error, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			escalated[i], errs[i] = f.s.EffectDeadlineEscalate(f.ctx, &store.EffectDeadlineEscalateParams{Now: t2, Actor: "deadlines", Limit: 100})
			_, compensated[i] = f.compensate(es[0].ID, "refund", `{}`, t2)
		}()
	}
	wg.Wait()
	seen := map[int64]int{}
	ok := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("escalation %d: %v", i, errs[i])
		}
		for _, e := range escalated[i] {
			seen[e.ID]++
		}
		switch {
		case compensated[i] == nil:
			ok++
		case !errors.Is(compensated[i], store.ErrConflict):
			t.Fatalf("concurrent compensation: %v, want ErrConflict", compensated[i])
		}
	}
	for _, e := range es[1:] {
		if seen[e.ID] != 1 {
			t.Errorf("effect %d escalated %d times", e.ID, seen[e.ID])
		}
		if g := f.get(e.ID); g.State != store.EffectDead {
			t.Errorf("effect %d is %s after its deadline", e.ID, g.State)
		}
	}
	if got := len(f.audit("deadline_missed")); got != len(es)-1 {
		t.Errorf("%d deadline_missed rows for %d effects", got, len(es)-1)
	}
	if ok != 1 || len(f.audit("effect_compensation_approved")) != 1 {
		t.Errorf("%d compensations succeeded, want 1", ok)
	}
}
