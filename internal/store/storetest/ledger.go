package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// led is one ledger test's store with effects made through the pipeline.
type led struct {
	*pipe
	l store.Ledger
	n int // events made so far, for unique ids
}

func newLed(t *testing.T, o Opener) *led {
	f := newPipe(t, o)
	return &led{pipe: f, l: f.s}
}

// seed creates one approved effect per destination, each on its own
// entity of flow "out", in id order.
func (f *led) seed(dests ...string) []*store.Effect {
	f.t.Helper()
	var ids []int64
	for _, d := range dests {
		f.n++
		id := fmt.Sprintf("led_%03d", f.n)
		pk := f.event(id)
		f.route(t0, to(pk, rt("out", id, "1")))
		e := eff("out:"+id+":r1:push", "push")
		e.Destination = d
		if r := f.step("out", id, t0, rev(1, `{"n":1}`, e)); r.EffectsInserted != 1 {
			f.t.Fatalf("seed %s: %+v", id, r)
		}
		got := f.effects(&store.EffectListParams{Flow: "out", Entity: id})
		ids = append(ids, got[0].ID)
	}
	out := make([]*store.Effect, len(ids))
	for i, id := range ids {
		out[i] = f.get(id)
	}
	return out
}

func (f *led) get(id int64) *store.Effect {
	f.t.Helper()
	e, err := f.l.EffectGet(f.ctx, id)
	if err != nil {
		f.t.Fatalf("EffectGet %d: %v", id, err)
	}
	if e == nil {
		f.t.Fatalf("EffectGet %d: absent", id)
	}
	return e
}

func (f *led) claimP(p store.EffectClaimParams) []*store.ClaimedEffect {
	f.t.Helper()
	if p.Owner == "" {
		p.Owner = "d1"
	}
	if p.LeaseFor == 0 {
		p.LeaseFor = time.Minute
	}
	cs, err := f.l.EffectClaim(f.ctx, &p)
	if err != nil {
		f.t.Fatalf("EffectClaim: %v", err)
	}
	return cs
}

func (f *led) claimAt(at time.Time) []*store.ClaimedEffect {
	f.t.Helper()
	return f.claimP(store.EffectClaimParams{Now: at, Limit: 1000, MaxRedrives: 3})
}

// claimOne claims every due effect at `at`, keeps the one with id and
// releases the others (due again at once).
func (f *led) claimOne(id int64, at time.Time) *store.ClaimedEffect {
	f.t.Helper()
	var mine *store.ClaimedEffect
	for _, c := range f.claimAt(at) {
		if c.ID == id {
			mine = c
			continue
		}
		f.releaseC(c, at, time.Time{})
	}
	if mine == nil {
		f.t.Fatalf("effect %d not claimable at %v", id, at)
	}
	return mine
}

func (f *led) releaseC(c *store.ClaimedEffect, at, notBefore time.Time) {
	f.t.Helper()
	if err := f.l.EffectRelease(f.ctx, &store.EffectReleaseParams{EffectID: c.ID, Token: c.Token, Now: at, NotBefore: notBefore}); err != nil {
		f.t.Fatalf("EffectRelease %d: %v", c.ID, err)
	}
}

// settle settles a claim with AddAttempt and no attempt row unless given.
func (f *led) settle(c *store.ClaimedEffect, at time.Time, state store.EffectState, next time.Time, mods ...func(*store.EffectSettleParams)) {
	f.t.Helper()
	p := &store.EffectSettleParams{EffectID: c.ID, Token: c.Token, Now: at, Actor: "delivery", State: state,
		NextAttemptAt: next, AddAttempt: true}
	if state != store.EffectDone && state != store.EffectAcknowledged {
		p.Class, p.Reason = store.ClassTransient, "503 from destination"
	}
	for _, m := range mods {
		m(p)
	}
	if err := f.l.EffectSettle(f.ctx, p); err != nil {
		f.t.Fatalf("EffectSettle %d -> %s: %v", c.ID, state, err)
	}
}

// into puts effect id into state (claimed at `at` and settled).
func (f *led) into(id int64, at time.Time, state store.EffectState, next time.Time) {
	f.t.Helper()
	f.settle(f.claimOne(id, at), at, state, next)
}

func (f *led) operate(id int64, action, note string, at time.Time) (*store.Effect, error) {
	return f.l.EffectOperate(f.ctx, &store.EffectOperateParams{EffectID: id, Action: action, Actor: "operator:alice",
		Owner: "bob", Note: note, Now: at})
}

func ids(cs []*store.ClaimedEffect) []int64 {
	var out []int64
	for _, c := range cs {
		out = append(out, c.ID)
	}
	slices.Sort(out)
	return out
}

func idsOf(es ...*store.Effect) []int64 {
	var out []int64
	for _, e := range es {
		out = append(out, e.ID)
	}
	slices.Sort(out)
	return out
}

// Every due kind is claimed, every other effect is left alone.
func testLedgerClaimDueKinds(t *testing.T, o Opener) {
	f := newLed(t, o)
	es := f.seed("crm", "crm", "crm", "crm", "crm", "crm", "crm", "crm", "crm", "crm", "slow")
	approved, retryDue, retryLater, reconDue, reconUnsched, deadDue, deadUnsched, done, resolved, expired, live :=
		es[0], es[1], es[2], es[3], es[4], es[5], es[6], es[7], es[8], es[9], es[10]
	t1 := t0.Add(10 * time.Minute)
	f.into(retryDue.ID, t0, store.EffectRetryWait, t1.Add(-time.Second))
	f.into(retryLater.ID, t0, store.EffectRetryWait, t1.Add(time.Second))
	f.into(reconDue.ID, t0, store.EffectNeedsReconciliation, t1)
	f.into(reconUnsched.ID, t0, store.EffectNeedsReconciliation, time.Time{})
	f.into(deadDue.ID, t0, store.EffectDead, t1.Add(-time.Minute))
	f.into(deadUnsched.ID, t0, store.EffectDead, time.Time{})
	f.into(done.ID, t0, store.EffectDone, time.Time{})
	f.into(resolved.ID, t0, store.EffectDead, time.Time{})
	if _, err := f.operate(resolved.ID, store.OperateResolve, "fixed by hand in the CRM", t0); err != nil {
		t.Fatalf("resolve: %v", err)
	}
	// expired: claimed at t0 for a minute and never settled.
	f.claimOne(expired.ID, t0)
	// live: claimed just before t1 for an hour.
	if cs := f.claimP(store.EffectClaimParams{Now: t1.Add(-time.Minute), LeaseFor: time.Hour, Limit: 10, Destinations: []string{"slow"}}); len(cs) != 1 || cs[0].ID != live.ID {
		t.Fatalf("claim of slow = %v", ids(cs))
	}
	// A superseded effect: a newer revision of approved's entity supersedes
	// it and asks for a new one (which is due).
	f.route(t0, to(f.event("led_sup"), rt("out", approved.Entity, "2")))
	e2 := eff("out:"+approved.Entity+":r2:push", "push")
	if r := f.step("out", approved.Entity, t0, rev(2, `{"n":2}`, e2)); r.Superseded != 1 || r.EffectsInserted != 1 {
		t.Fatalf("supersede: %+v", r)
	}
	sup := f.get(approved.ID)
	if sup.State != store.EffectSuperseded {
		t.Fatalf("effect %d is %s, want superseded", sup.ID, sup.State)
	}
	fresh := f.effects(&store.EffectListParams{Entity: approved.Entity, State: store.EffectApproved})
	if len(fresh) != 1 {
		t.Fatalf("%d approved effects for %s, want the new one", len(fresh), approved.Entity)
	}

	before := map[int64]*store.Effect{}
	for _, e := range f.effects(&store.EffectListParams{}) {
		before[e.ID] = e
	}
	cs := f.claimP(store.EffectClaimParams{Owner: "d2", Now: t1, LeaseFor: time.Minute, Limit: 100, MaxRedrives: 3})
	want := idsOf(fresh[0], retryDue, reconDue, deadDue, expired)
	if got := ids(cs); !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want %v", got, want)
	}
	for _, c := range cs {
		prior := before[c.ID]
		if c.State != prior.State {
			t.Fatalf("claim of %d says state %s, want the state before the claim %s", c.ID, c.State, prior.State)
		}
		if !strings.HasPrefix(c.Token, "d2:") || len(c.Token) <= len("d2:") || !c.Until.Equal(t1.Add(time.Minute)) {
			t.Fatalf("claim of %d: token %q until %v", c.ID, c.Token, c.Until)
		}
		wantResumed := prior.State == store.EffectSubmitting || prior.State == store.EffectNeedsReconciliation
		if c.Resumed != wantResumed || c.Redrive != (prior.State == store.EffectDead) {
			t.Fatalf("claim of %d from %s: resumed %v redrive %v", c.ID, prior.State, c.Resumed, c.Redrive)
		}
		if c.EpisodeKey != prior.EpisodeKey || c.Source != "crm" || c.SourceEventID == "" || c.Destination != prior.Destination ||
			!bytes.Equal(c.Request, prior.Request) {
			t.Fatalf("claim of %d lacks fields: %+v", c.ID, c.Effect)
		}
		if g := f.get(c.ID); g.State != store.EffectSubmitting || !g.UpdatedAt.Equal(t1) {
			t.Fatalf("effect %d after claim: %s updated %v", c.ID, g.State, g.UpdatedAt)
		}
	}
	for id, e := range before {
		if slices.Contains(want, id) {
			continue
		}
		if g := f.get(id); g.State != e.State || !g.UpdatedAt.Equal(e.UpdatedAt) {
			t.Fatalf("unclaimed effect %d changed: %s -> %s", id, e.State, g.State)
		}
	}
	if rows := f.audit("effect_redrive"); len(rows) != 1 || !strings.Contains(rows[0].Detail, deadDue.EpisodeKey) || rows[0].Actor != "d2" {
		t.Fatalf("effect_redrive audit = %+v", rows)
	}
	if rows := f.audit("effect_resumed"); len(rows) != 2 {
		t.Fatalf("%d effect_resumed audit rows, want 2", len(rows))
	}
	// Nothing else is due, not even the claims just made.
	if cs := f.claimAt(t1); len(cs) != 0 {
		t.Fatalf("second claim got %v", ids(cs))
	}
}

// Oldest due first: by next attempt time, then id; Limit bounds a claim.
func testLedgerClaimOrder(t *testing.T, o Opener) {
	f := newLed(t, o)
	es := f.seed("crm", "crm", "crm", "crm")
	f.into(es[0].ID, t0, store.EffectRetryWait, t0.Add(3*time.Minute))
	f.into(es[1].ID, t0, store.EffectRetryWait, t0.Add(2*time.Minute))
	// es[2] and es[3] stay approved with nothing scheduled: due first.
	var got []int64
	for range 5 {
		cs := f.claimP(store.EffectClaimParams{Now: t0.Add(time.Hour), Limit: 1})
		if len(cs) > 1 {
			t.Fatalf("Limit 1 claimed %d", len(cs))
		}
		for _, c := range cs {
			got = append(got, c.ID)
		}
	}
	if want := []int64{es[2].ID, es[3].ID, es[1].ID, es[0].ID}; !slices.Equal(got, want) {
		t.Fatalf("claim order %v, want %v", got, want)
	}

	// A limit that is not a power of two bounds the claim as well: a
	// store may round the limit it gives its database up, and must still
	// stop at the caller's.
	f = newLed(t, o)
	es = f.seed("crm", "crm", "crm", "crm", "crm")
	if cs := f.claimP(store.EffectClaimParams{Now: t0.Add(time.Hour), Limit: 3}); !slices.Equal(ids(cs), idsOf(es[0], es[1], es[2])) {
		t.Fatalf("Limit 3 of 5 due claimed %v, want the oldest three %v", ids(cs), idsOf(es[0], es[1], es[2]))
	}

	// One claim of all four returns them in the same order, and each
	// call in flight is next due when its lease ends: the claim moves it
	// out of the due effects that later claims read through.
	f = newLed(t, o)
	es = f.seed("crm", "crm", "crm", "crm")
	f.into(es[0].ID, t0, store.EffectRetryWait, t0.Add(3*time.Minute))
	f.into(es[1].ID, t0, store.EffectRetryWait, t0.Add(2*time.Minute))
	at := t0.Add(time.Hour)
	cs := f.claimP(store.EffectClaimParams{Now: at, Limit: 10})
	got = nil
	for _, c := range cs {
		got = append(got, c.ID)
	}
	if want := []int64{es[2].ID, es[3].ID, es[1].ID, es[0].ID}; !slices.Equal(got, want) {
		t.Fatalf("one claim's order %v, want %v", got, want)
	}
	for _, c := range cs {
		if g := f.get(c.ID); !g.NextAttemptAt.Equal(at.Add(time.Minute)) || !c.NextAttemptAt.Equal(g.NextAttemptAt) {
			t.Fatalf("claimed effect %d: next attempt %v stored, %v returned, want the lease's end %v",
				c.ID, g.NextAttemptAt, c.NextAttemptAt, at.Add(time.Minute))
		}
	}
}

func testLedgerClaimDestinations(t *testing.T, o Opener) {
	f := newLed(t, o)
	es := f.seed("crm", "erp", "mail", "erp")
	cs := f.claimP(store.EffectClaimParams{Now: t0, Limit: 100, Destinations: []string{"erp", "mail"}})
	if got, want := ids(cs), idsOf(es[1], es[2], es[3]); !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want %v", got, want)
	}
	for _, c := range cs {
		if c.Destination == "crm" {
			t.Fatalf("destination filter leaked %d", c.ID)
		}
	}
	if cs := f.claimP(store.EffectClaimParams{Now: t0, Limit: 100, Destinations: []string{"nowhere"}}); len(cs) != 0 {
		t.Fatalf("unknown destination claimed %v", ids(cs))
	}
	if cs := f.claimAt(t0); len(cs) != 1 || cs[0].ID != es[0].ID {
		t.Fatalf("unfiltered claim got %v, want only the crm effect", ids(cs))
	}
}

// A claim group claims for each of its params what EffectClaim would,
// one after the other: each its own destination's due effects, oldest
// first, up to its own limit, answered in order; an abandoned call it
// finds is resumed and counted as a lone claim would.
func testLedgerClaimGroup(t *testing.T, o Opener) {
	f := newLed(t, o)
	es := f.seed("crm", "erp", "crm", "mail", "erp", "crm")
	group := func(at time.Time, ps ...store.EffectClaimParams) [][]*store.ClaimedEffect {
		t.Helper()
		in := make([]*store.EffectClaimParams, len(ps))
		for i := range ps {
			p := ps[i]
			p.Owner, p.Now, p.LeaseFor, p.MaxRedrives = "d1", at, time.Minute, 3
			in[i] = &p
		}
		got, err := f.l.EffectClaimGroup(f.ctx, in)
		if err != nil {
			t.Fatalf("EffectClaimGroup: %v", err)
		}
		if len(got) != len(ps) {
			t.Fatalf("%d answers to %d claims", len(got), len(ps))
		}
		return got
	}
	dest := func(d string, limit int) store.EffectClaimParams {
		return store.EffectClaimParams{Destinations: []string{d}, Limit: limit}
	}
	got := group(t0, dest("crm", 2), dest("erp", 5), dest("nowhere", 3))
	if !slices.Equal(ids(got[0]), idsOf(es[0], es[2])) || !slices.Equal(ids(got[1]), idsOf(es[1], es[4])) || len(got[2]) != 0 {
		t.Fatalf("claimed %v, %v and %v; want %v, %v and none", ids(got[0]), ids(got[1]), ids(got[2]),
			idsOf(es[0], es[2]), idsOf(es[1], es[4]))
	}
	for _, cs := range got {
		for _, c := range cs {
			if g := f.get(c.ID); c.Token == "" || c.State != store.EffectApproved || c.Resumed || g.State != store.EffectSubmitting {
				t.Fatalf("claimed effect %d: token %q, claimed from %s (resumed %v), stored %s; want a token, from approved, now submitting",
					c.ID, c.Token, c.State, c.Resumed, g.State)
			}
		}
	}
	// What the first group left: the third crm effect; erp has none due.
	got = group(t0, dest("erp", 5), dest("crm", 5))
	if len(got[0]) != 0 || !slices.Equal(ids(got[1]), idsOf(es[5])) {
		t.Fatalf("second group claimed %v and %v, want none and %v", ids(got[0]), ids(got[1]), idsOf(es[5]))
	}
	// The mail effect, claimed alone and abandoned, is resumed by a group
	// once its lease has run out, beside the calls claimed with it.
	mail := f.claimP(store.EffectClaimParams{Now: t0, Limit: 5, Destinations: []string{"mail"}})
	if !slices.Equal(ids(mail), idsOf(es[3])) {
		t.Fatalf("mail claim got %v, want %v", ids(mail), idsOf(es[3]))
	}
	later := t0.Add(2 * time.Minute)
	got = group(later, dest("crm", 1), dest("mail", 1))
	if len(got[0]) != 1 || len(got[1]) != 1 || got[1][0].ID != es[3].ID || !got[1][0].Resumed {
		t.Fatalf("third group claimed %v and %v; want one abandoned crm call and the mail effect resumed", ids(got[0]), ids(got[1]))
	}
	if g := f.get(es[3].ID); g.Attempts != 1 || g.ErrorClass != store.ClassUnknown {
		t.Fatalf("resumed mail effect: %d attempts, class %q; want its abandoned call counted as unknown_outcome", g.Attempts, g.ErrorClass)
	}
}

// Concurrent claimers, on one handle and (where the driver offers one) a
// second handle, never lease one effect twice.
func testLedgerClaimConcurrent(t *testing.T, o Opener) {
	f := newLed(t, o)
	const n = 24
	var all []string
	for range n {
		all = append(all, "crm")
	}
	es := f.seed(all...)
	handles := []store.Ledger{f.l}
	if o.Reopen != nil {
		handles = append(handles, o.Reopen(t, f.s))
	}
	const workers = 6
	var wg sync.WaitGroup
	got := make([][]int64, workers)
	errs := make([]error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := handles[w%len(handles)]
			for range n {
				cs, err := l.EffectClaim(f.ctx, &store.EffectClaimParams{Owner: fmt.Sprint("w", w), Now: t0, LeaseFor: time.Minute, Limit: 3})
				if err != nil {
					errs[w] = err
					return
				}
				for _, c := range cs {
					got[w] = append(got[w], c.ID)
				}
			}
		}()
	}
	wg.Wait()
	seen := map[int64]int{}
	for w := range workers {
		if errs[w] != nil {
			t.Fatalf("claimer %d: %v", w, errs[w])
		}
		for _, id := range got[w] {
			seen[id]++
		}
	}
	for _, e := range es {
		if seen[e.ID] != 1 {
			t.Fatalf("effect %d claimed %d times, want exactly once", e.ID, seen[e.ID])
		}
	}
	if len(seen) != n {
		t.Fatalf("claimed %d distinct effects, want %d", len(seen), n)
	}
}

// A worker whose lease expired and was taken over writes nothing.
func testLedgerFencing(t *testing.T, o Opener) {
	f := newLed(t, o)
	e := f.seed("crm")[0]
	a := f.claimOne(e.ID, t0)
	if a.Resumed || a.State != store.EffectApproved {
		t.Fatalf("first claim: resumed %v state %s", a.Resumed, a.State)
	}
	// Still held: nobody else gets it.
	if cs := f.claimAt(t0.Add(30 * time.Second)); len(cs) != 0 {
		t.Fatalf("live lease re-claimed: %v", ids(cs))
	}
	t1 := t0.Add(2 * time.Minute)
	b := f.claimOne(e.ID, t1)
	if !b.Resumed || b.State != store.EffectSubmitting || b.Token == a.Token || b.ErrorClass != store.ClassUnknown {
		t.Fatalf("take-over: resumed %v state %s class %q", b.Resumed, b.State, b.ErrorClass)
	}
	if rows := f.audit("effect_resumed"); len(rows) != 1 || rows[0].Entity != e.Entity || rows[0].Source != "crm" {
		t.Fatalf("effect_resumed audit = %+v", rows)
	}
	stale := &store.EffectSettleParams{EffectID: e.ID, Token: a.Token, Now: t1, Actor: "delivery", State: store.EffectDone,
		AddAttempt: true, DestinationRef: "deal-1", Attempt: &store.Attempt{Status: 200, StartedAt: t0}}
	if err := f.l.EffectSettle(f.ctx, stale); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("settle with the stale token: %v, want ErrLeaseLost", err)
	}
	// Even the current token is fenced once its lease has run out.
	late := *stale
	late.Token, late.Now = b.Token, t1.Add(time.Minute)
	if err := f.l.EffectSettle(f.ctx, &late); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("settle after the lease ran out: %v, want ErrLeaseLost", err)
	}
	// The take-over counted the abandoned call (one attempt); the fenced
	// settles added nothing to it.
	if g := f.get(e.ID); g.State != store.EffectSubmitting || g.Attempts != 1 || g.DestinationRef != "" {
		t.Fatalf("fenced settle wrote: %+v", g)
	}
	if as, err := f.l.AttemptList(f.ctx, e.ID); err != nil || len(as) != 1 || as[0].Class != store.ClassUnknown {
		t.Fatalf("attempts after fenced settles: %v %v, want only the abandoned call", as, err)
	}
	if rows := f.audit("effect_done"); len(rows) != 0 {
		t.Fatalf("fenced settle wrote audit: %+v", rows)
	}
	// A stale release is ignored too.
	f.releaseC(a, t1, time.Time{})
	if g := f.get(e.ID); g.State != store.EffectSubmitting {
		t.Fatalf("stale release moved the effect to %s", g.State)
	}
	ok := *stale
	ok.Token = b.Token
	if err := f.l.EffectSettle(f.ctx, &ok); err != nil {
		t.Fatalf("settle with the current token: %v", err)
	}
	if g := f.get(e.ID); g.State != store.EffectDone || g.DestinationRef != "deal-1" || g.Attempts != 2 || g.ErrorClass != "" {
		t.Fatalf("after settle: %+v", g)
	}
	// Settled: the token is spent.
	if err := f.l.EffectSettle(f.ctx, &ok); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("second settle: %v, want ErrLeaseLost", err)
	}
}

// Scheduled re-drives restart attempts, count themselves and stop at
// MaxRedrives.
func testLedgerRedrive(t *testing.T, o Opener) {
	f := newLed(t, o)
	e := f.seed("crm")[0]
	c := f.claimOne(e.ID, t0)
	f.settle(c, t0, store.EffectRetryWait, t0)
	c = f.claimOne(e.ID, t0)
	f.settle(c, t0, store.EffectDead, t0.Add(15*time.Minute))
	if g := f.get(e.ID); g.Attempts != 2 || g.Redrives != 0 || !g.NextAttemptAt.Equal(t0.Add(15*time.Minute)) {
		t.Fatalf("dead: %+v", g)
	}
	at := t0
	for i, wait := range []time.Duration{15 * time.Minute, time.Hour, 6 * time.Hour} {
		// Not before its time.
		if cs := f.claimP(store.EffectClaimParams{Now: at.Add(wait - time.Second), Limit: 10, MaxRedrives: 3}); len(cs) != 0 {
			t.Fatalf("re-drive %d claimed early", i+1)
		}
		// Never with re-drives disabled.
		if cs := f.claimP(store.EffectClaimParams{Now: at.Add(wait), Limit: 10, MaxRedrives: 0}); len(cs) != 0 {
			t.Fatalf("re-drive %d claimed with MaxRedrives 0", i+1)
		}
		at = at.Add(wait)
		cs := f.claimP(store.EffectClaimParams{Now: at, Limit: 10, MaxRedrives: 3})
		if len(cs) != 1 || !cs[0].Redrive || cs[0].Resumed || cs[0].State != store.EffectDead || cs[0].Attempts != 0 || cs[0].Redrives != i+1 {
			t.Fatalf("re-drive %d: %+v", i+1, cs)
		}
		if g := f.get(e.ID); g.Attempts != 0 || g.Redrives != i+1 || g.State != store.EffectSubmitting {
			t.Fatalf("after re-drive %d: %+v", i+1, g)
		}
		next := time.Time{}
		if i < 2 {
			next = at.Add([]time.Duration{time.Hour, 6 * time.Hour}[i])
		} else {
			next = at.Add(24 * time.Hour) // scheduled, but no re-drive is left
		}
		f.settle(cs[0], at, store.EffectDead, next)
		if g := f.get(e.ID); g.Attempts != 1 {
			t.Fatalf("attempts after re-drive %d = %d, want 1", i+1, g.Attempts)
		}
	}
	if rows := f.audit("effect_redrive"); len(rows) != 3 {
		t.Fatalf("%d effect_redrive rows, want 3", len(rows))
	}
	// Three re-drives spent: the schedule is over.
	if cs := f.claimP(store.EffectClaimParams{Now: at.Add(48 * time.Hour), Limit: 10, MaxRedrives: 3}); len(cs) != 0 {
		t.Fatalf("re-drive past MaxRedrives: %+v", cs)
	}
	// A larger bound would allow one more: the bound is what stopped it.
	if cs := f.claimP(store.EffectClaimParams{Now: at.Add(48 * time.Hour), Limit: 10, MaxRedrives: 4}); len(cs) != 1 || cs[0].Redrives != 4 {
		t.Fatalf("MaxRedrives 4: %+v", cs)
	}
}

// Settling writes the call's evidence, the effect's new state and an
// audit row.
func testLedgerSettleEvidence(t *testing.T, o Opener) {
	f := newLed(t, o)
	es := f.seed("crm", "crm")
	e := es[0]
	c := f.claimOne(e.ID, t0)
	started := t0.Add(time.Second)
	a1 := &store.Attempt{StartedAt: started, Duration: 1234 * time.Millisecond, Status: 429, Class: store.ClassQuota,
		Error: "rate limited", Response: `{"error":"slow down"}`, RetryAfter: "60", RetryAfterUnit: "ms", Wait: 60 * time.Millisecond}
	next := t0.Add(2 * time.Second)
	f.settle(c, t0.Add(3*time.Second), store.EffectRetryWait, next, func(p *store.EffectSettleParams) {
		p.Attempt, p.Class, p.Reason, p.LastResponse = a1, store.ClassQuota, "429 with Retry-After 60 (ms)", `{"error":"slow down"}`
		p.SuggestedRepair = "raise the quota"
	})
	g := f.get(e.ID)
	if g.State != store.EffectRetryWait || g.Attempts != 1 || !g.NextAttemptAt.Equal(next) || g.ErrorClass != store.ClassQuota ||
		g.Reason != "429 with Retry-After 60 (ms)" || g.LastResponse != `{"error":"slow down"}` || g.SuggestedRepair != "raise the quota" ||
		!g.UpdatedAt.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("after retry_wait settle: %+v", g)
	}
	as, err := f.l.AttemptList(f.ctx, e.ID)
	if err != nil || len(as) != 1 {
		t.Fatalf("AttemptList: %v %v", as, err)
	}
	want := *a1
	want.ID, want.EffectID, want.Number = as[0].ID, e.ID, 1
	if !reflect.DeepEqual(*as[0], want) {
		t.Fatalf("attempt = %+v\nwant      %+v", *as[0], want)
	}
	rows := f.audit("effect_retry_wait")
	if len(rows) != 1 || rows[0].Actor != "delivery" || rows[0].Source != "crm" || rows[0].EventID != e.SourceEventID ||
		rows[0].Entity != e.Entity || !rows[0].At.Equal(t0.Add(3*time.Second)) ||
		!strings.Contains(rows[0].Detail, e.EpisodeKey) || !strings.Contains(rows[0].Detail, "quota") ||
		!strings.Contains(rows[0].Detail, "Retry-After 60") {
		t.Fatalf("effect_retry_wait audit = %+v", rows)
	}
	// The second call succeeds; the failure fields describe the last call.
	c = f.claimOne(e.ID, next)
	if c.State != store.EffectRetryWait || c.Attempts != 1 || c.Resumed {
		t.Fatalf("retry claim: %+v", c)
	}
	f.settle(c, next, store.EffectAcknowledged, time.Time{}, func(p *store.EffectSettleParams) {
		p.Attempt, p.DestinationRef = &store.Attempt{StartedAt: next, Status: 201}, "deal-77"
	})
	g = f.get(e.ID)
	if g.State != store.EffectAcknowledged || g.Attempts != 2 || !g.NextAttemptAt.IsZero() || g.ErrorClass != "" || g.Reason != "" ||
		g.LastResponse != "" || g.DestinationRef != "deal-77" {
		t.Fatalf("after acknowledged settle: %+v", g)
	}
	if as, _ := f.l.AttemptList(f.ctx, e.ID); len(as) != 2 || as[1].Number != 2 || as[1].Status != 201 || as[0].ID >= as[1].ID {
		t.Fatalf("attempts after second call: %+v", as)
	}
	if rows := f.audit("effect_acknowledged"); len(rows) != 1 {
		t.Fatalf("%d effect_acknowledged rows", len(rows))
	}

	// Reconciliation without a call, then a lookup that does not count
	// against the retry policy.
	r := es[1]
	c = f.claimOne(r.ID, t0)
	f.settle(c, t0, store.EffectNeedsReconciliation, t0.Add(time.Minute), func(p *store.EffectSettleParams) {
		p.AddAttempt, p.Class, p.Reason, p.DestinationRef = false, store.ClassUnknown, "timeout after send", "ref-1"
	})
	if g := f.get(r.ID); g.Attempts != 0 || g.DestinationRef != "ref-1" || g.ErrorClass != store.ClassUnknown {
		t.Fatalf("after reconciliation settle: %+v", g)
	}
	if as, _ := f.l.AttemptList(f.ctx, r.ID); len(as) != 0 {
		t.Fatalf("settle without a call wrote %d attempts", len(as))
	}
	c = f.claimOne(r.ID, t0.Add(time.Minute))
	if !c.Resumed || c.State != store.EffectNeedsReconciliation {
		t.Fatalf("reconciliation claim: %+v", c)
	}
	f.settle(c, t0.Add(time.Minute), store.EffectDone, time.Time{}, func(p *store.EffectSettleParams) {
		p.AddAttempt, p.Attempt = false, &store.Attempt{StartedAt: t0.Add(time.Minute), Status: 200, Reconcile: true}
	})
	g = f.get(r.ID)
	if g.State != store.EffectDone || g.Attempts != 0 || g.DestinationRef != "ref-1" {
		t.Fatalf("after reconcile: %+v", g)
	}
	if as, _ := f.l.AttemptList(f.ctx, r.ID); len(as) != 1 || as[0].Number != 1 || !as[0].Reconcile {
		t.Fatalf("reconcile attempt: %+v", as)
	}

	// Only the settle states are accepted; a refused settle writes nothing.
	e3 := f.seed("crm")[0]
	c = f.claimOne(e3.ID, t0)
	// (superseded is a settle state: a call made again after a newer
	// version was applied would reach the destination after it.)
	for _, bad := range []store.EffectState{store.EffectApproved, store.EffectSubmitting, store.EffectResolved, "bogus"} {
		err := f.l.EffectSettle(f.ctx, &store.EffectSettleParams{EffectID: e3.ID, Token: c.Token, Now: t0, Actor: "delivery",
			State: bad, AddAttempt: true, Attempt: &store.Attempt{Status: 200}})
		if err == nil || errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("settle to %q: %v, want an error", bad, err)
		}
	}
	if g := f.get(e3.ID); g.State != store.EffectSubmitting || g.Attempts != 0 {
		t.Fatalf("refused settle wrote: %+v", g)
	}
	if as, _ := f.l.AttemptList(f.ctx, e3.ID); len(as) != 0 {
		t.Fatalf("refused settle wrote %d attempts", len(as))
	}
	f.settle(c, t0, store.EffectDone, time.Time{})

	// A claim settled superseded, without a call: final, nothing due.
	e4 := f.seed("crm")[0]
	c4 := f.claimOne(e4.ID, t0)
	if err := f.l.EffectSettle(f.ctx, &store.EffectSettleParams{EffectID: e4.ID, Token: c4.Token, Now: t0, Actor: "delivery",
		State: store.EffectSuperseded, Reason: "superseded by crm:e:r2:x"}); err != nil {
		t.Fatalf("settle to superseded: %v", err)
	}
	if g := f.get(e4.ID); g.State != store.EffectSuperseded || g.Reason != "superseded by crm:e:r2:x" || !g.NextAttemptAt.IsZero() || g.Attempts != 0 {
		t.Fatalf("settled superseded: %+v", g)
	}
	for _, c := range f.claimAt(t0.Add(time.Hour)) {
		if c.ID == e4.ID {
			t.Fatalf("a superseded effect was claimed: %+v", c)
		}
	}
}

// A claim given back without a call returns to approved when nothing has
// happened to the effect yet, to retry_wait otherwise, and to
// needs_reconciliation when the outcome of an earlier call is unknown.
func testLedgerRelease(t *testing.T, o Opener) {
	f := newLed(t, o)
	es := f.seed("crm", "crm", "crm")
	fresh, tried, lost := es[0], es[1], es[2]
	f.into(tried.ID, t0, store.EffectRetryWait, t0)
	f.claimOne(lost.ID, t0) // the worker dies during the call

	t1 := t0.Add(5 * time.Minute)
	later := t1.Add(30 * time.Second)
	for _, c := range f.claimAt(t1) {
		f.releaseC(c, t1, later)
	}
	for _, tc := range []struct {
		e     *store.Effect
		state store.EffectState
	}{{fresh, store.EffectApproved}, {tried, store.EffectRetryWait}, {lost, store.EffectNeedsReconciliation}} {
		g := f.get(tc.e.ID)
		if g.State != tc.state || !g.NextAttemptAt.Equal(later) || !g.UpdatedAt.Equal(t1) {
			t.Fatalf("effect %d released: %s next %v, want %s next %v", g.ID, g.State, g.NextAttemptAt, tc.state, later)
		}
	}
	if g := f.get(tried.ID); g.Attempts != 1 {
		t.Fatalf("release changed attempts: %d", g.Attempts)
	}
	// Every released effect waits for NotBefore, the approved one too:
	// otherwise a worker whose token bucket is empty claims and releases
	// the same effects in a loop.
	if cs := f.claimAt(later.Add(-time.Microsecond)); len(cs) != 0 {
		t.Fatalf("claim before NotBefore got %v, want nothing", ids(cs))
	}
	cs := f.claimAt(later)
	if !slices.Equal(ids(cs), idsOf(fresh, tried, lost)) {
		t.Fatalf("claim at NotBefore got %v", ids(cs))
	}
	for _, c := range cs {
		if c.ID == lost.ID && (!c.Resumed || c.State != store.EffectNeedsReconciliation) {
			t.Fatalf("released unknown outcome came back as %s resumed %v", c.State, c.Resumed)
		}
	}
}

func testLedgerOperate(t *testing.T, o Opener) {
	f := newLed(t, o)
	es := f.seed("crm", "crm", "crm", "crm", "crm", "slow")
	dead, recon, waiting, approved, done, submitting := es[0], es[1], es[2], es[3], es[4], es[5]
	f.into(dead.ID, t0, store.EffectDead, time.Time{})
	f.into(recon.ID, t0, store.EffectNeedsReconciliation, time.Time{})
	f.into(waiting.ID, t0, store.EffectRetryWait, t0.Add(2*time.Hour))
	f.into(done.ID, t0, store.EffectDone, time.Time{})
	if cs := f.claimP(store.EffectClaimParams{Now: t0, LeaseFor: 24 * time.Hour, Limit: 10, Destinations: []string{"slow"}}); len(cs) != 1 {
		t.Fatalf("claim of the slow effect: %v", ids(cs))
	}
	t1 := t0.Add(time.Hour)

	refused := func(id int64, action, note string) {
		t.Helper()
		before := f.get(id)
		if _, err := f.operate(id, action, note, t1); !errors.Is(err, store.ErrInvalidTransition) {
			t.Fatalf("%s on %s: %v, want ErrInvalidTransition", action, before.State, err)
		}
		if g := f.get(id); !reflect.DeepEqual(g, before) {
			t.Fatalf("refused %s changed the effect: %+v", action, g)
		}
	}
	refused(approved.ID, store.OperateRetry, "")
	refused(waiting.ID, store.OperateRetry, "")
	refused(done.ID, store.OperateRetry, "")
	refused(done.ID, store.OperateResolve, "closed")
	refused(done.ID, store.OperateAssign, "")
	for _, a := range []string{store.OperateRetry, store.OperateResolve, store.OperateAssign} {
		refused(submitting.ID, a, "the call may be in flight")
	}
	// The caller's mistakes are told apart from store failures by their
	// sentinels: the admin API answers them 400 and 404, not 503.
	if _, err := f.operate(dead.ID, "delete", "", t1); !errors.Is(err, store.ErrInvalidArgument) || errors.Is(err, store.ErrInvalidTransition) {
		t.Fatalf("unknown action: %v, want ErrInvalidArgument", err)
	}
	if _, err := f.operate(dead.ID, store.OperateResolve, "fixed\x00", t1); !errors.Is(err, store.ErrInvalidArgument) || !strings.Contains(err.Error(), "note: holds a NUL") {
		t.Fatalf("resolve with a NUL in the note: %v, want ErrInvalidArgument naming the note", err)
	}
	if _, err := f.operate(dead.ID, store.OperateResolve, "  ", t1); !errors.Is(err, store.ErrInvalidArgument) || !strings.Contains(err.Error(), "note") {
		t.Fatalf("resolve without a note: %v, want ErrInvalidArgument naming the note", err)
	}
	if g := f.get(dead.ID); g.State != store.EffectDead {
		t.Fatalf("refused resolve moved the effect to %s", g.State)
	}
	if _, err := f.operate(1<<40, store.OperateRetry, "", t1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("operate on a missing effect: %v, want ErrNotFound", err)
	}
	if rows := f.audit(""); slices.ContainsFunc(rows, func(a *store.AuditEntry) bool { return a.Actor == "operator:alice" }) {
		t.Fatal("refused actions wrote audit rows")
	}

	// assign from the exception queue.
	g, err := f.operate(dead.ID, store.OperateAssign, "", t1)
	if err != nil || g.Owner != "bob" || g.State != store.EffectDead || !g.UpdatedAt.Equal(t1) {
		t.Fatalf("assign: %+v %v", g, err)
	}
	// retry: back to approved, attempts restarted, the last failure kept.
	g, err = f.operate(dead.ID, store.OperateRetry, "destination fixed", t1)
	if err != nil || g.State != store.EffectApproved || g.Attempts != 0 || !g.NextAttemptAt.IsZero() || g.Note != "destination fixed" ||
		g.ErrorClass != store.ClassTransient || g.Reason != "503 from destination" || g.Owner != "bob" {
		t.Fatalf("retry from dead: %+v %v", g, err)
	}
	if g, err = f.operate(recon.ID, store.OperateRetry, "checked: not created", t1); err != nil || g.State != store.EffectApproved {
		t.Fatalf("retry from needs_reconciliation: %+v %v", g, err)
	}
	if cs := f.claimAt(t1); !slices.Equal(ids(cs), idsOf(dead, recon, approved)) {
		t.Fatalf("after retries claimed %v", ids(cs))
	} else {
		for _, c := range cs {
			f.releaseC(c, t1, time.Time{})
		}
	}
	// resolve from retry_wait and approved, with a note.
	for _, e := range []*store.Effect{waiting, approved} {
		g, err := f.operate(e.ID, store.OperateResolve, "done by hand", t1)
		if err != nil || g.State != store.EffectResolved || g.Note != "done by hand" || !g.NextAttemptAt.IsZero() {
			t.Fatalf("resolve %d: %+v %v", e.ID, g, err)
		}
	}
	refused(approved.ID, store.OperateResolve, "again")
	refused(approved.ID, store.OperateAssign, "")

	if rows := f.audit("effect_assigned"); len(rows) != 1 || rows[0].Actor != "operator:alice" || !strings.Contains(rows[0].Detail, "bob") {
		t.Fatalf("effect_assigned audit = %+v", rows)
	}
	if rows := f.audit("effect_retry"); len(rows) != 2 || !strings.Contains(rows[0].Detail, "destination fixed") ||
		rows[0].Entity != dead.Entity || rows[0].EventID != dead.SourceEventID {
		t.Fatalf("effect_retry audit = %+v", rows)
	}
	if rows := f.audit("effect_resolved"); len(rows) != 2 || !strings.Contains(rows[1].Detail, "done by hand") {
		t.Fatalf("effect_resolved audit = %+v", rows)
	}
}

// EffectGet and EffectList show every field of the ledger row alike.
func testLedgerGetAndList(t *testing.T, o Opener) {
	f := newLed(t, o)
	if g, err := f.l.EffectGet(f.ctx, 1<<40); g != nil || err != nil {
		t.Fatalf("EffectGet of a missing id: %+v %v", g, err)
	}
	if as, err := f.l.AttemptList(f.ctx, 1<<40); len(as) != 0 || err != nil {
		t.Fatalf("AttemptList of a missing id: %+v %v", as, err)
	}
	es := f.seed("crm", "erp")
	next := t0.Add(time.Hour)
	f.settle(f.claimOne(es[0].ID, t0), t0, store.EffectDead, next, func(p *store.EffectSettleParams) {
		p.Class, p.Reason, p.SuggestedRepair, p.DestinationRef, p.LastResponse =
			store.ClassPermanent, "400 validation", "fix the mapping", "deal-9", `{"errors":["bad"]}`
	})
	if _, err := f.operate(es[0].ID, store.OperateAssign, "looking", t0); err != nil {
		t.Fatal(err)
	}
	list := f.effects(&store.EffectListParams{})
	if len(list) != 2 {
		t.Fatalf("%d effects", len(list))
	}
	g := list[0]
	if g.State != store.EffectDead || !g.NextAttemptAt.Equal(next) || g.Redrives != 0 || g.ErrorClass != store.ClassPermanent ||
		g.Reason != "400 validation" || g.SuggestedRepair != "fix the mapping" || g.DestinationRef != "deal-9" ||
		g.LastResponse != `{"errors":["bad"]}` || g.Owner != "bob" || g.Note != "looking" || g.Attempts != 1 {
		t.Fatalf("EffectList row = %+v", g)
	}
	if !list[1].NextAttemptAt.IsZero() || list[1].ErrorClass != "" || list[1].State != store.EffectApproved || list[1].Destination != "erp" {
		t.Fatalf("approved row = %+v", list[1])
	}
	for _, e := range list {
		if got := f.get(e.ID); !reflect.DeepEqual(got, e) {
			t.Fatalf("EffectGet and EffectList differ:\n%+v\n%+v", got, e)
		}
	}
}

// testLedgerAbandonedCallCounted: a worker that claimed an effect and died
// may have made its call. The next claim counts that call: attempts+1 and
// an attempts row, unknown outcome, started when the dead worker claimed
// it, so attempts equal the calls the destination may have seen.
func testLedgerAbandonedCallCounted(t *testing.T, o Opener) {
	f := newLed(t, o)
	e := f.seed("crm")[0]
	// One real call first: a 503, then due again at t0+1m.
	c := f.claimOne(e.ID, t0)
	f.settle(c, t0.Add(time.Second), store.EffectRetryWait, t0.Add(time.Minute), func(p *store.EffectSettleParams) {
		p.Attempt = &store.Attempt{StartedAt: t0, Status: 503, Class: store.ClassTransient, Error: "HTTP 503"}
		p.Class = store.ClassTransient
	})
	// Claimed at t0+1m for a minute; the worker dies during the call.
	died := t0.Add(time.Minute)
	if cs := f.claimP(store.EffectClaimParams{Owner: "dying", Now: died, LeaseFor: time.Minute, Limit: 1}); len(cs) != 1 || cs[0].ID != e.ID {
		t.Fatalf("claim = %v", ids(cs))
	}
	resumed := f.claimP(store.EffectClaimParams{Owner: "next", Now: died.Add(2 * time.Minute), LeaseFor: time.Minute, Limit: 1})
	if len(resumed) != 1 || !resumed[0].Resumed || resumed[0].Attempts != 2 {
		t.Fatalf("resumed claim = %+v, want the effect resumed with 2 attempts", resumed)
	}
	as, err := f.l.AttemptList(f.ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 2 {
		t.Fatalf("%d attempts recorded, want 2 (the 503 and the abandoned call)", len(as))
	}
	a := as[1]
	if a.Number != 2 || a.Class != store.ClassUnknown || !strings.HasPrefix(a.Error, store.AbandonedCall) ||
		!a.StartedAt.Equal(died) || a.Duration != time.Minute || a.Status != 0 {
		t.Fatalf("abandoned call recorded as %+v, want number 2, unknown outcome, started %v, lasting the lease", a, died)
	}
	if g := f.get(e.ID); g.Attempts != 2 || g.ErrorClass != store.ClassUnknown {
		t.Fatalf("effect after the resumed claim: attempts %d class %s", g.Attempts, g.ErrorClass)
	}
	// The reconciliation that follows is the third row, numbered 3 when it
	// is a call of its own.
	f.settle(resumed[0], died.Add(2*time.Minute+time.Second), store.EffectDone, time.Time{}, func(p *store.EffectSettleParams) {
		p.Attempt = &store.Attempt{StartedAt: died.Add(2 * time.Minute), Status: 200}
	})
	if as, _ := f.l.AttemptList(f.ctx, e.ID); len(as) != 3 || as[2].Number != 3 {
		t.Fatalf("after the resend: %d attempts (last numbered %d), want 3", len(as), as[len(as)-1].Number)
	}
}

// testLedgerSettleGroup: EffectSettleGroup leaves every effect, attempts
// row and audit row as EffectSettle would, answers a lost or expired
// lease with ErrLeaseLost for that settle alone, and refuses a bad state
// for that settle alone.
func testLedgerSettleGroup(t *testing.T, o Opener) {
	f := newLed(t, o)
	at := t0.Add(5 * time.Second)
	// One settle of each kind; the same list is settled one by one on one
	// set of effects and as a group on another.
	kinds := []func(p *store.EffectSettleParams){
		func(p *store.EffectSettleParams) {
			p.State, p.AddAttempt, p.DestinationRef = store.EffectDone, true, "ref-done"
			p.Attempt = &store.Attempt{StartedAt: t0.Add(time.Second), Duration: 80 * time.Millisecond, Status: 200}
		},
		func(p *store.EffectSettleParams) {
			p.State, p.AddAttempt, p.NextAttemptAt = store.EffectRetryWait, true, t0.Add(time.Hour)
			p.Class, p.Reason, p.SuggestedRepair, p.LastResponse = store.ClassQuota, "429 with Retry-After 60", "raise the quota", `{"error":"slow"}`
			p.Attempt = &store.Attempt{Duration: time.Second, Status: 429, Class: store.ClassQuota, Error: "rate limited",
				Response: `{"error":"slow"}`, RetryAfter: "60", RetryAfterUnit: "seconds", Wait: time.Minute}
		},
		func(p *store.EffectSettleParams) {
			p.State, p.NextAttemptAt, p.Class, p.Reason, p.DestinationRef = store.EffectNeedsReconciliation, t0.Add(time.Minute),
				store.ClassUnknown, "timeout after send", "ref-unknown"
		},
		func(p *store.EffectSettleParams) {
			p.State, p.AddAttempt, p.Token = store.EffectDone, true, "not-the-token"
		},
		func(p *store.EffectSettleParams) { p.State, p.Now = store.EffectDone, t0.Add(2*time.Minute) }, // after the lease
	}
	lost := []bool{false, false, false, true, true}
	params := func(es []*store.Effect) []*store.EffectSettleParams {
		var ps []*store.EffectSettleParams
		for i, e := range es {
			c := f.claimOne(e.ID, t0)
			p := &store.EffectSettleParams{EffectID: c.ID, Token: c.Token, Now: at, Actor: "delivery"}
			kinds[i](p)
			ps = append(ps, p)
		}
		return ps
	}
	alone, grouped := f.seed("crm", "crm", "crm", "crm", "crm"), f.seed("crm", "crm", "crm", "crm", "crm")
	for i, p := range params(alone) {
		if err := f.l.EffectSettle(f.ctx, p); lost[i] != errors.Is(err, store.ErrLeaseLost) || (!lost[i] && err != nil) {
			t.Fatalf("EffectSettle %d: %v", i, err)
		}
	}
	errs := f.l.EffectSettleGroup(f.ctx, params(grouped))
	if len(errs) != len(kinds) {
		t.Fatalf("%d answers for %d settles", len(errs), len(kinds))
	}
	for i, err := range errs {
		if lost[i] != errors.Is(err, store.ErrLeaseLost) || (!lost[i] && err != nil) {
			t.Fatalf("settle %d of the group: %v (lease lost: %v)", i, err, lost[i])
		}
	}
	// What each left behind, with the ids and keys that differ by nature
	// left out.
	trace := func(e *store.Effect) string {
		g := f.get(e.ID)
		s := fmt.Sprintf("%s attempts=%d next=%v class=%s reason=%q repair=%q ref=%q resp=%q updated=%v",
			g.State, g.Attempts, g.NextAttemptAt, g.ErrorClass, g.Reason, g.SuggestedRepair, g.DestinationRef, g.LastResponse, g.UpdatedAt)
		as, err := f.l.AttemptList(f.ctx, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			a.ID, a.EffectID = 0, 0
			s += fmt.Sprintf(" attempt%+v", *a)
		}
		rows, err := f.s.AuditList(f.ctx, &store.AuditListParams{EventID: e.SourceEventID, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if strings.HasPrefix(r.Action, "effect_") {
				s += fmt.Sprintf(" audit[%s %s %s %v]", r.Action, r.Actor, strings.ReplaceAll(r.Detail, e.EpisodeKey, "KEY"), r.At)
			}
		}
		return s
	}
	for i := range kinds {
		a, g := trace(alone[i]), trace(grouped[i])
		if a != g {
			t.Fatalf("settle %d: alone it left\n%s\nin a group\n%s", i, a, g)
		}
		if want := store.EffectSubmitting; lost[i] != strings.HasPrefix(g, string(want)+" ") {
			t.Fatalf("settle %d left %s", i, g)
		}
	}
	// A bad state is refused for its settle alone.
	es := f.seed("crm", "crm")
	ps := params(es[:1])
	ps = append(ps, params(es[1:])...)
	ps[0].State, ps[1].State = "bogus", store.EffectDone
	errs = f.l.EffectSettleGroup(f.ctx, ps)
	if errs[0] == nil || errors.Is(errs[0], store.ErrLeaseLost) || errs[1] != nil {
		t.Fatalf("group with a bad state answered %v", errs)
	}
	if g0, g1 := f.get(es[0].ID), f.get(es[1].ID); g0.State != store.EffectSubmitting || g1.State != store.EffectDone {
		t.Fatalf("after the group with a bad state: %s and %s", g0.State, g1.State)
	}
}

// Attempts are numbered across the effect's whole life: an operator's
// retry and a re-drive restart the count the retry policy reads
// (attempts), never the numbers of the calls, and the first call after
// each restart says what restarted it.
func testAttemptNumbersAcrossRestarts(t *testing.T, o Opener) {
	f := newLed(t, o)
	e := f.seed("crm")[0]
	call := func(p *store.EffectSettleParams) {
		p.Attempt = &store.Attempt{Status: 503, Class: store.ClassTransient}
	}
	f.settle(f.claimOne(e.ID, t0), t0, store.EffectRetryWait, t0, call)
	f.settle(f.claimOne(e.ID, t0), t0, store.EffectDead, time.Time{}, call)
	t1 := t0.Add(time.Minute)
	if _, err := f.operate(e.ID, store.OperateRetry, "fixed the mapping", t1); err != nil {
		t.Fatalf("retry: %v", err)
	}
	f.settle(f.claimOne(e.ID, t1), t1, store.EffectDead, t1.Add(time.Hour), call)
	t2 := t1.Add(time.Hour)
	cs := f.claimP(store.EffectClaimParams{Now: t2, Limit: 10, MaxRedrives: 3})
	if len(cs) != 1 || !cs[0].Redrive {
		t.Fatalf("re-drive: %+v", cs)
	}
	f.settle(cs[0], t2, store.EffectDone, time.Time{}, func(p *store.EffectSettleParams) { p.Attempt = &store.Attempt{Status: 200} })
	atts, err := f.l.AttemptList(f.ctx, e.ID)
	if err != nil {
		t.Fatalf("AttemptList: %v", err)
	}
	var got []string
	for _, a := range atts {
		got = append(got, fmt.Sprintf("#%d %s", a.Number, a.Restart))
	}
	want := []string{"#1 ", "#2 ", "#3 " + store.RestartOperatorRetry, "#4 " + store.RestartRedrive}
	if !slices.Equal(got, want) {
		t.Errorf("attempts %q, want %q", got, want)
	}
	if g := f.get(e.ID); g.Calls != 4 || g.Attempts != 1 || g.Redrives != 1 {
		t.Errorf("effect: %d calls, %d attempts, %d re-drives; want 4 calls, 1 attempt since the re-drive, 1 re-drive", g.Calls, g.Attempts, g.Redrives)
	}
}
