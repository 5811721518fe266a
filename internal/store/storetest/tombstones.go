package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// tombParams prunes what crm (and every other source) received or changed
// more than 30 days before now.
func tombParams(now time.Time, batch int) store.RetentionPruneParams {
	return store.RetentionPruneParams{
		Now:           now,
		Cutoffs:       map[string]time.Time{"crm": now.Add(-30 * retentionDay)},
		DefaultCutoff: now.Add(-30 * retentionDay),
		BatchSize:     batch,
	}
}

func (f *pipe) tombstone(key string) *store.EffectTombstone {
	f.t.Helper()
	tb, err := f.s.EffectTombstoneGet(f.ctx, key)
	if err != nil {
		f.t.Fatalf("EffectTombstoneGet %s: %v", key, err)
	}
	return tb
}

func (f *pipe) effectGone(id int64) bool {
	f.t.Helper()
	e, err := f.s.EffectGet(f.ctx, id)
	if err != nil {
		f.t.Fatalf("EffectGet %d: %v", id, err)
	}
	return e == nil
}

func (f *pipe) keyConflicts() int {
	f.t.Helper()
	return len(f.audit(store.ActionKeyConflict))
}

// testRetentionEffects plants finished effects past their retention next
// to effects something still needs, through the apply and delivery paths,
// and proves that exactly the finished ones go, with their attempts, each
// leaving a tombstone; that their event goes once nothing else holds it;
// and that an apply which comes back to a pruned episode key (a resend
// the inbox no longer recognises, then a state that flips back) creates
// nothing and is told the effect exists, with a key conflict only when
// the request differs.
func testRetentionEffects(t *testing.T, o Opener) {
	f := newOutc(t, o)
	old := t0
	now := old.Add(45 * retentionDay)
	c1 := &store.EffectListParams{Flow: "sync", Entity: "c1"}

	// Pruned: c1's done effect with one attempt. Its event evt_a is no
	// longer the applied one (evt_b is) and its work is settled.
	a, b := f.event("evt_a"), f.event("evt_b")
	f.route(old, to(a, rt("sync", "c1", "1")), to(b, rt("sync", "c1", "2")))
	const key = "sync:c1:aaa:mail"
	if r := f.step("sync", "c1", old, hash("aaa", `{"n":1}`, eff(key, "mail"))); r.EffectsInserted != 1 {
		t.Fatalf("apply evt_a: %+v", r)
	}
	done := f.effects(c1)[0]
	f.settle(f.claimOne(done.ID, old), old, store.EffectDone, time.Time{}, func(p *store.EffectSettleParams) {
		p.Attempt = &store.Attempt{Status: 200, StartedAt: old}
	})
	if at, err := f.s.AttemptList(f.ctx, done.ID); err != nil || len(at) != 1 {
		t.Fatalf("attempts of the done effect: %d, %v", len(at), err)
	}
	if r := f.step("sync", "c1", old, hash("bbb", `{"n":2}`)); r.Disposition != store.DispositionApplied {
		t.Fatalf("apply evt_b: %+v", r)
	}

	// Kept: c2's effect is still approved (not finished).
	k := f.event("evt_k")
	f.route(old, to(k, rt("sync", "c2", "1")))
	f.step("sync", "c2", old, hash("aaa", `{}`, eff("sync:c2:aaa:mail", "mail")))
	pending := f.effects(&store.EffectListParams{Flow: "sync", Entity: "c2"})[0]

	// Kept: c3's done effect, whose compensation is still approved; the
	// compensation is kept too (not finished).
	g := f.event("evt_g")
	f.route(old, to(g, rt("sync", "c3", "1")))
	f.step("sync", "c3", old, hash("aaa", `{}`, eff("sync:c3:aaa:mail", "mail")))
	orig3 := f.effects(&store.EffectListParams{Flow: "sync", Entity: "c3"})[0]
	f.into(orig3.ID, old, store.EffectDone, time.Time{})
	comp3, err := f.compensate(orig3.ID, "refund", `{"undo":3}`, old)
	if err != nil {
		t.Fatalf("compensate c3: %v", err)
	}

	// c4: a done original whose compensation ran and finished long ago,
	// but which an operator resolved yesterday after a mismatch: the
	// compensation goes, the original (changed inside the retention)
	// stays.
	h := f.event("evt_h")
	f.route(old, to(h, rt("sync", "c4", "1")))
	f.step("sync", "c4", old, hash("aaa", `{}`, eff("sync:c4:aaa:mail", "mail")))
	orig4 := f.effects(&store.EffectListParams{Flow: "sync", Entity: "c4"})[0]
	f.into(orig4.ID, old, store.EffectDone, time.Time{})
	comp4, err := f.compensate(orig4.ID, "refund", `{"undo":4}`, old)
	if err != nil {
		t.Fatalf("compensate c4: %v", err)
	}
	f.into(comp4.ID, old, store.EffectDone, time.Time{})
	yesterday := now.Add(-retentionDay)
	if ok, err := f.s.EffectMismatch(f.ctx, &store.EffectMismatchParams{EffectID: orig4.ID, Actor: "verify",
		Reason: "not found at crm", Now: yesterday}); err != nil || !ok {
		t.Fatalf("EffectMismatch: %v %v", ok, err)
	}
	if _, err := f.operate(orig4.ID, store.OperateResolve, "checked by hand", yesterday); err != nil {
		t.Fatalf("resolve c4: %v", err)
	}

	got, _ := f.prunePass(tombParams(now, 2))
	if got.Effects != 2 || got.Attempts != 1 {
		t.Errorf("pass deleted %+v, want 2 effects (c1's and c4's compensation) and 1 attempt", got)
	}
	if !f.effectGone(done.ID) || !f.effectGone(comp4.ID) {
		t.Errorf("pruned effects still there")
	}
	for _, e := range []*store.Effect{pending, orig3, comp3, orig4} {
		if f.effectGone(e.ID) {
			t.Errorf("effect %s (%d) was pruned, want kept", e.EpisodeKey, e.ID)
		}
	}
	if at, err := f.s.AttemptList(f.ctx, done.ID); err != nil || len(at) != 0 {
		t.Errorf("attempts of the pruned effect: %d, %v", len(at), err)
	}
	tb := f.tombstone(key)
	if tb == nil || tb.Flow != "sync" || tb.Entity != "c1" || tb.Effect != "mail" || tb.Destination != "crm" ||
		tb.State != store.EffectDone || !jsonEqual(tb.Request, `{"k":"`+key+`"}`) || !tb.CreatedAt.Equal(old) || !tb.DeletedAt.Equal(now) {
		t.Fatalf("tombstone = %+v", tb)
	}
	if tb := f.tombstone(comp4.EpisodeKey); tb == nil || tb.State != store.EffectDone || !jsonEqual(tb.Request, `{"undo":4}`) {
		t.Errorf("tombstone of the compensation = %+v", tb)
	}
	for _, e := range []*store.Effect{pending, orig3, comp3, orig4} {
		if tb := f.tombstone(e.EpisodeKey); tb != nil {
			t.Errorf("tombstone of a kept effect: %+v", tb)
		}
	}
	// evt_a went with its effect; evt_b is c1's applied event; the
	// others are sources of kept effects or applied events.
	if ids := f.eventIDs("crm"); !slices.Equal(ids, []string{"evt_b", "evt_g", "evt_h", "evt_k"}) {
		t.Errorf("events after the pass = %v", ids)
	}

	// A resend of evt_a, which the inbox no longer knows, is a new event;
	// applying it asks for the pruned key again with the same request:
	// nothing is inserted, the effect counts as existing, no conflict.
	conflicts := f.keyConflicts()
	resent := f.event("evt_a", func(d *store.DeliveryInput) { d.ReceivedAt = now })
	f.route(now, to(resent, rt("sync", "c1", "3")))
	r := f.step("sync", "c1", now, hash("aaa", `{"n":1}`, eff(key, "mail")))
	if r.Disposition != store.DispositionApplied || r.EffectsInserted != 0 || r.EffectsExisting != 1 {
		t.Fatalf("resend of a pruned effect's event: %+v, want applied with the effect existing", r)
	}
	if es := f.effects(c1); len(es) != 0 {
		t.Fatalf("effects of c1 after the resend = %v, want none", effectSummary(es))
	}
	if n := f.keyConflicts(); n != conflicts {
		t.Errorf("key conflicts %d -> %d for an equal request", conflicts, n)
	}
	// The state flips away and back with another request under the same
	// key: still nothing inserted, and now a key conflict, as for a live
	// effect.
	c, d := f.event("evt_c", func(d *store.DeliveryInput) { d.ReceivedAt = now }), f.event("evt_d", func(d *store.DeliveryInput) { d.ReceivedAt = now })
	f.route(now, to(c, rt("sync", "c1", "4")), to(d, rt("sync", "c1", "5")))
	f.step("sync", "c1", now, hash("bbb", `{"n":2}`))
	other := eff(key, "mail")
	other.Request = []byte(`{"k":"another request"}`)
	r = f.step("sync", "c1", now, hash("aaa", `{"n":1}`, other))
	if r.Disposition != store.DispositionApplied || r.EffectsInserted != 0 || r.EffectsExisting != 1 {
		t.Fatalf("flip back with another request: %+v", r)
	}
	if n := f.keyConflicts(); n != conflicts+1 {
		t.Errorf("key conflicts %d -> %d for a different request, want one more", conflicts, n)
	}
	if es := f.effects(c1); len(es) != 0 {
		t.Fatalf("effects of c1 = %v, want none", effectSummary(es))
	}

	// The operator's compensation of c4 ran and was pruned: compensating
	// again is refused, as while it was in the ledger.
	if _, err := f.compensate(orig4.ID, "again", `{"undo":4}`, now); !errors.Is(err, store.ErrConflict) {
		t.Errorf("compensate after the compensation was pruned: %v, want ErrConflict", err)
	}
	if comp := f.effects(&store.EffectListParams{Flow: "sync", Entity: "c4"}); len(comp) != 1 {
		t.Errorf("effects of c4 = %v, want the original only", effectSummary(comp))
	}

	// Once c3's compensation finishes, the pair goes; a second pass at
	// the same time deletes nothing more.
	f.into(comp3.ID, old, store.EffectDone, time.Time{})
	got, _ = f.prunePass(tombParams(now, 200))
	if got.Effects != 2 || !f.effectGone(orig3.ID) || !f.effectGone(comp3.ID) {
		t.Errorf("pass after the compensation finished deleted %+v", got)
	}
	if _, err := f.compensate(orig3.ID, "again", `{}`, now); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("compensate a pruned effect: %v, want ErrNotFound", err)
	}
	if again, _ := f.prunePass(tombParams(now, 200)); again.Effects != 0 || again.Attempts != 0 {
		t.Errorf("third pass deleted %+v", again)
	}
}

// testRetentionEffectStates plants one effect in every state, all past
// every retention, and proves that the sweep deletes exactly those in
// store.PruneEffectStates. Above all it keeps the exception queue: a dead
// effect or one needing reconciliation waits for a person, and deleting it
// would lose the open item and leave a tombstone that blocks its replay.
// The dead effect, after the sweep, is still listed in the queue, still
// has its event, and can be retried and delivered.
func testRetentionEffectStates(t *testing.T, o Opener) {
	f := newLed(t, o)
	old := t0
	es := f.seed("crm", "crm", "crm", "crm", "crm", "crm", "crm", "crm", "crm")
	byState := map[store.EffectState]*store.Effect{}
	for i, st := range []store.EffectState{store.EffectApproved, store.EffectAcknowledged, store.EffectDone,
		store.EffectNeedsReconciliation, store.EffectRetryWait, store.EffectDead, store.EffectResolved,
		store.EffectSuperseded, store.EffectSubmitting} {
		e := es[i]
		byState[st] = e
		switch st {
		case store.EffectApproved:
		case store.EffectRetryWait:
			f.into(e.ID, old, st, old.Add(time.Hour))
		case store.EffectResolved:
			f.into(e.ID, old, store.EffectDead, time.Time{})
			if _, err := f.operate(e.ID, store.OperateResolve, "closed by hand", old); err != nil {
				t.Fatalf("resolve: %v", err)
			}
		case store.EffectSuperseded:
			// A newer version of the entity asks for the same effect.
			pk := f.event(e.Entity + "_r2")
			f.route(old, to(pk, rt("out", e.Entity, "2")))
			if r := f.step("out", e.Entity, old, rev(2, `{"n":2}`, eff("out:"+e.Entity+":r2:push", "push"))); r.Superseded != 1 {
				t.Fatalf("supersede: %+v", r)
			}
		case store.EffectSubmitting:
			f.claimOne(e.ID, old) // the worker died: the effect stays submitting
		default:
			f.into(e.ID, old, st, time.Time{})
		}
		if got := f.get(e.ID).State; got != st {
			t.Fatalf("planted effect %d in %s, got %s", e.ID, st, got)
		}
	}

	// Every retention is long over: a day, a year after the effects last
	// changed.
	now := old.Add(400 * retentionDay)
	got, _ := f.prunePass(store.RetentionPruneParams{Now: now, Cutoffs: map[string]time.Time{"crm": now.Add(-retentionDay)},
		DefaultCutoff: now.Add(-retentionDay), BatchSize: 3})
	if want := int64(len(store.PruneEffectStates())); got.Effects != want {
		t.Errorf("the sweep deleted %d effects, want %d (one in each of %v)", got.Effects, want, store.PruneEffectStates())
	}
	for st, e := range byState {
		prunable := slices.Contains(store.PruneEffectStates(), st)
		if slices.Contains(store.ExceptionStates(), st) && prunable {
			t.Errorf("%s is both in the exception queue and deleted by retention", st)
		}
		if gone := f.effectGone(e.ID); gone != prunable {
			t.Errorf("%s effect %s: deleted = %v, want %v", st, e.EpisodeKey, gone, prunable)
		}
		if tb := f.tombstone(e.EpisodeKey); (tb != nil) != prunable {
			t.Errorf("%s effect %s: tombstone %+v, want one = %v", st, e.EpisodeKey, tb, prunable)
		}
	}

	// The exception queue still holds both open items, and the dead
	// effect's event stays with it.
	dead, recon := byState[store.EffectDead], byState[store.EffectNeedsReconciliation]
	var queue []int64
	for _, e := range f.effects(&store.EffectListParams{States: store.ExceptionStates()}) {
		queue = append(queue, e.ID)
	}
	if want := []int64{recon.ID, dead.ID}; !slices.Equal(queue, want) {
		t.Fatalf("exception queue after the sweep = %v, want %v", queue, want)
	}
	if !slices.Contains(f.eventIDs("crm"), dead.SourceEventID) {
		t.Errorf("the dead effect's event %s was deleted", dead.SourceEventID)
	}
	// An operator retries the dead effect: it is claimed and delivered.
	e, err := f.operate(dead.ID, store.OperateRetry, "", now)
	if err != nil || e.State != store.EffectApproved {
		t.Fatalf("retry the dead effect after the sweep: %+v, %v", e, err)
	}
	f.settle(f.claimOne(dead.ID, now), now, store.EffectDone, time.Time{})
	if e := f.get(dead.ID); e.State != store.EffectDone {
		t.Fatalf("dead effect retried after the sweep ended %s, want done", e.State)
	}
}

// testRetentionPublished: a published message past its retention whose
// deliveries all finished goes whole (its event, its stored body and its
// effects, which leave tombstones); a recent one and one still being
// delivered stay.
func testRetentionPublished(t *testing.T, o Opener) {
	f := newPub(t, o)
	old := t0
	now := old.Add(45 * retentionDay)
	f.put(&store.EndpointPutParams{ID: "ep_1", Spec: spec("https://example.test/hook")})
	f.put(&store.EndpointPutParams{ID: "ep_2", Spec: spec("https://example.test/other")})
	f.publish(msg("msg_old", "key_old", "invoice.paid", old))
	f.publish(msg("msg_pending", "key_pending", "invoice.paid", old))
	f.publish(msg("msg_new", "key_new", "invoice.paid", now.Add(-retentionDay)))
	claimed, err := f.s.EffectClaim(f.ctx, &store.EffectClaimParams{Owner: "d1", Now: old, LeaseFor: time.Minute, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	settled := 0
	for _, c := range claimed {
		p := &store.EffectSettleParams{EffectID: c.ID, Token: c.Token, Now: old, Actor: "delivery", State: store.EffectDone,
			AddAttempt: true, Attempt: &store.Attempt{Status: 204, StartedAt: old}}
		if c.Version == "msg_pending" && c.Entity == "ep_2" {
			// Still failing: retry_wait.
			p.State, p.Class, p.Reason, p.NextAttemptAt = store.EffectRetryWait, store.ClassTransient, "503", now
			p.Attempt.Status = 503
		}
		if err := f.s.EffectSettle(f.ctx, p); err != nil {
			t.Fatalf("settle %s: %v", c.EpisodeKey, err)
		}
		settled++
	}
	if settled != 6 {
		t.Fatalf("settled %d message deliveries, want 6", settled)
	}
	p := &pipe{t: t, s: f.s, ctx: f.ctx}
	got, _ := p.prunePass(tombParams(now, 2))
	// msg_old: 1 event, 1 delivery row, 2 effects with 2 attempts;
	// msg_pending: its finished ep_1 effect goes, its event stays.
	if got.Events != 1 || got.Deliveries != 1 || got.Effects != 3 || got.Attempts != 3 {
		t.Errorf("pass deleted %+v, want 1 event, 1 delivery, 3 effects and 3 attempts", got)
	}
	var ids []string
	for _, m := range f.messages() {
		ids = append(ids, m.EventID)
	}
	if !slices.Equal(ids, []string{"msg_pending", "msg_new"}) {
		t.Errorf("messages after the pass = %v", ids)
	}
	ds, err := f.s.DeliveryList(f.ctx, &store.DeliveryListParams{Source: store.PublishSource, EventID: "msg_old", Limit: 10})
	if err != nil || len(ds) != 0 {
		t.Errorf("deliveries of the pruned message: %d, %v", len(ds), err)
	}
	var left []string
	for _, e := range f.effects() {
		left = append(left, e.EpisodeKey)
	}
	slices.Sort(left)
	want := []string{store.PublishEpisodeKey("msg_new", "ep_1"), store.PublishEpisodeKey("msg_new", "ep_2"),
		store.PublishEpisodeKey("msg_pending", "ep_2")}
	if !slices.Equal(left, want) {
		t.Errorf("message effects after the pass = %v, want %v", left, want)
	}
	for _, k := range []string{store.PublishEpisodeKey("msg_old", "ep_1"), store.PublishEpisodeKey("msg_old", "ep_2"),
		store.PublishEpisodeKey("msg_pending", "ep_1")} {
		if tb := p.tombstone(k); tb == nil || tb.Flow != store.PublishFlow || tb.State != store.EffectDone {
			t.Errorf("tombstone of %s = %+v", k, tb)
		}
	}
}

// testRetentionRacesApply runs, many times over, a pruning batch of an
// old done effect beside a flow apply (from another handle: another
// process on PostgreSQL) that asks for the same episode key again. Either
// order is fine, but never both: after the two, the key is either a live
// effect (no tombstone) or a tombstone (no effect), and never an effect
// inserted again next to its tombstone.
func testRetentionRacesApply(t *testing.T, o Opener) {
	f := newPipe(t, o)
	other := f.s
	if o.Reopen != nil {
		other = o.Reopen(t, f.s)
	}
	const rounds = 40
	old := t0
	now := old.Add(45 * retentionDay)
	led := &led{pipe: f, l: f.s}
	type round struct {
		entity, key string
		effectID    int64
	}
	rs := make([]round, rounds)
	for i := range rs {
		r := &rs[i]
		r.entity = fmt.Sprintf("r%02d", i)
		r.key = "sync:" + r.entity + ":aaa:mail"
		a, b := f.event("a_"+r.entity), f.event("b_"+r.entity)
		f.route(old, to(a, rt("sync", r.entity, "1")), to(b, rt("sync", r.entity, "2")))
		f.step("sync", r.entity, old, hash("aaa", `{}`, eff(r.key, "mail")))
		r.effectID = f.effects(&store.EffectListParams{Flow: "sync", Entity: r.entity})[0].ID
		led.into(r.effectID, old, store.EffectDone, time.Time{})
		f.step("sync", r.entity, old, hash("bbb", `{}`))
		c := f.event("c_"+r.entity, func(d *store.DeliveryInput) { d.ReceivedAt = now })
		f.route(now, to(c, rt("sync", r.entity, "3")))
	}
	ctx := context.Background()
	for i, r := range rs {
		l := f.lease("sync", r.entity, now)
		ws := f.pending("sync", r.entity)
		ap := hash("aaa", `{}`, eff(r.key, "mail"))
		ap.Lease, ap.Now, ap.WorkID, ap.EventPK, ap.Actor = l, now, ws[0].ID, ws[0].Event.PK, "worker"
		p := tombParams(now, 1)
		p.AfterEffectID = r.effectID - 1
		var wg sync.WaitGroup
		var applyErr, pruneErr error
		var applied *store.FlowApplyResult
		var pruned *store.RetentionPruneResult
		wg.Add(2)
		go func() {
			defer wg.Done()
			applied, applyErr = other.FlowApply(ctx, &ap)
		}()
		go func() {
			defer wg.Done()
			pruned, pruneErr = f.s.RetentionPrune(ctx, &p)
		}()
		wg.Wait()
		if applyErr != nil || pruneErr != nil {
			t.Fatalf("round %d: apply %v, prune %v", i, applyErr, pruneErr)
		}
		if applied.EffectsInserted != 0 || applied.EffectsExisting != 1 {
			t.Fatalf("round %d: apply %+v, want the effect existing", i, applied)
		}
		f.release(l, now, time.Time{})
		es := f.effects(&store.EffectListParams{Flow: "sync", Entity: r.entity})
		tb := f.tombstone(r.key)
		switch {
		case len(es) > 1:
			t.Fatalf("round %d: %d effects under one key", i, len(es))
		case tb != nil && len(es) != 0:
			t.Fatalf("round %d: effect %v inserted again next to its tombstone", i, effectSummary(es))
		case tb == nil && (len(es) != 1 || es[0].ID != r.effectID):
			t.Fatalf("round %d: no tombstone and effects %v, want the original", i, effectSummary(es))
		case tb == nil && pruned.Effects != 0, tb != nil && pruned.Effects != 1:
			t.Fatalf("round %d: prune %+v disagrees with the tombstone %+v", i, pruned, tb)
		}
	}
	// What a batch left (an entity being applied is skipped) goes in the
	// next pass, and every key ends as a tombstone, never twice.
	f.prunePass(tombParams(now, 200))
	for _, r := range rs {
		if es := f.effects(&store.EffectListParams{Flow: "sync", Entity: r.entity}); len(es) != 0 || f.tombstone(r.key) == nil {
			t.Errorf("%s after a full pass: effects %v, tombstone %v", r.key, effectSummary(es), f.tombstone(r.key))
		}
	}
}
