package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// testSettleSeenAsFenced: a settle that carries what its claim saw
// (EffectSettleParams.Claimed) leaves the ledger exactly as the fenced
// settle of the same call does, field for field: the effect, its attempts
// rows and its audit rows. Each case brings two effects through the same
// history on destinations of their own, and settles one with its claim
// and one without; on a driver that settles by the claim
// (store.SeenSettleDriver) these are its two ways, elsewhere both are the
// fenced one.
func testSettleSeenAsFenced(t *testing.T, o Opener) {
	f := newLed(t, o)
	claim := func(dest string, at time.Time, redrives int) *store.ClaimedEffect {
		t.Helper()
		cs := f.claimP(store.EffectClaimParams{Now: at, Limit: 10, Destinations: []string{dest}, MaxRedrives: redrives})
		if len(cs) != 1 {
			t.Fatalf("claim on %s at %v: %d effects, want 1", dest, at, len(cs))
		}
		return cs[0]
	}
	call := func(status int) *store.Attempt {
		return &store.Attempt{Status: status, StartedAt: t0, Duration: 20 * time.Millisecond, Response: fmt.Sprintf(`{"status":%d}`, status)}
	}
	for _, c := range []struct {
		name string
		// history brings the effect on dest to the claim to settle.
		history func(dest string) *store.ClaimedEffect
		settle  store.EffectSettleParams
	}{
		{"a call done", func(d string) *store.ClaimedEffect { return claim(d, t0, 3) },
			store.EffectSettleParams{State: store.EffectDone, AddAttempt: true, Attempt: call(200), DestinationRef: "deal-1",
				LastResponse: `{"id":"deal-1"}`}},
		{"a retry scheduled", func(d string) *store.ClaimedEffect { return claim(d, t0, 3) },
			store.EffectSettleParams{State: store.EffectRetryWait, AddAttempt: true, Attempt: call(503), NextAttemptAt: t0.Add(time.Minute),
				Class: store.ClassTransient, Reason: "503 from destination"}},
		{"dead, taking the configured owner", func(d string) *store.ClaimedEffect { return claim(d, t0, 3) },
			store.EffectSettleParams{State: store.EffectDead, AddAttempt: true, Attempt: call(422), Class: store.ClassPermanent,
				Reason: "422 from destination", SuggestedRepair: "fix the mapping", Owner: "team-crm"}},
		{"reconciled without a call", func(d string) *store.ClaimedEffect { return claim(d, t0, 3) },
			store.EffectSettleParams{State: store.EffectNeedsReconciliation, Class: store.ClassUnknown, Reason: "no answer",
				NextAttemptAt: t0.Add(time.Hour), Owner: "team-crm"}},
		{"a call resumed after its lease ran out", func(d string) *store.ClaimedEffect {
			claim(d, t0, 3) // its holder dies during the call
			return claim(d, t0.Add(2*time.Minute), 3)
		}, store.EffectSettleParams{State: store.EffectDone, AddAttempt: true, Attempt: call(200)}},
		{"a re-drive", func(d string) *store.ClaimedEffect {
			died := claim(d, t0, 3)
			if err := f.l.EffectSettle(f.ctx, &store.EffectSettleParams{EffectID: died.ID, Token: died.Token, Now: t0, Actor: "delivery",
				State: store.EffectDead, AddAttempt: true, Attempt: call(500), NextAttemptAt: t0.Add(15 * time.Minute),
				Class: store.ClassTransient, Reason: "500 from destination"}); err != nil {
				t.Fatal(err)
			}
			return claim(d, t0.Add(15*time.Minute), 3)
		}, store.EffectSettleParams{State: store.EffectDone, AddAttempt: true, Attempt: call(200)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tag := strings.ReplaceAll(c.name, " ", "-")
			es := f.seed(tag+"-seen", tag+"-fenced")
			var at time.Time
			for i, e := range es {
				cl := c.history(e.Destination)
				p := c.settle
				if p.Attempt != nil {
					a := *p.Attempt
					p.Attempt = &a
				}
				p.EffectID, p.Token, p.Actor = cl.ID, cl.Token, "delivery"
				p.Now = cl.Until.Add(-30 * time.Second)
				at = p.Now
				if i == 0 {
					p.Claimed = cl.Fenced()
				}
				if err := f.l.EffectSettle(f.ctx, &p); err != nil {
					t.Fatalf("settle %s: %v", e.Destination, err)
				}
			}
			if g := f.get(es[0].ID); g.State != c.settle.State || !g.UpdatedAt.Equal(at) {
				t.Fatalf("settled by its claim: %+v, want %s at %v", g, c.settle.State, at)
			}
			seen, fenced := f.settled(es[0]), f.settled(es[1])
			if seen != fenced {
				t.Fatalf("settled by its claim:\n%s\nsettled fenced:\n%s", seen, fenced)
			}
		})
	}
}

// settled is what the ledger holds of e (the effect, its attempts rows and
// the audit rows of its event), as JSON with what differs between two
// effects made alike (ids, names) written as placeholders.
func (f *led) settled(e *store.Effect) string {
	f.t.Helper()
	g := f.get(e.ID)
	g.ID = 0
	as, err := f.l.AttemptList(f.ctx, e.ID)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, a := range as {
		a.ID, a.EffectID = 0, 0
	}
	rows, err := f.s.AuditList(f.ctx, &store.AuditListParams{EventID: e.SourceEventID, Limit: 100})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, r := range rows {
		r.ID = 0
	}
	b, err := json.MarshalIndent(struct {
		Effect   *store.Effect
		Attempts []*store.Attempt
		Audit    []*store.AuditEntry
	}{g, as, rows}, "", " ")
	if err != nil {
		f.t.Fatal(err)
	}
	return strings.NewReplacer(e.Entity, "ENTITY", e.Destination, "DEST").Replace(string(b))
}

// testSettleSeenGuards: a settle by its claim writes nothing when the
// effect no longer stands as the claim left it, and the fenced way then
// settles it as it stands: by the counts it has now under the token that
// holds it, and not at all once its lease was taken over or ran out.
// (The PostgreSQL driver's tests change each guarded column alone.)
func testSettleSeenGuards(t *testing.T, o Opener) {
	f := newLed(t, o)
	es := f.seed("crm", "erp")
	old := f.claimOne(es[0].ID, t0)
	taken := f.claimOne(es[0].ID, t0.Add(2*time.Minute))
	p := &store.EffectSettleParams{EffectID: old.ID, Token: old.Token, Now: t0.Add(2 * time.Minute), Actor: "delivery",
		State: store.EffectDone, AddAttempt: true, Attempt: &store.Attempt{Status: 200}, Claimed: old.Fenced()}
	// The old holder's view with the new holder's token: the view no
	// longer holds (the take-over counted the abandoned call), and the
	// token alone must not settle it by that view.
	p.Token = taken.Token
	if err := f.l.EffectSettle(f.ctx, p); err != nil {
		t.Fatalf("settle with the current token: %v", err)
	}
	if g := f.get(es[0].ID); g.State != store.EffectDone || g.Attempts != 2 || g.Calls != 2 {
		t.Fatalf("settled by a stale view: %+v, want done with attempts 2 and calls 2 (the abandoned call counted)", g)
	}
	p.Token = old.Token
	if err := f.l.EffectSettle(f.ctx, p); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("settle with a lease taken over: %v, want ErrLeaseLost", err)
	}
	// A lease that ran out, as its claim saw everything else.
	c := f.claimOne(es[1].ID, t0)
	late := &store.EffectSettleParams{EffectID: c.ID, Token: c.Token, Now: c.Until, Actor: "delivery", State: store.EffectDone,
		AddAttempt: true, Claimed: c.Fenced()}
	if err := f.l.EffectSettle(f.ctx, late); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("settle at the end of its lease: %v, want ErrLeaseLost", err)
	}
	if g := f.get(es[1].ID); g.State != store.EffectSubmitting || g.Attempts != 0 {
		t.Fatalf("a lost settle wrote: %+v", g)
	}
}
