package storetest

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// insertedClaimed is a store that counts the effects its settles
// inserted already claimed (store.Rules.InsertedClaimed).
type insertedClaimed interface{ InsertedClaimed() int64 }

// testApplyGroupInsertsClaimed: a settle that claims for the delivery
// worker (FlowApplyGroupClaim) inserts its effects already claimed where
// the claim would take them, and answers and stores exactly what a settle
// without claims followed by the same claims answers and stores, step by
// step: with room for every effect; with the room running out; with a
// backlog due at the destination, which is claimed first; with an older
// version of the effect still in flight, which holds the new one back;
// with an effect so held back due at the destination, which the claim
// passes over.
func testApplyGroupInsertsClaimed(t *testing.T, o Opener) {
	claiming, plain := newPipe(t, o), newPipe(t, o)
	counter, ok := claiming.s.(insertedClaimed)
	if !ok {
		t.Fatalf("%T does not count the effects it inserts claimed", claiming.s)
	}
	traced := func(d *store.DeliveryInput) {
		d.TraceContext = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	}
	type item struct {
		event, entity string
		version       int
		effects       []*store.EffectInsert
	}
	effAt := func(key, name, dest string) *store.EffectInsert {
		e := eff(key, name)
		e.Destination = dest
		return e
	}
	deadline := effAt("ka_bill", "invoice", "billing")
	deadline.DeadlineAt, deadline.DeadlineWarnAt, deadline.OnDeadline = t0.Add(time.Hour+3*time.Microsecond), t0.Add(30*time.Minute), "dead"
	steps := []struct {
		name   string
		items  []item
		limits map[string]int
		// inserted is how many effects the step inserts claimed.
		inserted int64
	}{
		{"room for every effect", []item{
			{"evt_a", "a", 1, []*store.EffectInsert{effAt("ka", "notify", "crm"), deadline}},
			{"evt_b", "b", 1, []*store.EffectInsert{effAt("kb", "notify", "crm")}},
		}, map[string]int{"crm": 3, "billing": 2}, 3},
		{"the room runs out", []item{
			{"evt_c", "c", 1, []*store.EffectInsert{effAt("kc1", "one", "billing"), effAt("kc2", "two", "billing")}},
		}, map[string]int{"billing": 1}, 1},
		{"a backlog is due", []item{
			{"evt_d", "d", 1, []*store.EffectInsert{effAt("kd", "notify", "billing")}},
		}, map[string]int{"billing": 3}, 0},
		{"an older version in flight", []item{
			{"evt_a2", "a", 2, []*store.EffectInsert{effAt("ka2", "notify", "crm")}},
			{"evt_e", "e", 1, []*store.EffectInsert{effAt("ke", "notify", "crm")}},
		}, map[string]int{"crm": 3}, 1},
		{"a held effect is due ahead", []item{
			{"evt_f", "f", 1, []*store.EffectInsert{effAt("kf", "notify", "crm")}},
		}, map[string]int{"crm": 2}, 1},
	}
	for n, st := range steps {
		at := t0.Add(time.Duration(n+1) * time.Minute)
		claimAt := at.Add(time.Second + 7*time.Microsecond)
		var claims []*store.EffectClaimParams
		for _, d := range []string{"billing", "crm"} {
			if l := st.limits[d]; l > 0 {
				claims = append(claims, &store.EffectClaimParams{Owner: "worker-1", Now: claimAt, LeaseFor: time.Hour,
					Limit: l, Destinations: []string{d}, MaxRedrives: 3})
			}
		}
		subs := func(f *pipe) [][]*store.FlowApplyParams {
			var out [][]*store.FlowApplyParams
			for _, it := range st.items {
				pk := f.event(it.event, traced)
				f.route(at, to(pk, rt("deals", it.entity, fmt.Sprintf("k%d", it.version))))
			}
			for _, it := range st.items {
				l := f.lease("deals", it.entity, at)
				ws := f.pending("deals", it.entity)
				ap := rev(it.version, fmt.Sprintf(`{"v":%d}`, it.version), it.effects...)
				ap.Lease, ap.Now, ap.WorkID, ap.EventPK, ap.Actor, ap.ReleaseIfDrained = l, at, ws[0].ID, ws[0].Event.PK, "worker", true
				out = append(out, []*store.FlowApplyParams{&ap})
			}
			return out
		}
		before := counter.InsertedClaimed()
		outs, got := claiming.s.FlowApplyGroupClaim(claiming.ctx, subs(claiming), claims)
		for i, o := range outs {
			if o.Err != nil || o.Results[0].Disposition != store.DispositionApplied {
				t.Fatalf("%s: submission %d: %+v, %v", st.name, i, o.Results, o.Err)
			}
		}
		if n := counter.InsertedClaimed() - before; n != st.inserted {
			t.Fatalf("%s: %d effects inserted claimed, want %d", st.name, n, st.inserted)
		}
		// The oracle: the same settle without claims, then the claims.
		for i, o := range plain.s.FlowApplyGroup(plain.ctx, subs(plain)) {
			if o.Err != nil {
				t.Fatalf("%s: settle %d without claims: %v", st.name, i, o.Err)
			}
		}
		want, err := plain.s.EffectClaimGroup(plain.ctx, claims)
		if err != nil {
			t.Fatalf("%s: claims after the settle: %v", st.name, err)
		}
		sameClaims(t, st.name+": inserted claimed", got, want)
		deals := &store.EffectListParams{Flow: "deals", Limit: 100}
		if g, w := byKey(claiming.effects(deals)), byKey(plain.effects(deals)); !reflect.DeepEqual(g, w) {
			t.Fatalf("%s: stored:\n%+v\nafter a settle and a claim:\n%+v", st.name, g, w)
		}
	}
	// A lease taken at insert is a claim's: once it runs out, the calls
	// are taken over as calls cut short, and the newer version of ka
	// still waits behind it.
	for _, f := range []*pipe{claiming, plain} {
		cs, err := f.s.EffectClaim(f.ctx, &store.EffectClaimParams{Owner: "worker-2", Now: t0.Add(3 * time.Hour), LeaseFor: time.Minute,
			Limit: 10, Destinations: []string{"crm"}})
		if err != nil {
			t.Fatalf("claim after the leases ran out: %v", err)
		}
		var keys []string
		for _, c := range cs {
			keys = append(keys, c.EpisodeKey)
			if !c.Resumed {
				t.Fatalf("%s taken over, not resumed: %+v", c.EpisodeKey, c)
			}
		}
		slices.Sort(keys)
		if !reflect.DeepEqual(keys, []string{"ka", "kb", "ke", "kf"}) {
			t.Fatalf("claimed %v after the leases ran out, want ka, kb, ke and kf (ka2 waits behind ka)", keys)
		}
	}
}
