package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// retentionDay is the unit of the retention cases' cutoffs.
const retentionDay = 24 * time.Hour

// prunePass runs batches until both scans are done and returns the
// totals and the number of batches, failing on any batch over the limit.
func (f *pipe) prunePass(p store.RetentionPruneParams) (store.RetentionPruneResult, int) {
	f.t.Helper()
	var total store.RetentionPruneResult
	batches := 0
	p.AfterEffectID, p.AfterEventPK, p.AfterAuditID = 0, 0, 0
	efDone, evDone, auDone := false, false, false
	for !efDone || !evDone || !auDone {
		batches++
		if batches > 1000 {
			f.t.Fatal("pruning pass does not end")
		}
		r, err := f.s.RetentionPrune(f.ctx, &p)
		if err != nil {
			f.t.Fatalf("RetentionPrune: %v", err)
		}
		if r.Busy {
			f.t.Fatal("RetentionPrune busy with no other process pruning")
		}
		if r.Events > int64(p.Batch()) || r.Audit > int64(p.Batch()) || r.Effects > int64(p.Batch()) {
			f.t.Fatalf("batch of %d deleted %d effects, %d events and %d audit rows", p.Batch(), r.Effects, r.Events, r.Audit)
		}
		total.Events += r.Events
		total.Deliveries += r.Deliveries
		total.Work += r.Work
		total.LoopVisits += r.LoopVisits
		total.Audit += r.Audit
		total.Effects += r.Effects
		total.Attempts += r.Attempts
		if !efDone {
			p.AfterEffectID = r.NextEffectID
		}
		if !evDone {
			p.AfterEventPK = r.NextEventPK
		}
		if !auDone {
			p.AfterAuditID = r.NextAuditID
		}
		efDone, evDone, auDone = efDone || r.EffectsDone, evDone || r.EventsDone, auDone || r.AuditDone
	}
	return total, batches
}

func (f *pipe) eventIDs(source string) []string {
	f.t.Helper()
	var ids []string
	for _, e := range events(f.t, f.s, &store.EventListParams{Source: source, Limit: 1000}) {
		ids = append(ids, e.EventID)
	}
	slices.Sort(ids)
	return ids
}

// testRetentionPrune plants events past their retention next to events
// that something still needs, and proves that exactly the unneeded ones
// go, with their deliveries, work rows, loop visits and audit rows, in
// batches no larger than asked, and that a second pass deletes nothing.
func testRetentionPrune(t *testing.T, o Opener) {
	f := newPipe(t, o)
	old := t0 // every planted event is received around t0
	billing := func(d *store.DeliveryInput) { d.Source = "billing" }

	// Deletable: an unrouted event delivered twice.
	gone1 := f.event("gone_unrouted")
	f.event("gone_unrouted")
	f.route(old, to(gone1))
	// Deletable: an applied event with no effect whose entity has since
	// applied a newer one; it recorded a loop visit.
	gone2 := f.event("gone_applied", caused("cause-1", 1))
	keepApplied := f.event("keep_applied")
	f.route(old, to(gone2, rt("out", "x", "1")), to(keepApplied, rt("out", "x", "2")))
	ap := rev(1, `{"n":1}`)
	ap.CausationID, ap.Hop, ap.MaxHops = "cause-1", 1, 5
	if r := f.step("out", "x", old, ap); r.Disposition != store.DispositionApplied {
		t.Fatalf("apply gone_applied: %+v", r)
	}
	if r := f.step("out", "x", old, rev(2, `{"n":2}`)); r.Disposition != store.DispositionApplied {
		t.Fatalf("apply keep_applied: %+v", r)
	}
	// Kept: pending work (routed, not processed).
	keepPending := f.event("keep_pending")
	f.route(old, to(keepPending, rt("out", "p", "1")))
	// Kept: the source of an effect that is not finished (a finished one
	// would go first, leaving a tombstone: testRetentionEffects).
	keepEffect := f.event("keep_effect")
	f.route(old, to(keepEffect, rt("out", "e", "1")))
	if r := f.step("out", "e", old, rev(1, `{"n":1}`, eff("out:e:r1:push", "push"))); r.EffectsInserted != 1 {
		t.Fatalf("apply keep_effect: %+v", r)
	}
	// Kept: a second event of the effect's entity, applied and newer,
	// so keep_effect is no longer the applied event: the effect alone
	// keeps it.
	keepE2 := f.event("keep_e2")
	f.route(old, to(keepE2, rt("out", "e", "2")))
	f.step("out", "e", old, rev(2, `{"n":2}`))
	// Kept: not routed yet.
	f.event("keep_accepted")
	// Kept: dead-lettered, waiting for a person.
	keepDead := f.event("keep_dead")
	f.route(old, &store.RouteDecision{EventPK: keepDead, Routes: []store.Route{{Flow: "out", Entity: "d", OrderKey: "1", Failed: "entity expression failed"}}})
	// Kept: a source with a longer retention, same age.
	b1 := f.event("keep_billing", billing)
	f.route(old, to(b1))
	// Kept: inside the retention.
	fresh := f.event("keep_fresh", func(d *store.DeliveryInput) { d.ReceivedAt = old.Add(40 * retentionDay) })
	f.route(old.Add(40*retentionDay), to(fresh))

	// Audit rows: one about a deleted event, one about the effect's
	// event (kept while the effect is not done), one of no source (the
	// default cutoff), one fresh.
	for _, a := range []store.AuditInsertParams{
		{At: old, Actor: "test", Action: "note", Source: "crm", EventID: "gone_unrouted"},
		{At: old, Actor: "test", Action: "note", Source: "crm", EventID: "keep_effect"},
		{At: old, Actor: "operator:ann", Action: "note"},
		{At: old.Add(40 * retentionDay), Actor: "test", Action: "note", Source: "crm", EventID: "keep_fresh"},
	} {
		if _, err := f.s.AuditInsert(f.ctx, &a); err != nil {
			t.Fatalf("AuditInsert: %v", err)
		}
	}
	auditBefore := len(f.audit(""))

	now := old.Add(45 * retentionDay)
	params := store.RetentionPruneParams{
		Now: now,
		Cutoffs: map[string]time.Time{
			"crm":     now.Add(-30 * retentionDay),
			"billing": now.Add(-60 * retentionDay),
		},
		DefaultCutoff: now.Add(-30 * retentionDay),
		BatchSize:     2,
	}
	got, batches := f.prunePass(params)

	wantCRM := []string{"keep_accepted", "keep_applied", "keep_dead", "keep_e2", "keep_effect", "keep_fresh", "keep_pending"}
	if ids := f.eventIDs("crm"); !slices.Equal(ids, wantCRM) {
		t.Errorf("crm events after the pass = %v, want %v", ids, wantCRM)
	}
	if ids := f.eventIDs("billing"); !slices.Equal(ids, []string{"keep_billing"}) {
		t.Errorf("billing events after the pass = %v", ids)
	}
	if got.Events != 2 || got.Deliveries != 3 || got.Work != 1 || got.LoopVisits != 1 {
		t.Errorf("deleted %+v, want 2 events, 3 deliveries, 1 work row, 1 loop visit", got)
	}
	if batches < 5 {
		t.Errorf("pass took %d batches of 2 over 11 events, want at least 5", batches)
	}
	ds, err := f.s.DeliveryList(f.ctx, &store.DeliveryListParams{Source: "crm", EventID: "gone_unrouted", Limit: 10})
	if err != nil || len(ds) != 0 {
		t.Errorf("deliveries of a deleted event: %d, %v", len(ds), err)
	}
	// What the kept rows need still works: the pending work is there and
	// the effect's event still shows on the effect.
	if ws := f.pending("out", "p"); len(ws) != 1 || ws[0].Event.EventID != "keep_pending" {
		t.Errorf("pending work after the pass = %+v", ws)
	}
	if es := f.effects(&store.EffectListParams{Flow: "out", Entity: "e"}); len(es) != 1 || es[0].SourceEventID != "keep_effect" {
		t.Errorf("effect after the pass = %+v", es)
	}
	if pr := f.projection("out", "x"); pr == nil || pr.AppliedEventPK != keepApplied {
		t.Errorf("projection after the pass = %+v", pr)
	}

	// Audit: every old row goes but those about keep_effect (its effect
	// is approved) and those about still-unfinished events.
	var kept []string
	for _, a := range f.audit("") {
		if a.At.Before(params.Cutoffs["crm"]) {
			kept = append(kept, a.EventID)
		}
	}
	for _, id := range kept {
		if !slices.Contains([]string{"keep_effect", "keep_pending", "keep_dead", "keep_accepted", "keep_billing"}, id) {
			t.Errorf("old audit row about %q kept", id)
		}
	}
	if !slices.Contains(kept, "keep_effect") {
		t.Error("audit rows of the approved effect's event were deleted")
	}
	if int64(auditBefore)-int64(len(f.audit(""))) != got.Audit || got.Audit < 3 {
		t.Errorf("audit: %d before, %d after, %d reported deleted", auditBefore, len(f.audit("")), got.Audit)
	}

	// A replay of the deleted events is impossible; a resend of one
	// within the retention of nobody is a new event. A second pass finds
	// nothing to do.
	again, _ := f.prunePass(params)
	if again.Deleted() != 0 {
		t.Errorf("second pass deleted %+v", again)
	}
}

// testRetentionNothingConfigured: no cutoff keeps everything and ends at
// once.
func testRetentionNothingConfigured(t *testing.T, o Opener) {
	f := newPipe(t, o)
	pk := f.event("e1")
	f.route(t0, to(pk))
	r, err := f.s.RetentionPrune(f.ctx, &store.RetentionPruneParams{Now: t0.Add(100 * retentionDay)})
	if err != nil {
		t.Fatalf("RetentionPrune: %v", err)
	}
	if r.Deleted() != 0 || !r.Done() {
		t.Errorf("result %+v, want nothing deleted and done", r)
	}
	if ids := f.eventIDs("crm"); len(ids) != 1 {
		t.Errorf("events = %v", ids)
	}
}
