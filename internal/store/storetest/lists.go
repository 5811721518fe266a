package storetest

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// The filters of the operators' lists (the admin API and the CLI): every
// set field must match, zero fields do not filter, and keyset paging keeps
// working under every filter.

func eventIDs(es []*store.Event) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Source+"/"+e.EventID)
	}
	return out
}

func testEventListFilters(t *testing.T, o Opener) {
	f := newPipe(t, o)
	h := time.Hour
	// crm/e1: an envelope entity, never routed (accepted).
	e1 := f.event("e1")
	// crm/e2: no envelope entity and no occurrence time; two flows compute
	// entity c9 and apply it.
	e2 := f.event("e2", func(d *store.DeliveryInput) {
		d.Type, d.Entity, d.OccurredAt, d.ReceivedAt = "contact.created", "", time.Time{}, t0.Add(h)
	})
	// stripe/e1: the same event id from another source; a flow computes the
	// entity crm/e1 carries in its envelope, and its work is pending.
	e3 := f.event("e1", func(d *store.DeliveryInput) {
		d.Source, d.Entity, d.OccurredAt, d.ReceivedAt = "stripe", "", t0.Add(2*h), t0.Add(2*h)
	})
	e4 := f.event("e4", func(d *store.DeliveryInput) { d.ReceivedAt = t0.Add(3 * h) })
	e5 := f.event("e5", func(d *store.DeliveryInput) { d.Entity, d.ReceivedAt = "", t0.Add(4*h) })
	f.route(t0,
		to(e2, rt("contacts", "c9", "1"), rt("audit", "c9", "1")),
		to(e3, rt("deals", "deal_e1", "1")),
		to(e4),
		to(e5, store.Route{Flow: "deals", OrderKey: "1", Failed: "entity: the expression gave an empty id"}),
	)
	f.step("contacts", "c9", t0, rev(1, `{}`))
	f.step("audit", "c9", t0, rev(1, `{}`))
	// A replay of e2 through contacts: that flow's latest pass is pending.
	if _, err := f.s.ReplayCreate(f.ctx, &store.ReplayCreateParams{Now: t0, Actor: "operator:ann", Selection: "e2",
		Decisions: []*store.RouteDecision{to(e2, rt("contacts", "c9", "1"))}}); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		p    store.EventListParams
		want []string
	}{
		{"none", store.EventListParams{}, []string{"crm/e1", "crm/e2", "stripe/e1", "crm/e4", "crm/e5"}},
		{"source", store.EventListParams{Source: "stripe"}, []string{"stripe/e1"}},
		{"event id in any source", store.EventListParams{EventID: "e1"}, []string{"crm/e1", "stripe/e1"}},
		{"event id and source", store.EventListParams{Source: "crm", EventID: "e1"}, []string{"crm/e1"}},
		{"missing event id", store.EventListParams{EventID: "e9"}, nil},
		{"type", store.EventListParams{Type: "contact.created"}, []string{"crm/e2"}},
		{"envelope or route entity", store.EventListParams{Entity: "deal_e1"}, []string{"crm/e1", "stripe/e1"}},
		{"route entity only", store.EventListParams{Entity: "c9"}, []string{"crm/e2"}},
		{"entity and source", store.EventListParams{Entity: "deal_e1", Source: "stripe"}, []string{"stripe/e1"}},
		{"accepted", store.EventListParams{Disposition: store.DispositionAccepted}, []string{"crm/e1", "stripe/e1"}},
		{"applied", store.EventListParams{Disposition: store.DispositionApplied}, []string{"crm/e2"}},
		{"unrouted", store.EventListParams{Disposition: store.DispositionUnrouted}, []string{"crm/e4"}},
		{"dead lettered", store.EventListParams{Disposition: store.DispositionDeadLettered}, []string{"crm/e5"}},
		{"stale", store.EventListParams{Disposition: store.DispositionStale}, nil},
		{"unknown disposition", store.EventListParams{Disposition: "bogus"}, nil},
		{"received from (inclusive)", store.EventListParams{ReceivedFrom: t0.Add(3 * h)}, []string{"crm/e4", "crm/e5"}},
		{"received to (exclusive)", store.EventListParams{ReceivedTo: t0.Add(2 * h)}, []string{"crm/e1", "crm/e2"}},
		{"received span", store.EventListParams{ReceivedFrom: t0.Add(h), ReceivedTo: t0.Add(3 * h)}, []string{"crm/e2", "stripe/e1"}},
		// crm/e2 has no occurrence time: it matches no occurrence bound.
		{"occurred from", store.EventListParams{OccurredFrom: t0.Add(-time.Minute)}, []string{"crm/e1", "stripe/e1", "crm/e4", "crm/e5"}},
		{"occurred to", store.EventListParams{OccurredTo: t0.Add(2 * h)}, []string{"crm/e1", "crm/e4", "crm/e5"}},
		{"occurred span and type", store.EventListParams{OccurredFrom: t0, Type: "deal.updated"}, []string{"stripe/e1"}},
	}
	for _, c := range cases {
		if got := eventIDs(events(t, f.s, &c.p)); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}

	// Paging under the entity filter, one event a page: the cursor applies
	// to both the envelope and the route side.
	var paged []string
	after := int64(0)
	for range 5 {
		r, err := f.s.EventList(f.ctx, &store.EventListParams{Entity: "deal_e1", AfterPK: after, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, eventIDs(r.Events)...)
		if after = r.NextAfterPK; after == 0 {
			break
		}
	}
	if want := []string{"crm/e1", "stripe/e1"}; !slices.Equal(paged, want) {
		t.Fatalf("paged by entity: %v, want %v", paged, want)
	}

	// Routes: per flow, the latest pass; none unless asked for.
	for _, e := range events(t, f.s, &store.EventListParams{}) {
		if e.Routes != nil {
			t.Fatalf("%s/%s has routes without WithRoutes: %+v", e.Source, e.EventID, e.Routes)
		}
	}
	want := map[int64][]store.EventRoute{
		e1: nil,
		e2: {{Flow: "audit", Entity: "c9", Disposition: store.DispositionApplied},
			{Flow: "contacts", Entity: "c9", Disposition: store.DispositionAccepted}},
		e3: {{Flow: "deals", Entity: "deal_e1", Disposition: store.DispositionAccepted}},
		e4: nil,
		e5: {{Flow: "deals", Entity: "", Disposition: store.DispositionDeadLettered, Reason: "entity: the expression gave an empty id"}},
	}
	got := events(t, f.s, &store.EventListParams{WithRoutes: true})
	if len(got) != len(want) {
		t.Fatalf("%d events with routes, want %d", len(got), len(want))
	}
	for _, e := range got {
		if !reflect.DeepEqual(e.Routes, want[e.PK]) {
			t.Errorf("routes of %s/%s = %+v, want %+v", e.Source, e.EventID, e.Routes, want[e.PK])
		}
	}
	if r := events(t, f.s, &store.EventListParams{WithRoutes: true, Entity: "c9"}); len(r) != 1 || len(r[0].Routes) != 2 {
		t.Fatalf("routes under a filter: %+v", r)
	}
}

func testAuditListFilters(t *testing.T, o Opener) {
	s := o.Open(t)
	rows := []store.AuditInsertParams{
		{At: t0, Actor: "router", Action: "disposition", Source: "crm", EventID: "e1", Entity: "x", Detail: "a1"},
		{At: t0.Add(time.Second), Actor: "delivery", Action: "effect_dead", Source: "crm", EventID: "e2", Entity: "y", Detail: "a2"},
		{At: t0.Add(2 * time.Second), Actor: "router", Action: "disposition", Source: "stripe", EventID: "e1", Entity: "y", Detail: "a3"},
		{At: t0.Add(3 * time.Second), Actor: "operator:ann", Action: "replay", Detail: "a4"},
	}
	ids := map[string]int64{}
	for _, r := range rows {
		id, err := s.AuditInsert(context.Background(), &r)
		if err != nil {
			t.Fatal(err)
		}
		ids[r.Detail] = id
	}
	list := func(p store.AuditListParams) []string {
		t.Helper()
		got, err := s.AuditList(context.Background(), &p)
		if err != nil {
			t.Fatalf("AuditList: %v", err)
		}
		var out []string
		for _, a := range got {
			out = append(out, a.Detail)
		}
		return out
	}
	cases := []struct {
		name string
		p    store.AuditListParams
		want []string
	}{
		{"none", store.AuditListParams{}, []string{"a1", "a2", "a3", "a4"}},
		{"entity", store.AuditListParams{Entity: "y"}, []string{"a2", "a3"}},
		{"event id", store.AuditListParams{EventID: "e1"}, []string{"a1", "a3"}},
		{"event id and source", store.AuditListParams{EventID: "e1", Source: "stripe"}, []string{"a3"}},
		{"action and entity", store.AuditListParams{Action: "disposition", Entity: "y"}, []string{"a3"}},
		{"from (inclusive)", store.AuditListParams{From: t0.Add(time.Second)}, []string{"a2", "a3", "a4"}},
		{"to (exclusive)", store.AuditListParams{To: t0.Add(2 * time.Second)}, []string{"a1", "a2"}},
		{"span", store.AuditListParams{From: t0.Add(time.Second), To: t0.Add(3 * time.Second)}, []string{"a2", "a3"}},
		{"missing entity", store.AuditListParams{Entity: "z"}, nil},
		{"entity page", store.AuditListParams{Entity: "y", Limit: 1}, []string{"a2"}},
		{"entity next page", store.AuditListParams{Entity: "y", AfterID: ids["a2"]}, []string{"a3"}},
	}
	for _, c := range cases {
		if got := list(c.p); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// effectAt creates one approved effect of flow to dest at `at`, on its own
// entity, and returns it.
func (f *led) effectAt(at time.Time, flow, dest string) *store.Effect {
	f.t.Helper()
	f.n++
	id := fmt.Sprintf("lst_%03d", f.n)
	pk := f.event(id)
	f.route(at, to(pk, rt(flow, id, "1")))
	e := eff(flow+":"+id+":r1:push", "push")
	e.Destination = dest
	if r := f.step(flow, id, at, rev(1, `{}`, e)); r.EffectsInserted != 1 {
		f.t.Fatalf("effect for %s: %+v", id, r)
	}
	got := f.effects(&store.EffectListParams{Flow: flow, Entity: id})
	if len(got) != 1 {
		f.t.Fatalf("effect for %s: %d rows", id, len(got))
	}
	return got[0]
}

func testEffectListFilters(t *testing.T, o Opener) {
	f := newLed(t, o)
	h := time.Hour
	// Each effect is settled before the next is made, so that no claim
	// touches another's updated_at.
	x1 := f.effectAt(t0, "orders", "crm")
	f.into(x1.ID, t0, store.EffectDead, time.Time{}) // class transient
	x2 := f.effectAt(t0.Add(h), "orders", "erp")
	f.settle(f.claimOne(x2.ID, t0.Add(h)), t0.Add(h), store.EffectNeedsReconciliation, time.Time{},
		func(p *store.EffectSettleParams) { p.Class = store.ClassUnknown })
	x4 := f.effectAt(t0.Add(2*h), "billing", "erp")
	f.into(x4.ID, t0.Add(3*h), store.EffectDone, time.Time{})
	x3 := f.effectAt(t0.Add(2*h), "billing", "crm") // stays approved
	if _, err := f.operate(x1.ID, store.OperateAssign, "", t0.Add(5*h)); err != nil {
		t.Fatal(err)
	}
	name := map[int64]string{x1.ID: "x1", x2.ID: "x2", x3.ID: "x3", x4.ID: "x4"}
	list := func(p store.EffectListParams) []string {
		t.Helper()
		var out []string
		for _, e := range f.effects(&p) {
			out = append(out, name[e.ID])
		}
		return out
	}
	exceptions := store.ExceptionStates()
	cases := []struct {
		name string
		p    store.EffectListParams
		want []string
	}{
		{"none", store.EffectListParams{}, []string{"x1", "x2", "x4", "x3"}},
		{"exception states", store.EffectListParams{States: exceptions}, []string{"x1", "x2"}},
		{"state and states unite", store.EffectListParams{State: store.EffectDead, States: []store.EffectState{store.EffectDone}}, []string{"x1", "x4"}},
		{"one state", store.EffectListParams{State: store.EffectApproved}, []string{"x3"}},
		{"unknown state", store.EffectListParams{State: "bogus"}, nil},
		{"unknown among states", store.EffectListParams{States: []store.EffectState{"bogus", store.EffectDone}}, []string{"x4"}},
		{"destination", store.EffectListParams{Destination: "erp"}, []string{"x2", "x4"}},
		{"owner", store.EffectListParams{Owner: "bob"}, []string{"x1"}},
		{"missing owner", store.EffectListParams{Owner: "nobody"}, nil},
		{"class", store.EffectListParams{Class: store.ClassUnknown}, []string{"x2"}},
		{"class transient", store.EffectListParams{Class: store.ClassTransient}, []string{"x1"}},
		{"entity", store.EffectListParams{Entity: x3.Entity}, []string{"x3"}},
		{"created from (inclusive)", store.EffectListParams{CreatedFrom: t0.Add(h)}, []string{"x2", "x4", "x3"}},
		{"created to (exclusive)", store.EffectListParams{CreatedTo: t0.Add(2 * h)}, []string{"x1", "x2"}},
		{"updated from", store.EffectListParams{UpdatedFrom: t0.Add(3 * h)}, []string{"x1", "x4"}},
		{"updated span", store.EffectListParams{UpdatedFrom: t0.Add(h), UpdatedTo: t0.Add(3 * h)}, []string{"x2", "x3"}},
		{"flow, states and destination", store.EffectListParams{Flow: "orders", States: exceptions, Destination: "crm"}, []string{"x1"}},
		{"states page", store.EffectListParams{States: exceptions, Limit: 1}, []string{"x1"}},
		{"states next page", store.EffectListParams{States: exceptions, AfterID: x1.ID}, []string{"x2"}},
	}
	for _, c := range cases {
		if got := list(c.p); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// A list without requests reads every other column as the full list does
// and leaves each request empty.
func testEffectListWithoutRequest(t *testing.T, o Opener) {
	f := newLed(t, o)
	f.effectAt(t0, "orders", "crm")
	f.effectAt(t0, "billing", "erp")
	full := f.effects(&store.EffectListParams{})
	bare := f.effects(&store.EffectListParams{WithoutRequest: true})
	if len(full) != 2 || len(bare) != 2 {
		t.Fatalf("%d and %d effects, want 2 each", len(full), len(bare))
	}
	for i, e := range bare {
		if len(full[i].Request) == 0 || len(e.Request) != 0 {
			t.Errorf("effect %d: request %q in the full list, %q without requests; want it there and empty here", e.ID, full[i].Request, e.Request)
		}
		withReq := *e
		withReq.Request = full[i].Request
		if !reflect.DeepEqual(&withReq, full[i]) {
			t.Errorf("effect %d without request differs in more than the request:\n%+v\n%+v", e.ID, e, full[i])
		}
	}
}
