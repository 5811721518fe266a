package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// pipe is one pipeline test's store with the helpers its cases share.
type pipe struct {
	t   *testing.T
	s   store.Store
	ctx context.Context
}

func newPipe(t *testing.T, o Opener) *pipe {
	return &pipe{t: t, s: o.Open(t), ctx: context.Background()}
}

// event stores one delivery of crm/eventID and returns the event pk.
func (f *pipe) event(eventID string, mods ...func(*store.DeliveryInput)) int64 {
	f.t.Helper()
	d := delivery("crm", eventID, 0)
	d.Type = "deal.updated"
	d.Entity = "deal_" + eventID
	for _, m := range mods {
		m(d)
	}
	res := commit(f.t, f.s, one(d))
	if res[0].Err != nil {
		f.t.Fatalf("store %s: %v", eventID, res[0].Err)
	}
	return res[0].Items[0].EventPK
}

func caused(id string, hop int) func(*store.DeliveryInput) {
	return func(d *store.DeliveryInput) { d.CausationID, d.Hop = id, hop }
}

func (f *pipe) route(at time.Time, decisions ...*store.RouteDecision) {
	f.t.Helper()
	if err := f.s.EventRoute(f.ctx, &store.EventRouteParams{Now: at, Decisions: decisions}); err != nil {
		f.t.Fatalf("EventRoute: %v", err)
	}
}

func to(pk int64, routes ...store.Route) *store.RouteDecision {
	return &store.RouteDecision{EventPK: pk, Routes: routes}
}

func rt(flow, entity, orderKey string) store.Route {
	return store.Route{Flow: flow, Entity: entity, OrderKey: orderKey}
}

func (f *pipe) claim(owner string, at time.Time, limit int) []*store.Lease {
	f.t.Helper()
	ls, err := f.s.EntityClaim(f.ctx, &store.EntityClaimParams{Owner: owner, Now: at, LeaseFor: time.Minute, Limit: limit})
	if err != nil {
		f.t.Fatalf("EntityClaim: %v", err)
	}
	return ls
}

func (f *pipe) release(l *store.Lease, at, retryAt time.Time) {
	f.t.Helper()
	if err := f.s.EntityRelease(f.ctx, &store.EntityReleaseParams{Lease: l, Now: at, RetryAt: retryAt}); err != nil {
		f.t.Fatalf("EntityRelease: %v", err)
	}
}

// lease claims every ready entity at `at`, keeps the lease on flow/entity
// and gives the others back.
func (f *pipe) lease(flow, entity string, at time.Time) *store.Lease {
	f.t.Helper()
	var mine *store.Lease
	for _, l := range f.claim("w", at, 1000) {
		if l.Flow == flow && l.Entity == entity {
			mine = l
			continue
		}
		f.release(l, at, time.Time{})
	}
	if mine == nil {
		f.t.Fatalf("entity %s/%s not claimable at %v", flow, entity, at)
	}
	return mine
}

func (f *pipe) pending(flow, entity string) []*store.WorkItem {
	f.t.Helper()
	ws, err := f.s.WorkListPending(f.ctx, &store.WorkListPendingParams{Flow: flow, Entity: entity})
	if err != nil {
		f.t.Fatalf("WorkListPending: %v", err)
	}
	return ws
}

// step processes the first pending work item of flow/entity with ap as
// the worker's decision, under a fresh lease that it then gives back.
func (f *pipe) step(flow, entity string, at time.Time, ap store.FlowApplyParams) *store.FlowApplyResult {
	f.t.Helper()
	l := f.lease(flow, entity, at)
	ws := f.pending(flow, entity)
	if len(ws) == 0 {
		f.t.Fatalf("no pending work for %s/%s", flow, entity)
	}
	ap.Lease, ap.Now, ap.WorkID, ap.EventPK, ap.Actor = l, at, ws[0].ID, ws[0].Event.PK, "worker"
	res, err := f.s.FlowApply(f.ctx, &ap)
	if err != nil {
		f.t.Fatalf("FlowApply %s/%s work %d: %v", flow, entity, ws[0].ID, err)
	}
	f.release(l, at, time.Time{})
	return res
}

func (f *pipe) disposition(pk int64) store.Disposition {
	f.t.Helper()
	ev := events(f.t, f.s, &store.EventListParams{AfterPK: pk - 1, Limit: 1})
	if len(ev) != 1 || ev[0].PK != pk {
		f.t.Fatalf("event %d not found", pk)
	}
	return ev[0].Disposition
}

func (f *pipe) projection(flow, entity string) *store.Projection {
	f.t.Helper()
	pr, err := f.s.ProjectionGet(f.ctx, &store.ProjectionGetParams{Flow: flow, Entity: entity})
	if err != nil {
		f.t.Fatalf("ProjectionGet: %v", err)
	}
	return pr
}

func (f *pipe) effects(p *store.EffectListParams) []*store.Effect {
	f.t.Helper()
	es, err := f.s.EffectList(f.ctx, p)
	if err != nil {
		f.t.Fatalf("EffectList: %v", err)
	}
	return es
}

func (f *pipe) audit(action string) []*store.AuditEntry {
	f.t.Helper()
	rows, err := f.s.AuditList(f.ctx, &store.AuditListParams{Action: action, Limit: 1000})
	if err != nil {
		f.t.Fatalf("AuditList: %v", err)
	}
	return rows
}

func (f *pipe) workCount() int64 {
	f.t.Helper()
	n, err := f.s.WorkCount(f.ctx)
	if err != nil {
		f.t.Fatalf("WorkCount: %v", err)
	}
	return n
}

// rev is an ordered revision: shown as rN, sorted zero-padded.
func rev(n int, state string, effects ...*store.EffectInsert) store.FlowApplyParams {
	return store.FlowApplyParams{Version: fmt.Sprintf("r%d", n), VersionSort: fmt.Sprintf("%010d", n), Ordered: true,
		State: []byte(state), Effects: effects}
}

// hash is an unordered version (a refetched state's hash).
func hash(h, state string, effects ...*store.EffectInsert) store.FlowApplyParams {
	return store.FlowApplyParams{Version: "h:" + h, VersionSort: h, State: []byte(state), Effects: effects}
}

func eff(key, name string) *store.EffectInsert {
	return &store.EffectInsert{EpisodeKey: key, Effect: name, Destination: "crm", Request: []byte(`{"k":"` + key + `"}`)}
}

func effectSummary(es []*store.Effect) []string {
	var out []string
	for _, e := range es {
		out = append(out, fmt.Sprintf("%s %s %s", e.Effect, e.Version, e.State))
	}
	return out
}

func testRouteUnrouted(t *testing.T, o Opener) {
	f := newPipe(t, o)
	first := delivery("crm", "evt_u", 0)
	first.Type, first.CausationID, first.Hop, first.Body = "deal.deleted", "cause-1", 2, []byte(`{"first":true}`)
	retry := delivery("crm", "evt_u", 1)
	retry.Type, retry.Body = "deal.deleted", []byte(`{"retry":true}`)
	commit(t, f.s, one(first))
	commit(t, f.s, one(retry))
	if n := f.workCount(); n != 1 {
		t.Fatalf("WorkCount = %d before routing, want 1 (an accepted unrouted event)", n)
	}
	evs, err := f.s.EventListUnrouted(f.ctx, &store.EventListUnroutedParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 {
		t.Fatalf("%d unrouted events, want 1", len(evs))
	}
	e := evs[0]
	if string(e.Body) != `{"first":true}` || e.CausationID != "cause-1" || e.Hop != 2 {
		t.Fatalf("unrouted event carries body %s causation %q hop %d, want the first delivery's", e.Body, e.CausationID, e.Hop)
	}
	if e.Source != "crm" || e.EventID != "evt_u" || e.Type != "deal.deleted" || !e.ReceivedAt.Equal(t0) || !e.OccurredAt.Equal(first.OccurredAt) {
		t.Fatalf("unrouted event = %+v", e)
	}
	f.route(t0, to(e.PK))
	if d := f.disposition(e.PK); d != store.DispositionUnrouted {
		t.Fatalf("disposition %s, want unrouted", d)
	}
	rows := f.audit("disposition")
	if len(rows) != 1 || rows[0].Actor != "router" || rows[0].EventID != "evt_u" || !strings.Contains(rows[0].Detail, "no flow subscribes") {
		t.Fatalf("disposition audit = %+v", rows)
	}
	if evs, _ := f.s.EventListUnrouted(f.ctx, &store.EventListUnroutedParams{}); len(evs) != 0 {
		t.Fatalf("routed event still listed as unrouted")
	}
	if n := f.workCount(); n != 0 {
		t.Fatalf("WorkCount = %d, want 0", n)
	}
}

func testRouteTwice(t *testing.T, o Opener) {
	f := newPipe(t, o)
	pk := f.event("evt_1")
	other := f.event("evt_2")
	f.route(t0, to(pk, rt("deals", "d1", "k1")))
	f.route(t0, to(pk, rt("deals", "d1", "k1")))
	// Concurrent routers deciding the same events.
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f.s.EventRoute(f.ctx, &store.EventRouteParams{Now: t0, Decisions: []*store.RouteDecision{
				to(pk, rt("deals", "d1", "k1")), to(other, rt("deals", "d1", "k2"))}})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("concurrent EventRoute: %v", err)
		}
	}
	ws := f.pending("deals", "d1")
	if len(ws) != 2 || ws[0].Event.PK != pk || ws[1].Event.PK != other {
		t.Fatalf("pending work = %d items, want one per event", len(ws))
	}
	if pr := f.projection("deals", "d1"); pr == nil || pr.Pending != 2 {
		t.Fatalf("projection = %+v, want pending 2", pr)
	}
	if n := f.workCount(); n != 2 {
		t.Fatalf("WorkCount = %d, want 2", n)
	}
	if d := f.disposition(pk); d != store.DispositionAccepted {
		t.Fatalf("routed event with pending work is %s, want accepted", d)
	}
}

// testRouteNextIncomplete: a Decide answer without a decision for every
// event taken is refused, and the page stays unrouted for the next router
// rather than being marked routed with no work.
func testRouteNextIncomplete(t *testing.T, o Opener) {
	f := newPipe(t, o)
	a, b := f.event("evt_a"), f.event("evt_b")
	for name, decide := range map[string]func([]*store.RoutableEvent) []*store.RouteDecision{
		"one missing": func(evs []*store.RoutableEvent) []*store.RouteDecision {
			return []*store.RouteDecision{to(evs[0].PK, rt("deals", "d_a", "evt_a"))}
		},
		"one twice": func(evs []*store.RoutableEvent) []*store.RouteDecision {
			return []*store.RouteDecision{to(evs[0].PK, rt("deals", "d_a", "evt_a")), to(evs[0].PK), to(evs[1].PK)}
		},
		"a stranger": func(evs []*store.RoutableEvent) []*store.RouteDecision {
			return []*store.RouteDecision{to(evs[0].PK), to(evs[1].PK), to(evs[1].PK + 100)}
		},
	} {
		if _, err := f.s.EventRouteNext(f.ctx, &store.EventRouteNextParams{Limit: 10, Now: t0, Decide: decide}); err == nil {
			t.Fatalf("%s: EventRouteNext accepted an incomplete decision", name)
		}
	}
	evs, err := f.s.EventListUnrouted(f.ctx, &store.EventListUnroutedParams{})
	if err != nil || len(evs) != 2 || evs[0].PK != a || evs[1].PK != b {
		t.Fatalf("unrouted after refused pages: %d events, %v; want both", len(evs), err)
	}
	if ws := f.pending("deals", "d_a"); len(ws) != 0 {
		t.Fatalf("pending work %+v after refused pages, want none", ws)
	}
}

// testRouteNextDisjoint: EventRouteNext takes pages in pk order, records
// the decisions as EventRoute would, and two routers at once take
// disjoint pages, so no event is decided twice.
func testRouteNextDisjoint(t *testing.T, o Opener) {
	f := newPipe(t, o)
	var pks []int64
	for i := range 5 {
		var mods []func(*store.DeliveryInput)
		if i == 4 { // a sender that gives no occurrence time
			mods = append(mods, func(d *store.DeliveryInput) { d.OccurredAt = time.Time{} })
		}
		pks = append(pks, f.event(fmt.Sprintf("evt_%d", i), mods...))
	}
	var mu sync.Mutex
	decided := map[int64]int{}
	seen := map[int64]*store.RoutableEvent{}
	decide := func(evs []*store.RoutableEvent) []*store.RouteDecision {
		mu.Lock()
		defer mu.Unlock()
		var ds []*store.RouteDecision
		for _, e := range evs {
			decided[e.PK]++
			seen[e.PK] = e
			ds = append(ds, to(e.PK, rt("deals", "d_"+e.EventID, e.EventID)))
		}
		return ds
	}
	// Router A holds its page (two events) until router B has finished,
	// or for a while if B waits for A (a driver that serialises routers).
	bDone := make(chan struct{})
	aHolds := make(chan struct{})
	var nA, nB store.RoutedPage
	var errA, errB error
	var wg sync.WaitGroup
	wg.Go(func() {
		nA, errA = f.s.EventRouteNext(f.ctx, &store.EventRouteNextParams{Limit: 2, Now: t0,
			Decide: func(evs []*store.RoutableEvent) []*store.RouteDecision {
				close(aHolds)
				select {
				case <-bDone:
				case <-time.After(500 * time.Millisecond):
				}
				return decide(evs)
			}})
	})
	<-aHolds
	nB, errB = f.s.EventRouteNext(f.ctx, &store.EventRouteNextParams{Limit: 2, Now: t0, Decide: decide})
	close(bDone)
	wg.Wait()
	if errA != nil || errB != nil {
		t.Fatalf("EventRouteNext: %v, %v", errA, errB)
	}
	if nA.Events != 2 || nB.Events != 2 {
		t.Fatalf("pages of %d and %d events, want 2 and 2", nA.Events, nB.Events)
	}
	// The last event, then nothing.
	if n, err := f.s.EventRouteNext(f.ctx, &store.EventRouteNextParams{Limit: 2, Now: t0, Decide: decide}); err != nil || n.Events != 1 {
		t.Fatalf("third page: %d events, %v; want 1", n.Events, err)
	}
	if n, err := f.s.EventRouteNext(f.ctx, &store.EventRouteNextParams{Limit: 2, Now: t0, Decide: func([]*store.RoutableEvent) []*store.RouteDecision {
		t.Error("Decide called with no event waiting")
		return nil
	}}); err != nil || n.Events != 0 {
		t.Fatalf("empty page: %d events, %v", n.Events, err)
	}
	for i, pk := range pks {
		if decided[pk] != 1 {
			t.Fatalf("event %d decided %d times, want once (decisions %v)", pk, decided[pk], decided)
		}
		e := seen[pk]
		if e.EventID != fmt.Sprintf("evt_%d", i) || e.Source != "crm" || e.Type != "deal.updated" || len(e.Body) == 0 ||
			e.ReceivedAt.IsZero() || e.OccurredAt.IsZero() != (i == 4) {
			t.Fatalf("event %d handed to Decide as %+v", i, e)
		}
		ws := f.pending("deals", fmt.Sprintf("d_evt_%d", i))
		if len(ws) != 1 || ws[0].Event.PK != pk || ws[0].OrderKey != fmt.Sprintf("evt_%d", i) {
			t.Fatalf("event %d: pending work %+v, want its one routed item", pk, ws)
		}
	}
	if evs, _ := f.s.EventListUnrouted(f.ctx, &store.EventListUnroutedParams{}); len(evs) != 0 {
		t.Fatalf("%d events still unrouted", len(evs))
	}
}

// testRouteNextLeases: a page's Claim leases, in the routing
// transaction, up to its Limit of ready entities in claim order, as
// EntityClaim would after it; a later claim finds them leased, and a
// page that took no event leases nothing.
// decideDeals routes each event to its own entity of the deals flow,
// d_<event id>, ordered by its event id.
func decideDeals(evs []*store.RoutableEvent) []*store.RouteDecision {
	var ds []*store.RouteDecision
	for _, e := range evs {
		ds = append(ds, to(e.PK, rt("deals", "d_"+e.EventID, e.EventID)))
	}
	return ds
}

// asDecided is the event the delivery d carries, as a router decides it
// before anything is read back: what EventRouteStored is given.
func asDecided(d *store.DeliveryInput) (*store.RoutableEvent, store.DeliveryKey) {
	return &store.RoutableEvent{Source: d.Source, EventID: d.EventID, Type: d.Type, Entity: d.Entity, Account: d.Account,
			OccurredAt: d.OccurredAt, ReceivedAt: d.ReceivedAt, CausationID: d.CausationID, Hop: d.Hop, Body: d.Body,
			ContentType: d.Headers["Content-Type"], TraceContext: d.TraceContext},
		store.DeliveryKey{Source: d.Source, EventID: d.EventID, RequestID: d.RequestID, BatchIndex: d.BatchIndex}
}

// testRouteStored: EventRouteStored finds each event by the delivery that
// stored it and routes it as decided, leasing its entity, and sets its pk
// in the event and the decision. It passes over, their pks left unset: a
// delivery never stored, an event already routed, an event stored
// otherwise than it was decided, a delivery that is not its event's only
// one (the router decides on the first delivery's body, even where the
// event's own columns match), and an event behind an older one still
// waiting for the router.
func testRouteStored(t *testing.T, o Opener) {
	f := newPipe(t, o)
	deal := func(id string, i int, body string) *store.DeliveryInput {
		d := delivery("crm", id, i)
		d.Type, d.Entity, d.Body = "deal.updated", "deal_"+id, []byte(body)
		return d
	}
	claim := &store.EntityClaimParams{Owner: "router", Now: t0, LeaseFor: time.Minute, Limit: 5}
	// routeStored routes ds as decided (the body of each replaced by
	// bodies[i] where set), and returns how many it routed and the pks.
	routeStored := func(bodies map[int]string, ds ...*store.DeliveryInput) (store.RoutedPage, []int64) {
		t.Helper()
		p := &store.EventRouteStoredParams{Now: t0, Claim: claim}
		for i, d := range ds {
			ev, k := asDecided(d)
			if b, ok := bodies[i]; ok {
				ev.Body = []byte(b)
			}
			p.Events, p.Keys = append(p.Events, ev), append(p.Keys, k)
			p.Decisions = append(p.Decisions, &store.RouteDecision{Routes: []store.Route{rt("deals", "d_"+d.EventID, "k")}})
		}
		page, err := f.s.EventRouteStored(f.ctx, p)
		if err != nil {
			t.Fatalf("EventRouteStored: %v", err)
		}
		pks := make([]int64, len(ds))
		for i, ev := range p.Events {
			if ev.PK != p.Decisions[i].EventPK {
				t.Fatalf("%s: pk %d, its decision's %d", ev.EventID, ev.PK, p.Decisions[i].EventPK)
			}
			pks[i] = ev.PK
		}
		return page, pks
	}
	waiting := func() []*store.RoutableEvent {
		t.Helper()
		evs, err := f.s.EventListUnrouted(f.ctx, &store.EventListUnroutedParams{})
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}

	fresh, before, never := deal("evt_fresh", 0, `{"n":1}`), deal("evt_before", 0, `{"n":2}`), deal("evt_never", 0, `{"n":3}`)
	commit(t, f.s, one(fresh))
	commit(t, f.s, one(before))
	f.route(t0, to(waiting()[1].PK)) // evt_before: no flow, it ends unrouted
	page, pks := routeStored(nil, fresh, before, never)
	if page.Events != 1 || pks[0] == 0 || pks[1] != 0 || pks[2] != 0 {
		t.Fatalf("routed %d events, pks %v; want evt_fresh alone", page.Events, pks)
	}
	if len(page.Leases) != 1 || page.Leases[0].Entity != "d_evt_fresh" {
		t.Fatalf("leases %+v, want d_evt_fresh's, the one entity made ready", page.Leases)
	}
	ws := f.pending("deals", "d_evt_fresh")
	if len(ws) != 1 || ws[0].Event.PK != pks[0] || string(ws[0].Event.Body) != `{"n":1}` {
		t.Fatalf("pending work of d_evt_fresh: %+v, want evt_fresh's one item", ws)
	}
	if page, pks := routeStored(nil, fresh); page.Events != 0 || pks[0] != 0 {
		t.Fatalf("evt_fresh again: %d events, pks %v; want nothing routed twice", page.Events, pks)
	}

	// Decided on another body than the one stored.
	changed := deal("evt_changed", 0, `{"n":4}`)
	commit(t, f.s, one(changed))
	if page, pks := routeStored(map[int]string{0: `{"n":40}`}, changed); page.Events != 0 || pks[0] != 0 {
		t.Fatalf("evt_changed decided on another body: %d events, pks %v; want it left to the router", page.Events, pks)
	}
	left := waiting()
	if len(left) != 1 || left[0].EventID != "evt_changed" {
		t.Fatalf("waiting: %+v, want evt_changed", left)
	}
	f.route(t0, to(left[0].PK))

	// A retry received in the same microsecond as the first delivery,
	// with another body: the event's columns match the retry as decided,
	// but the router decides on the first delivery's body.
	first, retry := deal("evt_dup", 0, `{"first":true}`), deal("evt_dup", 1, `{"retry":true}`)
	retry.ReceivedAt = first.ReceivedAt
	commit(t, f.s, one(first))
	commit(t, f.s, one(retry))
	if page, pks := routeStored(nil, retry); page.Events != 0 || pks[0] != 0 {
		t.Fatalf("a duplicate delivery: %d events, pks %v; want its event left to the router", page.Events, pks)
	}
	left = waiting()
	if len(left) != 1 || left[0].EventID != "evt_dup" || string(left[0].Body) != `{"first":true}` {
		t.Fatalf("waiting: %+v, want evt_dup with its first delivery's body", left)
	}

	// A later event waits for evt_dup, older and still the router's:
	// routing stays in pk order.
	later := deal("evt_later", 0, `{"n":5}`)
	commit(t, f.s, one(later))
	if page, pks := routeStored(nil, later); page.Events != 0 || pks[0] != 0 {
		t.Fatalf("evt_later with an older event waiting: %d events, pks %v; want none routed", page.Events, pks)
	}
	f.route(t0, to(left[0].PK))
	if page, pks := routeStored(nil, later); page.Events != 1 || pks[0] == 0 {
		t.Fatalf("evt_later once nothing older waits: %d events, pks %v; want it routed", page.Events, pks)
	}
	if _, err := f.s.EventRouteStored(f.ctx, &store.EventRouteStoredParams{Now: t0, Events: []*store.RoutableEvent{{}}}); err == nil {
		t.Fatal("EventRouteStored with fewer keys than events: no error")
	}
}

func testRouteNextLeases(t *testing.T, o Opener) {
	f := newPipe(t, o)
	for i := range 3 {
		f.event(fmt.Sprintf("evt_%d", i))
	}
	decide := decideDeals
	claim := &store.EntityClaimParams{Owner: "router", Now: t0, LeaseFor: time.Minute, Limit: 2, List: 5}
	page, err := f.s.EventRouteNext(f.ctx, &store.EventRouteNextParams{Limit: 10, Now: t0, Decide: decide, Claim: claim})
	if err != nil || page.Events != 3 {
		t.Fatalf("EventRouteNext = %d events, %v; want the page of 3", page.Events, err)
	}
	if len(page.Leases) != 2 {
		t.Fatalf("the page leased %d entities, want its claim's limit of 2", len(page.Leases))
	}
	for i, l := range page.Leases {
		want := fmt.Sprintf("d_evt_%d", i)
		if l.Flow != "deals" || l.Entity != want || !strings.HasPrefix(l.Token, "router:") || !l.Until.Equal(t0.Add(time.Minute)) {
			t.Fatalf("lease %d: %+v, want deals/%s for a minute from router", i, l, want)
		}
		// A shared database reads each leased entity's work in the
		// routing transaction (RouteTx.WorkListLeased); the others leave
		// it to the processor's listing.
		shared, _ := f.s.(interface{ Shared() bool })
		switch {
		case shared == nil || !shared.Shared():
			if l.Pending != nil {
				t.Fatalf("lease %d carries %d items; a database one process owns lists none in routing", i, len(l.Pending))
			}
		case len(l.Pending) != 1 || l.Pending[0].Entity != want || l.Pending[0].Event.EventID != fmt.Sprintf("evt_%d", i) || l.Pending[0].ID == 0:
			t.Fatalf("lease %d carries %+v, want its one pending item, evt_%d's", i, l.Pending, i)
		}
	}
	rest, err := f.s.EntityClaim(f.ctx, &store.EntityClaimParams{Owner: "w", Now: t0, LeaseFor: time.Minute, Limit: 10})
	if err != nil || len(rest) != 1 || rest[0].Entity != "d_evt_2" {
		t.Fatalf("claim after the page: %+v, %v; want only d_evt_2, the others leased by routing", rest, err)
	}
	// The lease holds: the work settles under it.
	ws := f.pending("deals", "d_evt_0")
	if len(ws) != 1 {
		t.Fatalf("pending work of d_evt_0: %+v", ws)
	}
	if _, err := f.s.FlowApply(f.ctx, &store.FlowApplyParams{Lease: page.Leases[0], WorkID: ws[0].ID, EventPK: ws[0].Event.PK, Now: t0}); err != nil {
		t.Fatalf("apply under the routing's lease: %v", err)
	}
	page, err = f.s.EventRouteNext(f.ctx, &store.EventRouteNextParams{Limit: 10, Now: t0, Decide: decide, Claim: claim})
	if err != nil || page.Events != 0 || len(page.Leases) != 0 {
		t.Fatalf("empty page: %d events, %d leases, %v; want none", page.Events, len(page.Leases), err)
	}
}

// testRouteNextSettles: the routing transaction settles what Settle
// prepares of the leased entities' work, in the same commit; a settle
// that fails the transaction costs the page nothing but the settle (it is
// routed again without it). A page of more than SettleMax events settles
// nothing. A database one process owns carries, and settles, only the
// work of the page's own events: an entity with older work is left to the
// processor.
func testRouteNextSettles(t *testing.T, o Opener) {
	f := newPipe(t, o)
	pks := []int64{f.event("evt_0"), f.event("evt_1")}
	decide := decideDeals
	claim := &store.EntityClaimParams{Owner: "router", Now: t0, LeaseFor: time.Minute, Limit: 2, List: 5}
	called := 0
	// Settles the first entity's work, and leaves the second's.
	settle := func(_ context.Context, leases []*store.Lease) store.RouteSettle {
		called++
		l := leases[0]
		it := l.Pending[0]
		if it.Event.EventID != "evt_0" || len(it.Event.Body) == 0 || it.ID == 0 {
			t.Errorf("Settle got %+v, want evt_0's work item with its event and body", it)
		}
		return store.RouteSettle{Subs: [][]*store.FlowApplyParams{{{Lease: l, WorkID: it.ID, EventPK: it.Event.PK, Now: t0,
			Version: "1", VersionSort: "1", State: []byte(`{}`), ReleaseIfDrained: true}}}}
	}
	page, err := f.s.EventRouteNext(f.ctx, &store.EventRouteNextParams{Limit: 10, Now: t0, Decide: decide, Claim: claim, Settle: settle, SettleMax: 2})
	if err != nil || page.Events != 2 || len(page.Leases) != 2 {
		t.Fatalf("EventRouteNext = %d events, %d leases, %v; want 2 and 2", page.Events, len(page.Leases), err)
	}
	if called != 1 || len(page.Settled) != 1 || page.Settled[0].Err != nil || len(page.Settled[0].Results) != 1 {
		t.Fatalf("Settle called %d times, settled %+v; want one submission of one item settled", called, page.Settled)
	}
	if res := page.Settled[0].Results[0]; res.Disposition != store.DispositionApplied || !res.Released {
		t.Fatalf("settled in routing: %+v; want applied, the lease freed with nothing left", res)
	}
	if d := f.disposition(pks[0]); d != store.DispositionApplied {
		t.Fatalf("evt_0 is %s after its routing commit, want applied", d)
	}
	if d := f.disposition(pks[1]); d != store.DispositionAccepted || len(f.pending("deals", "d_evt_1")) != 1 {
		t.Fatalf("evt_1 is %s with %d pending items; want accepted, its work left to the processor", d, len(f.pending("deals", "d_evt_1")))
	}
	// The lease of evt_1's entity carries its work, for the processor.
	if l := page.Leases[1]; len(l.Pending) != 1 || l.Pending[0].Event.EventID != "evt_1" || len(l.Pending[0].Event.Body) == 0 {
		t.Fatalf("lease of d_evt_1 carries %+v, want evt_1's work with its event", l.Pending)
	}

	// A settle that fails: the transaction rolls back and the page is
	// routed again, without it.
	f.event("evt_2")
	page, err = f.s.EventRouteNext(f.ctx, &store.EventRouteNextParams{Limit: 10, Now: t0, Decide: decide,
		Claim: &store.EntityClaimParams{Owner: "router", Now: t0, LeaseFor: time.Minute, Limit: 1, List: 5},
		Settle: func(context.Context, []*store.Lease) store.RouteSettle {
			return store.RouteSettle{Subs: [][]*store.FlowApplyParams{{{}}}}
		}})
	if err != nil || page.Events != 1 || len(page.Leases) != 1 || page.Settled != nil {
		t.Fatalf("after a failed settle: %d events, %d leases, settled %+v, %v; want the page routed and leased, nothing settled", page.Events, len(page.Leases), page.Settled, err)
	}
	if ws := f.pending("deals", "d_evt_2"); len(ws) != 1 {
		t.Fatalf("evt_2 has %d pending items after its page was routed again, want 1", len(ws))
	}

	// A page of more than SettleMax events settles nothing.
	f.event("evt_3")
	f.event("evt_4")
	f.event("evt_5")
	called = 0
	page, err = f.s.EventRouteNext(f.ctx, &store.EventRouteNextParams{Limit: 10, Now: t0, Decide: decide, Claim: claim, Settle: settle, SettleMax: 2})
	if err != nil || page.Events != 3 || called != 0 || page.Settled != nil {
		t.Fatalf("a page of 3 with SettleMax 2: %d events, Settle called %d times, settled %+v, %v; want the page routed, nothing settled", page.Events, called, page.Settled, err)
	}

	// An entity whose work is not all the page's: on a database one
	// process owns its lease carries nothing (the older event's body is
	// not read on the writer), so Settle never sees it; a shared database
	// lists it whole.
	older := f.event("evt_6")
	f.route(t0, to(older, rt("deals", "d_shared", "a")))
	f.event("evt_7")
	var got []*store.Lease
	page, err = f.s.EventRouteNext(f.ctx, &store.EventRouteNextParams{Limit: 10, Now: t0, Claim: claim, SettleMax: 2,
		Decide: func(evs []*store.RoutableEvent) []*store.RouteDecision {
			var ds []*store.RouteDecision
			for _, e := range evs {
				ds = append(ds, to(e.PK, rt("deals", "d_shared", "b")))
			}
			return ds
		},
		Settle: func(_ context.Context, leases []*store.Lease) store.RouteSettle {
			got = leases
			return store.RouteSettle{}
		}})
	if err != nil || page.Events != 1 {
		t.Fatalf("EventRouteNext = %d events, %v; want evt_7's page", page.Events, err)
	}
	var shared bool
	for _, l := range page.Leases {
		if l.Entity == "d_shared" {
			shared = len(l.Pending) == 2
			if !f.s.Shared() && l.Pending != nil {
				t.Fatalf("lease of d_shared carries %+v on a database one process owns, want nothing: evt_6 is not the page's", l.Pending)
			}
		}
	}
	if f.s.Shared() && (!shared || len(got) == 0) {
		t.Fatalf("leases %+v (Settle saw %d); want d_shared leased with both items, evt_6's and evt_7's, on a shared database", page.Leases, len(got))
	}
	if !f.s.Shared() && len(got) != 0 {
		t.Fatalf("Settle saw %d leases on a database one process owns, want none", len(got))
	}
}

func testRouteFailed(t *testing.T, o Opener) {
	f := newPipe(t, o)
	both := f.event("evt_both")
	only := f.event("evt_only")
	bad := store.Route{Flow: "billing", Entity: "", OrderKey: "k", Failed: "entity expression: no field deal_id"}
	f.route(t0, to(both, rt("deals", "d1", "k1"), bad), to(only, bad))
	if d := f.disposition(only); d != store.DispositionDeadLettered {
		t.Fatalf("event whose only route failed is %s, want dead_lettered", d)
	}
	if d := f.disposition(both); d != store.DispositionAccepted {
		t.Fatalf("event with a pending route is %s, want accepted", d)
	}
	if ws := f.pending("billing", ""); len(ws) != 0 {
		t.Fatalf("failed route left %d pending items", len(ws))
	}
	if pr := f.projection("billing", ""); pr != nil && pr.Pending != 0 {
		t.Fatalf("failed route counted as pending: %+v", pr)
	}
	dl := f.audit("dead_lettered")
	if len(dl) != 2 || !strings.Contains(dl[0].Detail, "no field deal_id") {
		t.Fatalf("dead-letter audit = %+v, want one row per failed route", dl)
	}
	if n := f.workCount(); n != 1 {
		t.Fatalf("WorkCount = %d, want 1", n)
	}
	res := f.step("deals", "d1", t0, rev(1, `{"a":1}`))
	if res.Disposition != store.DispositionApplied {
		t.Fatalf("apply: %+v", res)
	}
	if d := f.disposition(both); d != store.DispositionDeadLettered {
		t.Fatalf("event applied in one flow and dead-lettered in another is %s, want dead_lettered", d)
	}
}

// testRouteUnstorable: a route whose entity or order key no driver can
// store (NUL, invalid UTF-8, a control character) is recorded as a dead
// letter with the reason, the same way on every driver, and the rest of
// the page is routed. On PostgreSQL such an entity failed the page's
// transaction at every poll, and with it all routing.
func testRouteUnstorable(t *testing.T, o Opener) {
	f := newPipe(t, o)
	nul, ctl, bad, ok := f.event("evt_nul"), f.event("evt_ctl"), f.event("evt_bad"), f.event("evt_ok")
	byPK := map[int64]store.Route{
		nul: rt("deals", "pg\x00ord", "k"), ctl: rt("deals", "d\u0085", "k"),
		bad: rt("deals", "d2", "k\xff"), ok: rt("deals", "d1", "k"),
	}
	n, err := f.s.EventRouteNext(f.ctx, &store.EventRouteNextParams{Limit: 10, Now: t0,
		Decide: func(page []*store.RoutableEvent) []*store.RouteDecision {
			var ds []*store.RouteDecision
			for _, ev := range page {
				ds = append(ds, to(ev.PK, byPK[ev.PK]))
			}
			return ds
		}})
	if err != nil || n.Events != 4 {
		t.Fatalf("EventRouteNext = %d, %v; want the page of 4 routed", n.Events, err)
	}
	for pk, want := range map[int64]string{nul: "entity: holds a NUL character", ctl: "entity: holds the control character U+0085", bad: "order key: is not valid UTF-8"} {
		if d := f.disposition(pk); d != store.DispositionDeadLettered {
			t.Errorf("event %d: %s, want dead_lettered", pk, d)
		}
		found := false
		for _, a := range f.audit("dead_lettered") {
			found = found || strings.Contains(a.Detail, want)
		}
		if !found {
			t.Errorf("no dead-letter audit row says %q", want)
		}
	}
	if ws := f.pending("deals", "d1"); len(ws) != 1 {
		t.Fatalf("the storable route left %d pending items, want 1", len(ws))
	}
	// EventRoute, with decisions given, holds to the same rule.
	late := f.event("evt_late")
	f.route(t0, to(late, rt("deals", "x\x00", "k")))
	if d := f.disposition(late); d != store.DispositionDeadLettered {
		t.Fatalf("EventRoute with a NUL entity: %s, want dead_lettered", d)
	}
}

// seedEntities puts one pending work item on each of n entities of flow f.
func (f *pipe) seedEntities(flow string, n int) {
	f.t.Helper()
	var ds []*store.RouteDecision
	for i := range n {
		pk := f.event(fmt.Sprintf("evt_%s_%03d", flow, i))
		ds = append(ds, to(pk, rt(flow, fmt.Sprintf("e%03d", i), "k")))
	}
	f.route(t0, ds...)
}

func testClaimExclusive(t *testing.T, o Opener) {
	f := newPipe(t, o)
	f.seedEntities("deals", 3)
	a := f.claim("worker-a", t0, 2)
	b := f.claim("worker-b", t0, 10)
	c := f.claim("worker-c", t0, 10)
	if len(a) != 2 || len(b) != 1 || len(c) != 0 {
		t.Fatalf("claims got %d, %d, %d leases, want 2, 1, 0", len(a), len(b), len(c))
	}
	if a[0].Entity != "e000" || a[1].Entity != "e001" || b[0].Entity != "e002" {
		t.Fatalf("claim order: %s %s %s, want e000 e001 e002", a[0].Entity, a[1].Entity, b[0].Entity)
	}
	if !strings.HasPrefix(a[0].Token, "worker-a:") || a[0].Token == a[1].Token || !strings.HasPrefix(b[0].Token, "worker-b:") {
		t.Fatalf("tokens %q %q %q: want fresh tokens named after their owner", a[0].Token, a[1].Token, b[0].Token)
	}
	if !a[0].Until.Equal(t0.Add(time.Minute)) {
		t.Fatalf("lease until %v, want %v", a[0].Until, t0.Add(time.Minute))
	}
	if got := f.claim("worker-c", t0.Add(time.Minute-time.Microsecond), 10); len(got) != 0 {
		t.Fatalf("claimed %d live leases", len(got))
	}
	// A released lease is free at once; expired leases can be re-claimed.
	f.release(b[0], t0, time.Time{})
	if got := f.claim("worker-c", t0, 10); len(got) != 1 || got[0].Entity != "e002" {
		t.Fatalf("after release: %d leases, want e002", len(got))
	}
	got := f.claim("worker-d", t0.Add(time.Minute), 10)
	if len(got) != 3 {
		t.Fatalf("%d expired leases re-claimed, want 3", len(got))
	}
	for _, l := range got {
		if !strings.HasPrefix(l.Token, "worker-d:") {
			t.Fatalf("re-claimed token %q", l.Token)
		}
	}
}

// slotLog is a claimer's count of free workers (store.Slots) that
// grants grant workers and logs what it is asked and told, with the
// step of the test it was asked at.
type slotLog struct {
	grant  int
	asked  []int
	leased []int
	steps  *[]string
}

func (s *slotLog) Take(limit int) int {
	s.asked = append(s.asked, limit)
	if s.steps != nil {
		*s.steps = append(*s.steps, "take")
	}
	return s.grant
}

func (s *slotLog) Leased(n int) { s.leased = append(s.leased, n) }

// testClaimSlots: a claim with Slots leases at most what Slots.Take
// grants of its Limit, and at most Limit whatever it grants; it tells
// Slots.Leased how many it took, and a claim granted nothing leases
// nothing and leaves the entities to the next. Routing's claims ask as
// their transaction runs, after the page is decided, and so do
// EventRouteStored's. (That a claim queued for SQLite's one writer
// holds nothing while it waits is the flow engine's to show:
// TestClaimHoldsNoSlotWhileItWaits.)
func testClaimSlots(t *testing.T, o Opener) {
	f := newPipe(t, o)
	f.seedEntities("deals", 5)
	claim := func(limit int, s store.Slots) []*store.Lease {
		t.Helper()
		ls, err := f.s.EntityClaim(f.ctx, &store.EntityClaimParams{Owner: "w", Now: t0, LeaseFor: time.Minute, Limit: limit, Slots: s})
		if err != nil {
			t.Fatalf("EntityClaim: %v", err)
		}
		return ls
	}
	two := &slotLog{grant: 2}
	if ls := claim(10, two); len(ls) != 2 || !slices.Equal(two.asked, []int{10}) || !slices.Equal(two.leased, []int{2}) {
		t.Fatalf("granted 2 of 10: %d leases, asked %v, told %v; want 2, [10], [2]", len(ls), two.asked, two.leased)
	}
	none := &slotLog{grant: 0}
	if ls := claim(10, none); len(ls) != 0 || len(none.asked) != 1 || len(none.leased) != 0 {
		t.Fatalf("granted none: %d leases, asked %v, told %v; want none, asked once, told nothing", len(ls), none.asked, none.leased)
	}
	many := &slotLog{grant: 50}
	if ls := claim(2, many); len(ls) != 2 || !slices.Equal(many.leased, []int{2}) {
		t.Fatalf("granted 50 of 2: %d leases, told %v; want the limit of 2", len(ls), many.leased)
	}
	rest := &slotLog{grant: 5}
	if ls := claim(10, rest); len(ls) != 1 || ls[0].Entity != "e004" || !slices.Equal(rest.leased, []int{1}) {
		t.Fatalf("granted 5 with one entity ready: %+v, told %v; want e004 alone, told 1", ls, rest.leased)
	}

	// Routing's claim, inside its transaction.
	for i := range 3 {
		f.event(fmt.Sprintf("evt_slots_%d", i))
	}
	var steps []string
	single := &slotLog{grant: 1, steps: &steps}
	page, err := f.s.EventRouteNext(f.ctx, &store.EventRouteNextParams{Limit: 10, Now: t0,
		Decide: func(evs []*store.RoutableEvent) []*store.RouteDecision {
			steps = append(steps, "decide")
			return decideDeals(evs)
		},
		Claim: &store.EntityClaimParams{Owner: "router", Now: t0, LeaseFor: time.Minute, Limit: 5, Slots: single}})
	if err != nil || page.Events != 3 || len(page.Leases) != 1 || page.Leases[0].Entity != "d_evt_slots_0" {
		t.Fatalf("routing granted 1 of 5: %d events, leases %+v, %v; want the page of 3 and d_evt_slots_0 leased", page.Events, page.Leases, err)
	}
	if !slices.Equal(steps, []string{"decide", "take"}) || !slices.Equal(single.asked, []int{5}) || !slices.Equal(single.leased, []int{1}) {
		t.Fatalf("routing: steps %v, asked %v, told %v; want decide then take, asked 5, told 1", steps, single.asked, single.leased)
	}

	if ls := claim(10, nil); len(ls) != 2 {
		t.Fatalf("claim without Slots after the page: %d leases, want the page's other 2", len(ls))
	}
	d := delivery("crm", "evt_slots_stored", 0)
	d.Type, d.Entity = "deal.updated", "deal_stored"
	commit(t, f.s, one(d))
	ev, k := asDecided(d)
	stored := &slotLog{grant: 1}
	page, err = f.s.EventRouteStored(f.ctx, &store.EventRouteStoredParams{Now: t0, Events: []*store.RoutableEvent{ev}, Keys: []store.DeliveryKey{k},
		Decisions: []*store.RouteDecision{{Routes: []store.Route{rt("deals", "d_stored", "k")}}},
		Claim:     &store.EntityClaimParams{Owner: "router", Now: t0, LeaseFor: time.Minute, Limit: 1, Slots: stored}})
	if err != nil || page.Events != 1 || len(page.Leases) != 1 || page.Leases[0].Entity != "d_stored" {
		t.Fatalf("routing ahead granted 1: %d events, leases %+v, %v; want d_stored leased", page.Events, page.Leases, err)
	}
	if !slices.Equal(stored.asked, []int{1}) || !slices.Equal(stored.leased, []int{1}) {
		t.Fatalf("routing ahead: asked %v, told %v; want asked 1, told 1", stored.asked, stored.leased)
	}
}

func testClaimNotBefore(t *testing.T, o Opener) {
	// Limit bounds a claim whatever its value: three of five ready
	// entities, then the other two (a store may round the limit it gives
	// its database up, and must still stop at the caller's).
	f := newPipe(t, o)
	f.seedEntities("deals", 5)
	if ls := f.claim("w", t0, 3); len(ls) != 3 {
		t.Fatalf("Limit 3 of 5 ready entities leased %d", len(ls))
	}
	if ls := f.claim("w", t0, 3); len(ls) != 2 {
		t.Fatalf("Limit 3 of the 2 left leased %d", len(ls))
	}

	f = newPipe(t, o)
	f.seedEntities("deals", 2)
	ls := f.claim("w", t0, 10)
	if len(ls) != 2 {
		t.Fatalf("%d leases, want 2", len(ls))
	}
	// Releasing with a stale token changes nothing.
	zombie := *ls[1]
	zombie.Token = "w:stale"
	f.release(&zombie, t0, time.Time{})
	if got := f.claim("x", t0, 10); len(got) != 0 {
		t.Fatalf("a release with the wrong token freed the lease")
	}
	f.release(ls[0], t0, t0.Add(30*time.Second))
	f.release(ls[1], t0, time.Time{})
	got := f.claim("x", t0.Add(time.Second), 10)
	if len(got) != 1 || got[0].Entity != "e001" {
		t.Fatalf("claim before not_before: %d leases, want only e001", len(got))
	}
	f.release(got[0], t0.Add(time.Second), time.Time{})
	got = f.claim("x", t0.Add(30*time.Second), 10)
	// not_before orders the claim: e001 (free since the start) comes first.
	if len(got) != 2 || got[0].Entity != "e001" || got[1].Entity != "e000" {
		t.Fatalf("claim at not_before: %d leases, want e001 then e000", len(got))
	}
}

// testClaimFirstReadyFirst: entities are claimed in the order they became
// ready, not in key order, so under a steady stream of new entities one
// whose key sorts late is not starved. An entity that stays pending keeps
// its place; one that drains and becomes ready again joins the back.
func testClaimFirstReadyFirst(t *testing.T, o Opener) {
	f := newPipe(t, o)
	z, a, m := f.event("evt_z"), f.event("evt_a"), f.event("evt_m")
	f.route(t0, to(z, rt("deals", "zz", "k")))
	f.route(t0.Add(time.Second), to(a, rt("deals", "aa", "k")))
	f.route(t0.Add(2*time.Second), to(m, rt("deals", "mm", "k")))
	at := t0.Add(time.Minute)
	got := f.claim("w", at, 10)
	if len(got) != 3 || got[0].Entity != "zz" || got[1].Entity != "aa" || got[2].Entity != "mm" {
		var names []string
		for _, l := range got {
			names = append(names, l.Entity)
		}
		t.Fatalf("claim order %v, want [zz aa mm]: first ready, first claimed", names)
	}
	for _, l := range got {
		f.release(l, at, time.Time{})
	}
	// zz drains and becomes ready again later than aa and mm: it goes last.
	if res := f.step("deals", "zz", at, rev(1, `{}`)); res.Disposition != store.DispositionApplied {
		t.Fatalf("apply zz: %+v", res)
	}
	z2 := f.event("evt_z2")
	f.route(at.Add(time.Second), to(z2, rt("deals", "zz", "k2")))
	// aa gets more work while it is still pending: it keeps its place.
	a2 := f.event("evt_a2")
	f.route(at.Add(2*time.Second), to(a2, rt("deals", "aa", "k2")))
	got = f.claim("w", at.Add(time.Minute), 10)
	if len(got) != 3 || got[0].Entity != "aa" || got[1].Entity != "mm" || got[2].Entity != "zz" {
		t.Fatalf("after zz drained and came back: %d leases, want aa, mm, zz", len(got))
	}
}

// testApplyReleasesDrained: FlowApply with ReleaseIfDrained frees the lease
// only when no pending work is left, in the same transaction.
func testApplyReleasesDrained(t *testing.T, o Opener) {
	f := newPipe(t, o)
	e1, e2 := f.event("evt_r1"), f.event("evt_r2")
	f.route(t0, to(e1, rt("deals", "d1", "k1")), to(e2, rt("deals", "d1", "k2")))
	l := f.lease("deals", "d1", t0)
	ws := f.pending("deals", "d1")
	if len(ws) != 2 {
		t.Fatalf("%d pending items, want 2", len(ws))
	}
	apply := func(w *store.WorkItem, n int) *store.FlowApplyResult {
		t.Helper()
		p := rev(n, fmt.Sprintf(`{"n":%d}`, n))
		p.Lease, p.Now, p.WorkID, p.EventPK, p.Actor, p.ReleaseIfDrained = l, t0, w.ID, w.Event.PK, "worker", true
		res, err := f.s.FlowApply(f.ctx, &p)
		if err != nil {
			t.Fatalf("FlowApply: %v", err)
		}
		return res
	}
	if res := apply(ws[0], 1); res.Released || res.Disposition != store.DispositionApplied {
		t.Fatalf("first of two items: %+v, want applied and still leased", res)
	}
	if got := f.claim("other", t0, 10); len(got) != 0 {
		t.Fatalf("another worker claimed %d entities while work is pending under a live lease", len(got))
	}
	if res := apply(ws[1], 2); !res.Released || res.Disposition != store.DispositionApplied {
		t.Fatalf("last item: %+v, want applied and released", res)
	}
	// Free at once: new work is claimable by anyone before the old lease
	// would have run out.
	e3 := f.event("evt_r3")
	f.route(t0, to(e3, rt("deals", "d1", "k3")))
	if got := f.claim("other", t0, 10); len(got) != 1 || got[0].Entity != "d1" {
		t.Fatalf("after a drained release: %d leases, want d1", len(got))
	}
	// The old lease is gone: its holder is fenced off.
	p := rev(3, `{"n":3}`)
	ws = f.pending("deals", "d1")
	p.Lease, p.Now, p.WorkID, p.EventPK, p.Actor, p.ReleaseIfDrained = l, t0, ws[0].ID, ws[0].Event.PK, "worker", true
	if _, err := f.s.FlowApply(f.ctx, &p); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("apply under the released lease: %v, want ErrLeaseLost", err)
	}
	// A last item that writes no projection (a dead letter) counts the
	// entity down and frees it all the same.
	e4 := f.event("evt_r4")
	f.route(t0, to(e4, rt("deals", "d2", "k1")))
	l2 := f.lease("deals", "d2", t0)
	ws = f.pending("deals", "d2")
	p = rev(1, `{"n":1}`)
	p.Lease, p.Now, p.WorkID, p.EventPK, p.Actor, p.ReleaseIfDrained, p.Fail = l2, t0, ws[0].ID, ws[0].Event.PK, "worker", true, "poison"
	if res, err := f.s.FlowApply(f.ctx, &p); err != nil || !res.Released || res.Disposition != store.DispositionDeadLettered {
		t.Fatalf("dead-lettered last item: %+v, %v, want dead_lettered and released", res, err)
	}
	e5 := f.event("evt_r5")
	f.route(t0, to(e5, rt("deals", "d2", "k2")))
	if got := f.claim("other", t0, 10); len(got) != 1 || got[0].Entity != "d2" {
		t.Fatalf("after a dead letter drained d2: %d leases, want d2", len(got))
	}
}

func testClaimConcurrent(t *testing.T, o Opener) {
	f := newPipe(t, o)
	const entities, workers = 24, 8
	f.seedEntities("deals", entities)
	var wg sync.WaitGroup
	got := make([][]*store.Lease, workers)
	errs := make([]error, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = f.s.EntityClaim(f.ctx, &store.EntityClaimParams{
				Owner: fmt.Sprintf("w%d", i), Now: t0, LeaseFor: time.Minute, Limit: 5})
		}()
	}
	wg.Wait()
	seen := map[string]string{}
	for i := range workers {
		if errs[i] != nil {
			t.Fatalf("claimer %d: %v", i, errs[i])
		}
		for _, l := range got[i] {
			if prev, dup := seen[l.Entity]; dup {
				t.Fatalf("entity %s leased twice (%s and %s)", l.Entity, prev, l.Token)
			}
			seen[l.Entity] = l.Token
		}
	}
	if len(seen) != entities {
		t.Fatalf("%d entities leased, want all %d", len(seen), entities)
	}
}

func testFencing(t *testing.T, o Opener) {
	f := newPipe(t, o)
	pk := f.event("evt_1")
	f.route(t0, to(pk, rt("deals", "d1", "k1")))
	a := f.lease("deals", "d1", t0)
	ws := f.pending("deals", "d1")
	ap := rev(1, `{"stage":"won"}`, eff("deals:d1:r1:notify", "notify"))
	ap.Lease, ap.WorkID, ap.EventPK, ap.Actor = a, ws[0].ID, pk, "worker"
	check := func(when string) {
		t.Helper()
		if ws := f.pending("deals", "d1"); len(ws) != 1 {
			t.Fatalf("%s: %d pending items, want the item untouched", when, len(ws))
		}
		if pr := f.projection("deals", "d1"); pr.Version != "" || pr.Pending != 1 {
			t.Fatalf("%s: projection written: %+v", when, pr)
		}
		if es := f.effects(&store.EffectListParams{}); len(es) != 0 {
			t.Fatalf("%s: %d effects written", when, len(es))
		}
		if rows := f.audit("work_settled"); len(rows) != 0 {
			t.Fatalf("%s: audit written", when)
		}
		if d := f.disposition(pk); d != store.DispositionAccepted {
			t.Fatalf("%s: disposition %s", when, d)
		}
	}
	// The lease expired: the worker is fenced off.
	ap.Now = a.Until
	if _, err := f.s.FlowApply(f.ctx, &ap); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("FlowApply after expiry: %v, want ErrLeaseLost", err)
	}
	check("expired lease")
	// Another worker re-claims; the first one's token is a zombie even
	// at a time its own lease would still cover.
	b := f.lease("deals", "d1", a.Until)
	ap.Now = a.Until.Add(-time.Second)
	if _, err := f.s.FlowApply(f.ctx, &ap); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("FlowApply with a zombie token: %v, want ErrLeaseLost", err)
	}
	check("zombie token")
	ap.Lease, ap.Now = b, a.Until
	res, err := f.s.FlowApply(f.ctx, &ap)
	if err != nil || res.Disposition != store.DispositionApplied || res.EffectsInserted != 1 {
		t.Fatalf("FlowApply by the new holder: %+v %v", res, err)
	}
}

func testRevisionGuard(t *testing.T, o Opener) {
	f := newPipe(t, o)
	type step struct {
		ap     store.FlowApplyParams
		want   store.Disposition
		reason string
	}
	steps := []step{
		{rev(2, `{"s":2}`), store.DispositionApplied, ""},
		{rev(2, `{"s":2}`), store.DispositionDuplicate, "version r2 already applied"},
		{rev(2, `{"s":"other"}`), store.DispositionDeadLettered, "version_conflict:"},
		{rev(1, `{"s":1}`), store.DispositionStale, "version r1 is older than applied r2"},
		{rev(3, `{"s":3}`), store.DispositionApplied, ""},
	}
	var pks []int64
	for i := range steps {
		pk := f.event(fmt.Sprintf("evt_%d", i))
		pks = append(pks, pk)
		f.route(t0, to(pk, rt("deals", "d1", fmt.Sprintf("k%d", i))))
	}
	for i, s := range steps {
		res := f.step("deals", "d1", t0.Add(time.Duration(i)*time.Second), s.ap)
		if res.Disposition != s.want || !strings.HasPrefix(res.Reason, s.reason) || (s.reason == "") != (res.Reason == "") {
			t.Fatalf("step %d (%s): %s %q, want %s %q", i, s.ap.Version, res.Disposition, res.Reason, s.want, s.reason)
		}
		if d := f.disposition(pks[i]); d != s.want {
			t.Fatalf("step %d: event disposition %s, want %s", i, d, s.want)
		}
	}
	pr := f.projection("deals", "d1")
	if pr.Version != "r3" || pr.VersionSort != "0000000003" || pr.AppliedEventPK != pks[4] || pr.Pending != 0 || !pr.UpdatedAt.Equal(t0.Add(4*time.Second)) {
		t.Fatalf("projection = %+v", pr)
	}
	if !jsonEqual(pr.State, `{"s":3}`) {
		t.Fatalf("projection state %s", pr.State)
	}
	if rows := f.audit("work_settled"); len(rows) != 5 || rows[0].Detail != "flow deals entity d1: applied r2" || rows[0].Actor != "worker" {
		t.Fatalf("work_settled audit = %+v", rows)
	}
	var transitions []string
	for _, r := range f.audit("disposition") {
		transitions = append(transitions, r.Detail)
	}
	want := "accepted -> applied|accepted -> duplicate|accepted -> dead_lettered|accepted -> stale|accepted -> applied"
	if strings.Join(transitions, "|") != want {
		t.Fatalf("disposition audit %q, want %q", transitions, want)
	}
}

// jsonEqual compares JSON texts ignoring the whitespace PostgreSQL's jsonb
// output adds.
func jsonEqual(got []byte, want string) bool {
	return strings.NewReplacer(" ", "").Replace(string(got)) == want
}

// The dossier: r1 created, r3 cancelled, then r2 arrives late. The late
// revision must neither overwrite the projection nor cause an effect.
func testDossierLateRevision(t *testing.T, o Opener) {
	f := newPipe(t, o)
	r1 := f.event("evt_r1")
	r3 := f.event("evt_r3")
	r2 := f.event("evt_r2")
	// Arrival order keys: processed r1, r3, r2.
	f.route(t0, to(r1, rt("dossier", "D-7", "a1")), to(r3, rt("dossier", "D-7", "a2")), to(r2, rt("dossier", "D-7", "a3")))
	want := []store.Disposition{store.DispositionApplied, store.DispositionApplied, store.DispositionStale}
	aps := []store.FlowApplyParams{
		rev(1, `{"status":"created"}`, eff("dossier:D-7:r1:notify_created", "notify_created")),
		rev(3, `{"status":"cancelled"}`, eff("dossier:D-7:r3:notify_cancel", "notify_cancel")),
		rev(2, `{"status":"reviewed"}`, eff("dossier:D-7:r2:notify_review", "notify_review")),
	}
	for i, ap := range aps {
		if res := f.step("dossier", "D-7", t0.Add(time.Duration(i)*time.Second), ap); res.Disposition != want[i] {
			t.Fatalf("%s: %s %q, want %s", ap.Version, res.Disposition, res.Reason, want[i])
		}
	}
	if pr := f.projection("dossier", "D-7"); pr.Version != "r3" || !jsonEqual(pr.State, `{"status":"cancelled"}`) || pr.AppliedEventPK != r3 {
		t.Fatalf("projection = %+v, want r3 cancelled", pr)
	}
	got := effectSummary(f.effects(&store.EffectListParams{Flow: "dossier"}))
	if strings.Join(got, ", ") != "notify_created r1 approved, notify_cancel r3 approved" {
		t.Fatalf("effects = %v, want exactly notify_created r1 and notify_cancel r3", got)
	}
	for pk, d := range map[int64]store.Disposition{r1: store.DispositionApplied, r3: store.DispositionApplied, r2: store.DispositionStale} {
		if got := f.disposition(pk); got != d {
			t.Fatalf("event %d: %s, want %s", pk, got, d)
		}
	}
}

func testHashVersions(t *testing.T, o Opener) {
	f := newPipe(t, o)
	a := f.event("evt_a")
	again := f.event("evt_again")
	b := f.event("evt_b")
	f.route(t0, to(a, rt("sync", "c1", "1")), to(again, rt("sync", "c1", "2")), to(b, rt("sync", "c1", "3")))
	// "fff" sorts after "aaa": an ordered comparison would call aaa stale.
	steps := []struct {
		ap   store.FlowApplyParams
		want store.Disposition
	}{
		{hash("fff", `{"n":1}`, eff("sync:c1:fff:push", "push")), store.DispositionApplied},
		{hash("fff", `{"n":1}`, eff("sync:c1:fff:push", "push")), store.DispositionDuplicate},
		{hash("aaa", `{"n":2}`, eff("sync:c1:aaa:push", "push")), store.DispositionApplied},
	}
	for i, s := range steps {
		res := f.step("sync", "c1", t0, s.ap)
		if res.Disposition != s.want {
			t.Fatalf("step %d: %s %q, want %s", i, res.Disposition, res.Reason, s.want)
		}
	}
	if pr := f.projection("sync", "c1"); pr.Version != "h:aaa" || !jsonEqual(pr.State, `{"n":2}`) {
		t.Fatalf("projection = %+v", pr)
	}
	got := effectSummary(f.effects(&store.EffectListParams{Flow: "sync"}))
	if strings.Join(got, ", ") != "push h:fff superseded, push h:aaa approved" {
		t.Fatalf("effects = %v: a different hash supersedes the pending push", got)
	}
	// The same hash with a different state is a conflict, not a duplicate.
	c := f.event("evt_c")
	f.route(t0, to(c, rt("sync", "c1", "4")))
	if res := f.step("sync", "c1", t0, hash("aaa", `{"n":3}`)); res.Disposition != store.DispositionDeadLettered || !strings.HasPrefix(res.Reason, "version_conflict:") {
		t.Fatalf("same hash, other state: %+v", res)
	}
}

func testSupersede(t *testing.T, o Opener) {
	f := newPipe(t, o)
	e1 := f.event("evt_1")
	e2 := f.event("evt_2")
	x := f.event("evt_x")
	f.route(t0, to(e1, rt("b2c", "s1", "1")), to(e2, rt("b2c", "s1", "2")), to(x, rt("b2c", "s2", "1")))
	f.step("b2c", "s2", t0, rev(1, `{}`, eff("b2c:s2:r1:upsert_deal", "upsert_deal")))
	r := f.step("b2c", "s1", t0, rev(1, `{"v":1}`, eff("b2c:s1:r1:upsert_deal", "upsert_deal"), eff("b2c:s1:r1:notify", "notify")))
	if r.EffectsInserted != 2 || r.Superseded != 0 {
		t.Fatalf("r1: %+v", r)
	}
	r = f.step("b2c", "s1", t0.Add(time.Second), rev(2, `{"v":2}`, eff("b2c:s1:r2:upsert_deal", "upsert_deal")))
	if r.Disposition != store.DispositionApplied || r.EffectsInserted != 1 || r.Superseded != 1 {
		t.Fatalf("r2: %+v, want one inserted and one superseded", r)
	}
	var got []string
	for _, e := range f.effects(&store.EffectListParams{Flow: "b2c"}) {
		got = append(got, fmt.Sprintf("%s %s %s %s", e.Entity, e.Effect, e.Version, e.State))
	}
	want := "s2 upsert_deal r1 approved|s1 upsert_deal r1 superseded|s1 notify r1 approved|s1 upsert_deal r2 approved"
	if strings.Join(got, "|") != want {
		t.Fatalf("effects:\n%s\nwant\n%s", strings.Join(got, "|"), want)
	}
	if rows := f.audit("effect_superseded"); len(rows) != 1 || !strings.Contains(rows[0].Detail, "b2c:s1:r1:upsert_deal") {
		t.Fatalf("effect_superseded audit = %+v", rows)
	}
	if rows := f.audit("effect_approved"); len(rows) != 4 || rows[3].Detail != "b2c:s1:r2:upsert_deal" {
		t.Fatalf("effect_approved audit = %+v", rows)
	}
	sup := f.effects(&store.EffectListParams{State: store.EffectSuperseded})
	if len(sup) != 1 || !sup[0].UpdatedAt.Equal(t0.Add(time.Second)) || !sup[0].CreatedAt.Equal(t0) {
		t.Fatalf("superseded effect = %+v", sup)
	}
	// Only pending effects are superseded: r1's, already superseded, is not
	// counted again when r3 supersedes r2's.
	pk := f.event("evt_3")
	f.route(t0, to(pk, rt("b2c", "s1", "3")))
	if r := f.step("b2c", "s1", t0.Add(2*time.Second), rev(3, `{"v":3}`, eff("b2c:s1:r3:upsert_deal", "upsert_deal"))); r.Superseded != 1 {
		t.Fatalf("r3: %+v, want only r2's pending upsert superseded", r)
	}
	if sup := f.effects(&store.EffectListParams{State: store.EffectSuperseded}); len(sup) != 2 || sup[1].Version != "r2" {
		t.Fatalf("superseded effects = %v", effectSummary(sup))
	}
}

// testSupersedeRetryWait: an effect waiting to retry is superseded by a
// newer version of its entity like one never tried. Left alone, its retry
// would carry the older version to the destination after the newer one.
// r2 supersedes one name (one supersede step), r3 two at once (PostgreSQL
// sends several steps as one statement).
// testEffectNewer: a newer effect of the same flow, entity and effect
// name is found for an older one, whatever their states; another name,
// entity or a compensation is not one.
func testEffectNewer(t *testing.T, o Opener) {
	f := newPipe(t, o)
	e1, e2, x := f.event("evt_1"), f.event("evt_2"), f.event("evt_x")
	f.route(t0, to(e1, rt("b2c", "s1", "1")), to(e2, rt("b2c", "s1", "2")), to(x, rt("b2c", "s2", "1")))
	f.step("b2c", "s2", t0, rev(1, `{}`, eff("b2c:s2:r1:upsert_deal", "upsert_deal")))
	f.step("b2c", "s1", t0, rev(1, `{"v":1}`, eff("b2c:s1:r1:upsert_deal", "upsert_deal"), eff("b2c:s1:r1:notify", "notify")))
	f.step("b2c", "s1", t0.Add(time.Second), rev(2, `{"v":2}`, eff("b2c:s1:r2:upsert_deal", "upsert_deal")))
	ids := map[string]int64{}
	for _, e := range f.effects(&store.EffectListParams{Flow: "b2c"}) {
		ids[e.EpisodeKey] = e.ID
	}
	for key, want := range map[string]string{
		"b2c:s1:r1:upsert_deal": "b2c:s1:r2:upsert_deal", // superseded already: still older
		"b2c:s1:r2:upsert_deal": "",
		"b2c:s1:r1:notify":      "", // no newer notify
		"b2c:s2:r1:upsert_deal": "", // another entity's
	} {
		got, err := f.s.EffectNewer(f.ctx, ids[key])
		if err != nil || got != want {
			t.Errorf("EffectNewer(%s) = %q, %v; want %q", key, got, err, want)
		}
	}
	if got, err := f.s.EffectNewer(f.ctx, 1<<40); err != nil || got != "" {
		t.Errorf("EffectNewer of no effect = %q, %v; want none", got, err)
	}
	// The messages published to one endpoint are not versions of one
	// another: an older one's delivery has no newer.
	p := newPub(t, o)
	p.put(&store.EndpointPutParams{ID: "ep_a", Spec: spec("https://a.example/hook"), Enabled: true})
	p.publish(msg("msg_1", "key-1", "invoice.paid", t0))
	p.publish(msg("msg_2", "key-2", "invoice.paid", t0.Add(time.Second)))
	pubs := p.effects()
	if len(pubs) != 2 {
		t.Fatalf("published effects: %d, want 2", len(pubs))
	}
	if got, err := p.s.EffectNewer(p.ctx, pubs[0].ID); err != nil || got != "" {
		t.Errorf("EffectNewer of message 1's delivery = %q, %v; want none", got, err)
	}
}

func testSupersedeRetryWait(t *testing.T, o Opener) {
	f := newLed(t, o)
	pks := []int64{f.event("evt_1"), f.event("evt_2"), f.event("evt_3")}
	for i, pk := range pks {
		f.route(t0, to(pk, rt("b2c", "s1", fmt.Sprint(i+1))))
	}
	retryAt := t0.Add(time.Hour)
	waitToRetry := func(version string) {
		t.Helper()
		for _, e := range f.effects(&store.EffectListParams{Flow: "b2c", Entity: "s1", State: store.EffectApproved}) {
			if e.Version == version {
				f.into(e.ID, t0, store.EffectRetryWait, retryAt)
			}
		}
	}
	if r := f.step("b2c", "s1", t0, rev(1, `{"v":1}`, eff("b2c:s1:r1:upsert_deal", "upsert_deal"), eff("b2c:s1:r1:notify", "notify"))); r.EffectsInserted != 2 {
		t.Fatalf("r1: %+v", r)
	}
	waitToRetry("r1")
	if r := f.step("b2c", "s1", t0.Add(time.Second), rev(2, `{"v":2}`, eff("b2c:s1:r2:upsert_deal", "upsert_deal"))); r.Superseded != 1 {
		t.Fatalf("r2: %+v, want r1's upsert_deal, waiting to retry, superseded", r)
	}
	waitToRetry("r2")
	if r := f.step("b2c", "s1", t0.Add(2*time.Second), rev(3, `{"v":3}`,
		eff("b2c:s1:r3:upsert_deal", "upsert_deal"), eff("b2c:s1:r3:notify", "notify"))); r.Superseded != 2 {
		t.Fatalf("r3: %+v, want r2's upsert_deal and r1's notify, both waiting to retry, superseded", r)
	}
	want := "upsert_deal r1 superseded|notify r1 superseded|upsert_deal r2 superseded|upsert_deal r3 approved|notify r3 approved"
	if got := strings.Join(effectSummary(f.effects(&store.EffectListParams{Flow: "b2c", Entity: "s1"})), "|"); got != want {
		t.Fatalf("effects:\n%s\nwant\n%s", got, want)
	}
	// When the retries fall due, only the newest version goes out.
	var claimed []string
	for _, c := range f.claimAt(retryAt.Add(time.Minute)) {
		claimed = append(claimed, c.EpisodeKey)
	}
	slices.Sort(claimed)
	if want := []string{"b2c:s1:r3:notify", "b2c:s1:r3:upsert_deal"}; !slices.Equal(claimed, want) {
		t.Fatalf("claimed once the retries were due: %v, want only r3's %v", claimed, want)
	}
	if rows := f.audit("effect_superseded"); len(rows) != 3 {
		t.Fatalf("effect_superseded audit = %+v, want 3 rows", rows)
	}
}

// testClaimWaitsForOlderInFlight: while an older version's call is in
// flight, the newer version of the same business effect is not claimed:
// two calls of one effect at once could reach the destination in either
// order, the older one last. Once the older call is settled the newer is
// claimed. Another entity's or another effect name's work is not held.
func testClaimWaitsForOlderInFlight(t *testing.T, o Opener) {
	f := newLed(t, o)
	pks := []int64{f.event("evt_1"), f.event("evt_2"), f.event("evt_x")}
	f.route(t0, to(pks[0], rt("b2c", "s1", "1")), to(pks[1], rt("b2c", "s1", "2")), to(pks[2], rt("b2c", "s2", "1")))
	f.step("b2c", "s1", t0, rev(1, `{"v":1}`, eff("b2c:s1:r1:upsert_deal", "upsert_deal")))
	older := f.claimAt(t0)
	if len(older) != 1 || older[0].EpisodeKey != "b2c:s1:r1:upsert_deal" {
		t.Fatalf("first claim: %d effects, want r1's upsert_deal", len(older))
	}
	f.step("b2c", "s1", t0.Add(time.Second), rev(2, `{"v":2}`,
		eff("b2c:s1:r2:upsert_deal", "upsert_deal"), eff("b2c:s1:r2:notify", "notify")))
	f.step("b2c", "s2", t0.Add(time.Second), rev(1, `{}`, eff("b2c:s2:r1:upsert_deal", "upsert_deal")))
	keys := func(cs []*store.ClaimedEffect) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.EpisodeKey)
		}
		slices.Sort(out)
		return out
	}
	at := t0.Add(2 * time.Second)
	if got, want := keys(f.claimAt(at)), []string{"b2c:s1:r2:notify", "b2c:s2:r1:upsert_deal"}; !slices.Equal(got, want) {
		t.Fatalf("claimed while r1's upsert_deal is in flight: %v, want %v (not r2's upsert_deal)", got, want)
	}
	f.settle(older[0], at, store.EffectDone, time.Time{})
	if got, want := keys(f.claimAt(at.Add(time.Second))), []string{"b2c:s1:r2:upsert_deal"}; !slices.Equal(got, want) {
		t.Fatalf("claimed once r1's call was settled: %v, want %v", got, want)
	}
}

func testEffectLedger(t *testing.T, o Opener) {
	f := newPipe(t, o)
	e1 := f.event("evt_1", caused("cause-9", 1))
	e2 := f.event("evt_2")
	f.route(t0, to(e1, rt("b2c", "s1", "1")), to(e2, rt("b2c", "s1", "2")))
	first := eff("b2c:s1:r1:upsert", "upsert")
	first.CausationID, first.Hop = "cause-9", 2
	first.Request = []byte(`{"amount":12}`)
	r := f.step("b2c", "s1", t0, rev(1, `{}`, first))
	if r.EffectsInserted != 1 || r.EffectsExisting != 0 {
		t.Fatalf("first insert: %+v", r)
	}
	// Another event asks for the same episode: the ledger keeps one row.
	r = f.step("b2c", "s1", t0.Add(time.Second), rev(2, `{"x":1}`, eff("b2c:s1:r1:upsert", "upsert"), eff("b2c:s1:r2:mail", "mail")))
	if r.EffectsInserted != 1 || r.EffectsExisting != 1 {
		t.Fatalf("same episode key again: %+v, want 1 inserted and 1 existing", r)
	}
	es := f.effects(&store.EffectListParams{})
	if len(es) != 2 {
		t.Fatalf("%d effects, want 2", len(es))
	}
	// r2 superseded the pending r1 upsert before asking for it again: the
	// existing row keeps its identity and is not revived.
	e := es[0]
	if e.EpisodeKey != "b2c:s1:r1:upsert" || e.Flow != "b2c" || e.Entity != "s1" || e.Version != "r1" || e.Destination != "crm" ||
		e.State != store.EffectSuperseded || !jsonEqual(e.Request, `{"amount":12}`) || e.Source != "crm" || e.SourceEventID != "evt_1" ||
		e.CausationID != "cause-9" || e.Hop != 2 || e.Attempts != 0 || !e.CreatedAt.Equal(t0) || !e.UpdatedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("effect row = %+v", e)
	}
	// Filters and paging.
	if got := f.effects(&store.EffectListParams{AfterID: es[0].ID}); len(got) != 1 || got[0].ID != es[1].ID {
		t.Fatalf("after id: %d rows", len(got))
	}
	if got := f.effects(&store.EffectListParams{Entity: "s2"}); len(got) != 0 {
		t.Fatalf("entity filter leaked %d rows", len(got))
	}
	if got := f.effects(&store.EffectListParams{Flow: "b2c", Entity: "s1", State: store.EffectApproved}); len(got) != 1 || got[0].Effect != "mail" {
		t.Fatalf("state filter: %d rows", len(got))
	}
	if got := f.effects(&store.EffectListParams{Limit: 1}); len(got) != 1 {
		t.Fatalf("limit: %d rows", len(got))
	}
	if got := f.effects(&store.EffectListParams{Flow: "other"}); len(got) != 0 {
		t.Fatalf("flow filter leaked %d rows", len(got))
	}
}

// A→B→A: a causation that already visited flow A with one event is
// blocked when it comes back to A with another.
func testLoopGuard(t *testing.T, o Opener) {
	f := newPipe(t, o)
	e1 := f.event("evt_1", caused("c1", 0))
	f.route(t0, to(e1, rt("crm_to_billing", "acct1", "1")))
	ap := rev(1, `{"v":1}`, eff("c2b:acct1:r1:push", "push"))
	ap.CausationID, ap.Hop, ap.MaxHops = "c1", 0, 5
	if r := f.step("crm_to_billing", "acct1", t0, ap); r.Disposition != store.DispositionApplied {
		t.Fatalf("first visit: %+v", r)
	}
	// Billing's webhook caused by our push reaches the other flow: first visit there.
	e2 := f.event("evt_2", caused("c1", 1))
	f.route(t0, to(e2, rt("billing_to_crm", "acct1", "1")))
	ap = rev(1, `{"v":1}`, eff("b2c:acct1:r1:push", "push"))
	ap.CausationID, ap.Hop, ap.MaxHops = "c1", 1, 5
	if r := f.step("billing_to_crm", "acct1", t0, ap); r.Disposition != store.DispositionApplied {
		t.Fatalf("other flow: %+v", r)
	}
	// ...and comes back to the first flow: blocked.
	e3 := f.event("evt_3", caused("c1", 2))
	f.route(t0, to(e3, rt("crm_to_billing", "acct1", "2")))
	ap = rev(2, `{"v":2}`, eff("c2b:acct1:r2:push", "push"))
	ap.CausationID, ap.Hop, ap.MaxHops = "c1", 2, 5
	r := f.step("crm_to_billing", "acct1", t0, ap)
	if r.Disposition != store.DispositionDuplicate || !strings.HasPrefix(r.Reason, "loop_blocked:") || r.EffectsInserted != 0 {
		t.Fatalf("loop back: %+v, want duplicate loop_blocked", r)
	}
	if pr := f.projection("crm_to_billing", "acct1"); pr.Version != "r1" {
		t.Fatalf("blocked visit changed the projection: %+v", pr)
	}
	if d := f.disposition(e3); d != store.DispositionDuplicate {
		t.Fatalf("blocked event: %s", d)
	}
	if rows := f.audit("loop_blocked"); len(rows) != 1 || rows[0].EventID != "evt_3" {
		t.Fatalf("loop_blocked audit = %+v", rows)
	}
	// A replay of the first visit is the same event: not a loop.
	if _, err := f.s.ReplayCreate(f.ctx, &store.ReplayCreateParams{Now: t0, Actor: "operator:ann", Selection: "evt_1",
		Decisions: []*store.RouteDecision{to(e1, rt("crm_to_billing", "acct1", "1"))}}); err != nil {
		t.Fatal(err)
	}
	ap = rev(1, `{"v":1}`, eff("c2b:acct1:r1:push", "push"))
	ap.CausationID, ap.Hop, ap.MaxHops = "c1", 0, 5
	r = f.step("crm_to_billing", "acct1", t0, ap)
	if strings.HasPrefix(r.Reason, "loop_blocked") || r.Disposition != store.DispositionDuplicate {
		t.Fatalf("replay of the first visit: %+v, want the revision guard's duplicate", r)
	}
	if rows := f.audit("loop_blocked"); len(rows) != 1 {
		t.Fatalf("%d loop_blocked rows, want still 1", len(rows))
	}
	// The hop ceiling dead-letters, whether or not the causation is new.
	e4 := f.event("evt_4", caused("c2", 5))
	f.route(t0, to(e4, rt("crm_to_billing", "acct1", "3")))
	ap = rev(3, `{"v":3}`, eff("c2b:acct1:r3:push", "push"))
	ap.CausationID, ap.Hop, ap.MaxHops = "c2", 5, 5
	r = f.step("crm_to_billing", "acct1", t0, ap)
	if r.Disposition != store.DispositionDeadLettered || !strings.HasPrefix(r.Reason, "loop_hop_limit:") {
		t.Fatalf("hop ceiling: %+v", r)
	}
	if rows := f.audit("loop_hop_limit"); len(rows) != 1 || rows[0].EventID != "evt_4" {
		t.Fatalf("loop_hop_limit audit = %+v", rows)
	}
	if es := f.effects(&store.EffectListParams{Flow: "crm_to_billing"}); len(es) != 1 {
		t.Fatalf("%d effects in the looping flow, want only the first visit's", len(es))
	}
}

func testAggregateMultiFlow(t *testing.T, o Opener) {
	f := newPipe(t, o)
	// Both flows' entities start at r5 with state {}.
	seed := f.event("evt_seed")
	f.route(t0, to(seed, rt("one", "x", "0"), rt("two", "x", "0")))
	f.step("one", "x", t0, rev(5, `{}`))
	if d := f.disposition(seed); d != store.DispositionAccepted {
		t.Fatalf("event with work left in another flow is %s, want accepted", d)
	}
	f.step("two", "x", t0, rev(5, `{}`))
	if d := f.disposition(seed); d != store.DispositionApplied {
		t.Fatalf("seed event: %s", d)
	}
	cases := []struct {
		one, two store.FlowApplyParams
		want     store.Disposition
	}{
		{rev(6, `{}`), rev(6, `{}`), store.DispositionApplied},
		{rev(6, `{}`), rev(5, `{}`), store.DispositionDuplicate},
		{rev(5, `{}`), rev(5, `{}`), store.DispositionStale},
		{rev(5, `{}`), store.FlowApplyParams{Fail: "refetch: 404"}, store.DispositionDeadLettered},
		{rev(7, `{}`), rev(4, `{}`), store.DispositionApplied},
	}
	for i, c := range cases {
		pk := f.event(fmt.Sprintf("evt_%d", i))
		f.route(t0, to(pk, rt("one", "x", fmt.Sprint(i+1)), rt("two", "x", fmt.Sprint(i+1))))
		r1 := f.step("one", "x", t0, c.one)
		r2 := f.step("two", "x", t0, c.two)
		if d := f.disposition(pk); d != c.want {
			t.Fatalf("case %d (%s, %s): event %s, want %s", i, r1.Disposition, r2.Disposition, d, c.want)
		}
	}
	if n := f.workCount(); n != 0 {
		t.Fatalf("WorkCount = %d after every item settled", n)
	}
}

func testReplay(t *testing.T, o Opener) {
	f := newPipe(t, o)
	ok := f.event("evt_ok")
	bad := f.event("evt_bad")
	f.route(t0, to(ok, rt("deals", "d1", "1")), to(bad, rt("deals", "d2", "1")))
	f.step("deals", "d1", t0, rev(1, `{"v":1}`, eff("deals:d1:r1:notify", "notify")))
	f.step("deals", "d2", t0, store.FlowApplyParams{Fail: "refetch: 503"})
	if d := f.disposition(bad); d != store.DispositionDeadLettered {
		t.Fatalf("failed event: %s", d)
	}
	before := f.projection("deals", "d1")
	at := t0.Add(time.Hour)
	id, err := f.s.ReplayCreate(f.ctx, &store.ReplayCreateParams{Now: at, Actor: "operator:ann", Selection: "flow deals since t0",
		Decisions: []*store.RouteDecision{
			to(ok, rt("deals", "d1", "1")),
			to(bad, rt("deals", "d2", "1"), store.Route{Flow: "other", Entity: "z", OrderKey: "1", Failed: "no entity"}),
		}})
	if err != nil || id <= 0 {
		t.Fatalf("ReplayCreate: %d %v", id, err)
	}
	if n := f.workCount(); n != 2 {
		t.Fatalf("WorkCount after replay = %d, want 2 (failed routes are not replayed)", n)
	}
	ws := f.pending("deals", "d1")
	if len(ws) != 1 || ws[0].ReplayID != id || ws[0].Event.PK != ok || ws[0].Event.EventID != "evt_ok" || string(ws[0].Event.Body) != `{"id":"evt_ok"}` {
		t.Fatalf("replayed work = %+v", ws)
	}
	if rows := f.audit("replay"); len(rows) != 1 || rows[0].Actor != "operator:ann" || !strings.Contains(rows[0].Detail, "flow deals since t0") {
		t.Fatalf("replay audit = %+v", rows)
	}
	r := f.step("deals", "d1", at, rev(1, `{"v":1}`, eff("deals:d1:r1:notify", "notify")))
	if r.Disposition != store.DispositionDuplicate || r.EffectsInserted != 0 {
		t.Fatalf("replay of an applied event: %+v", r)
	}
	after := f.projection("deals", "d1")
	if after.Version != before.Version || after.AppliedEventPK != before.AppliedEventPK || !after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Fatalf("replay changed the projection: %+v -> %+v", before, after)
	}
	if d := f.disposition(ok); d != store.DispositionApplied {
		t.Fatalf("replayed applied event is %s, want still applied", d)
	}
	r = f.step("deals", "d2", at, rev(1, `{"v":1}`, eff("deals:d2:r1:notify", "notify")))
	if r.Disposition != store.DispositionApplied || r.EffectsInserted != 1 {
		t.Fatalf("replay of a dead letter: %+v", r)
	}
	if d := f.disposition(bad); d != store.DispositionApplied {
		t.Fatalf("repaired event is %s, want applied", d)
	}
	if es := f.effects(&store.EffectListParams{}); len(es) != 2 {
		t.Fatalf("%d effects, want 2 (one per entity)", len(es))
	}
	// A replay of the same selection is another pass, with its own id.
	// The same route twice in one replay is one work item.
	id2, err := f.s.ReplayCreate(f.ctx, &store.ReplayCreateParams{Now: at, Actor: "operator:ann", Selection: "again",
		Decisions: []*store.RouteDecision{to(ok, rt("deals", "d1", "1")), to(ok, rt("deals", "d1", "1"))}})
	if err != nil || id2 == id {
		t.Fatalf("second replay: %d %v", id2, err)
	}
	if n := f.workCount(); n != 1 {
		t.Fatalf("WorkCount = %d after the second replay, want 1", n)
	}
	if pr := f.projection("deals", "d1"); pr.Pending != 1 {
		t.Fatalf("pending = %d after the second replay, want 1", pr.Pending)
	}
}

// An unordered replay re-applies an old hash: its effect's episode is
// already in the ledger and is counted, not inserted.
// testReplayKeepsDeadLetter: an event dead-lettered in one flow and
// applied in another stays dead-lettered when a replay takes it through
// the other flow alone (a replay of that flow, or one whose router fails
// the same route again and leaves it out): the failed route still stands,
// and the event must stay among the dead letters a person repairs. A
// replay in which the failed flow applies it repairs it.
func testReplayKeepsDeadLetter(t *testing.T, o Opener) {
	f := newPipe(t, o)
	pk := f.event("evt_1")
	f.route(t0, to(pk, rt("one", "x", "1"), store.Route{Flow: "two", Failed: "version.revision: want an integer"}))
	f.step("one", "x", t0, rev(1, `{}`))
	if d := f.disposition(pk); d != store.DispositionDeadLettered {
		t.Fatalf("event applied in one flow and dead-lettered in another is %s, want dead_lettered", d)
	}
	replay := func(at time.Time, routes ...store.Route) {
		t.Helper()
		if _, err := f.s.ReplayCreate(f.ctx, &store.ReplayCreateParams{Now: at, Actor: "operator:ann", Selection: "test",
			Decisions: []*store.RouteDecision{to(pk, routes...)}}); err != nil {
			t.Fatalf("ReplayCreate: %v", err)
		}
	}
	at := t0.Add(time.Hour)
	replay(at, rt("one", "x", "1"), store.Route{Flow: "two", Failed: "version.revision: want an integer"})
	if r := f.step("one", "x", at, rev(1, `{}`)); r.Disposition != store.DispositionDuplicate {
		t.Fatalf("replay in flow one: %+v", r)
	}
	if d := f.disposition(pk); d != store.DispositionDeadLettered {
		t.Fatalf("after a replay that left the failed flow out: %s, want still dead_lettered", d)
	}
	replay(at.Add(time.Hour), rt("two", "y", "1"))
	if r := f.step("two", "y", at.Add(time.Hour), rev(1, `{}`)); r.Disposition != store.DispositionApplied {
		t.Fatalf("replay in flow two: %+v", r)
	}
	if d := f.disposition(pk); d != store.DispositionApplied {
		t.Fatalf("after a replay that applied it in the failed flow: %s, want applied", d)
	}
}

func testReplayEpisodeExisting(t *testing.T, o Opener) {
	f := newPipe(t, o)
	a := f.event("evt_a")
	b := f.event("evt_b")
	f.route(t0, to(a, rt("sync", "c1", "1")), to(b, rt("sync", "c1", "2")))
	f.step("sync", "c1", t0, hash("aaa", `{"n":1}`, eff("sync:c1:aaa:mail", "mail")))
	f.step("sync", "c1", t0, hash("bbb", `{"n":2}`))
	if _, err := f.s.ReplayCreate(f.ctx, &store.ReplayCreateParams{Now: t0, Actor: "operator:ann", Selection: "evt_a",
		Decisions: []*store.RouteDecision{to(a, rt("sync", "c1", "1"))}}); err != nil {
		t.Fatal(err)
	}
	r := f.step("sync", "c1", t0, hash("aaa", `{"n":1}`, eff("sync:c1:aaa:mail", "mail")))
	if r.Disposition != store.DispositionApplied || r.EffectsInserted != 0 || r.EffectsExisting != 1 {
		t.Fatalf("replay: %+v, want applied with the effect counted as existing", r)
	}
	if es := f.effects(&store.EffectListParams{}); len(es) != 1 {
		t.Fatalf("%d effects, want 1", len(es))
	}
}

func testWorkListPendingOrder(t *testing.T, o Opener) {
	f := newPipe(t, o)
	keys := []string{"b", "a-2", "Z", "a-10", "b"}
	var ds []*store.RouteDecision
	for i, k := range keys {
		pk := f.event(fmt.Sprintf("evt_%d", i), caused(fmt.Sprintf("c%d", i), i))
		ds = append(ds, to(pk, rt("f", "e", k)))
	}
	f.route(t0, ds...)
	ws := f.pending("f", "e")
	var got []string
	for _, w := range ws {
		got = append(got, w.OrderKey+"/"+w.Event.EventID)
		if w.Flow != "f" || w.Entity != "e" || w.ReplayID != 0 || w.Event.CausationID == "" {
			t.Fatalf("work item = %+v", w)
		}
	}
	// Byte order: upper case before lower case, "a-10" before "a-2"; equal
	// keys in id order.
	want := "Z/evt_2 a-10/evt_3 a-2/evt_1 b/evt_0 b/evt_4"
	if strings.Join(got, " ") != want {
		t.Fatalf("pending order %v, want %s", got, want)
	}
	if ws, _ := f.s.WorkListPending(f.ctx, &store.WorkListPendingParams{Flow: "f", Entity: "e", Limit: 2}); len(ws) != 2 {
		t.Fatalf("limit 2 returned %d", len(ws))
	}
	if ws := f.pending("f", "other"); len(ws) != 0 {
		t.Fatalf("other entity has %d items", len(ws))
	}
	// A group lists each entity as WorkListPending would: its own items,
	// in business order, up to its own limit, and none for an entity
	// without work, whatever its place in the group.
	pk := f.event("evt_g", caused("cg", 1))
	f.route(t0, to(pk, rt("g", "e", "k")))
	groups, err := f.s.WorkListPendingGroup(f.ctx, []*store.WorkListPendingParams{
		{Flow: "f", Entity: "other"}, {Flow: "f", Entity: "e", Limit: 3}, {Flow: "g", Entity: "e"}, {Flow: "f", Entity: "e"},
	})
	if err != nil {
		t.Fatalf("WorkListPendingGroup: %v", err)
	}
	summary := func(ws []*store.WorkItem) string {
		var out []string
		for _, w := range ws {
			out = append(out, w.Flow+"/"+w.OrderKey+"/"+w.Event.EventID)
			if w.Event.CausationID == "" || len(w.Event.Body) == 0 || w.ID == 0 {
				t.Fatalf("group work item = %+v", w)
			}
		}
		return strings.Join(out, " ")
	}
	for i, want := range []string{"", "f/Z/evt_2 f/a-10/evt_3 f/a-2/evt_1", "g/k/evt_g",
		"f/Z/evt_2 f/a-10/evt_3 f/a-2/evt_1 f/b/evt_0 f/b/evt_4"} {
		if got := summary(groups[i]); got != want {
			t.Fatalf("group entry %d: %q, want %q", i, got, want)
		}
	}
}

func testWorkCount(t *testing.T, o Opener) {
	f := newPipe(t, o)
	a := f.event("evt_a")
	f.event("evt_b")
	c := f.event("evt_c")
	if n := f.workCount(); n != 3 {
		t.Fatalf("WorkCount = %d, want 3 unrouted", n)
	}
	f.route(t0, to(a, rt("one", "x", "1"), rt("two", "x", "1")), to(c))
	if n := f.workCount(); n != 3 {
		t.Fatalf("WorkCount = %d, want 2 work items + 1 unrouted", n)
	}
	f.step("one", "x", t0, rev(1, `{}`))
	if n := f.workCount(); n != 2 {
		t.Fatalf("WorkCount = %d, want 2", n)
	}
}

func testFlowApplyIdempotent(t *testing.T, o Opener) {
	f := newPipe(t, o)
	pk := f.event("evt_1")
	f.route(t0, to(pk, rt("deals", "d1", "1")))
	l := f.lease("deals", "d1", t0)
	ws := f.pending("deals", "d1")
	ap := rev(1, `{"v":1}`, eff("deals:d1:r1:notify", "notify"))
	ap.Lease, ap.Now, ap.WorkID, ap.EventPK, ap.Actor = l, t0, ws[0].ID, pk, "worker"
	r1, err := f.s.FlowApply(f.ctx, &ap)
	if err != nil || r1.Disposition != store.DispositionApplied || r1.EffectsInserted != 1 {
		t.Fatalf("first apply: %+v %v", r1, err)
	}
	ap.Version, ap.VersionSort, ap.State = "r2", "0000000002", []byte(`{"v":2}`)
	r2, err := f.s.FlowApply(f.ctx, &ap)
	if err != nil || r2.Disposition != store.DispositionApplied || r2.EffectsInserted != 0 || r2.EffectsExisting != 0 {
		t.Fatalf("second apply of a settled item: %+v %v", r2, err)
	}
	pr := f.projection("deals", "d1")
	if pr.Version != "r1" || pr.Pending != 0 {
		t.Fatalf("projection = %+v, want r1 and pending 0 (settled once)", pr)
	}
	if rows := f.audit("work_settled"); len(rows) != 1 {
		t.Fatalf("%d work_settled rows, want 1", len(rows))
	}
	// A failed item reports its reason again.
	pk2 := f.event("evt_2")
	f.route(t0, to(pk2, rt("deals", "d1", "2")))
	ws = f.pending("deals", "d1")
	fail := store.FlowApplyParams{Lease: l, Now: t0, WorkID: ws[0].ID, EventPK: pk2, Actor: "worker", Fail: "refetch: 404"}
	for i := range 2 {
		r, err := f.s.FlowApply(f.ctx, &fail)
		if err != nil || r.Disposition != store.DispositionDeadLettered || r.Reason != "refetch: 404" {
			t.Fatalf("fail %d: %+v %v", i, r, err)
		}
	}
	// A work item of another entity is refused under this lease.
	pk3 := f.event("evt_3")
	f.route(t0, to(pk3, rt("deals", "d9", "1")))
	other := f.pending("deals", "d9")
	bad := store.FlowApplyParams{Lease: l, Now: t0, WorkID: other[0].ID, EventPK: pk3, Actor: "worker", Fail: "x"}
	if _, err := f.s.FlowApply(f.ctx, &bad); err == nil {
		t.Fatalf("FlowApply settled another entity's work under this lease")
	}
	if ws := f.pending("deals", "d9"); len(ws) != 1 {
		t.Fatalf("refused apply settled the item")
	}
}

func testProjectionGetAbsent(t *testing.T, o Opener) {
	f := newPipe(t, o)
	if pr := f.projection("deals", "nope"); pr != nil {
		t.Fatalf("projection of an unknown entity = %+v, want nil", pr)
	}
	pk := f.event("evt_1")
	f.route(t0.Add(time.Second), to(pk, rt("deals", "d1", "1")))
	pr := f.projection("deals", "d1")
	if pr == nil || pr.Version != "" || pr.Pending != 1 || pr.AppliedEventPK != 0 || !pr.UpdatedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("projection before any apply = %+v", pr)
	}
}

// Flows settling their items of one event at the same moment must leave
// the event settled: each must see the others' settled items, or the event
// stays accepted forever. Concurrent first visits of one causation must
// elect exactly one first visitor.
func testConcurrentSettle(t *testing.T, o Opener) {
	f := newPipe(t, o)
	const flows = 8
	for round := range 3 {
		pk := f.event(fmt.Sprintf("evt_%d", round), caused(fmt.Sprintf("cause-%d", round), 0))
		var routes []store.Route
		for i := range flows {
			routes = append(routes, rt(fmt.Sprintf("flow%d", i), fmt.Sprintf("e%d", round), "1"))
		}
		other := f.event(fmt.Sprintf("evt_other_%d", round), caused(fmt.Sprintf("cause-%d", round), 0))
		f.route(t0, to(pk, routes...), to(other, rt("flow0", fmt.Sprintf("x%d", round), "1")))
		at := t0.Add(time.Duration(round) * time.Hour)
		leases := f.claim("w", at, 1000)
		if len(leases) != flows+1 {
			t.Fatalf("round %d: %d leases, want %d", round, len(leases), flows+1)
		}
		var wg sync.WaitGroup
		results := make([]*store.FlowApplyResult, len(leases))
		errs := make([]error, len(leases))
		for i, l := range leases {
			ws := f.pending(l.Flow, l.Entity)
			if len(ws) != 1 {
				t.Fatalf("%s/%s: %d pending", l.Flow, l.Entity, len(ws))
			}
			ap := rev(1, `{}`)
			ap.Lease, ap.Now, ap.WorkID, ap.EventPK, ap.Actor = l, at, ws[0].ID, ws[0].Event.PK, "worker"
			ap.CausationID, ap.MaxHops = ws[0].Event.CausationID, 10
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = f.s.FlowApply(f.ctx, &ap)
			}()
		}
		wg.Wait()
		blocked := 0
		for i := range leases {
			if errs[i] != nil {
				t.Fatalf("round %d: FlowApply %s/%s: %v", round, leases[i].Flow, leases[i].Entity, errs[i])
			}
			if strings.HasPrefix(results[i].Reason, "loop_blocked:") {
				blocked++
			}
		}
		if blocked != 1 {
			t.Fatalf("round %d: %d loop_blocked results, want exactly 1 (two events, one causation, flow0)", round, blocked)
		}
		if d := f.disposition(pk); d != store.DispositionApplied {
			t.Fatalf("round %d: event is %s after every flow settled it, want applied", round, d)
		}
		if n := f.workCount(); n != 0 {
			t.Fatalf("round %d: WorkCount = %d", round, n)
		}
	}
}

// Two processes (two handles on one database) route, claim and apply the
// same events at once: every event is processed exactly once.
func testTwoProcesses(t *testing.T, o Opener) {
	if o.Reopen == nil {
		t.Skip("driver offers no second handle")
	}
	f := newPipe(t, o)
	handles := []store.Store{f.s, o.Reopen(t, f.s)}
	const n = 12
	for i := range n {
		f.event(fmt.Sprintf("evt_%02d", i))
	}
	var wg sync.WaitGroup
	errs := make([]error, len(handles))
	settled := make([]int, len(handles))
	for h, s := range handles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[h] = func() error {
				evs, err := s.EventListUnrouted(f.ctx, &store.EventListUnroutedParams{})
				if err != nil {
					return err
				}
				var ds []*store.RouteDecision
				for _, e := range evs {
					ds = append(ds, to(e.PK, rt("deals", e.Entity, "1")))
				}
				if err := s.EventRoute(f.ctx, &store.EventRouteParams{Now: t0, Decisions: ds}); err != nil {
					return err
				}
				for range n {
					ls, err := s.EntityClaim(f.ctx, &store.EntityClaimParams{Owner: fmt.Sprint("p", h), Now: t0, LeaseFor: time.Minute, Limit: 3})
					if err != nil {
						return err
					}
					for _, l := range ls {
						ws, err := s.WorkListPending(f.ctx, &store.WorkListPendingParams{Flow: l.Flow, Entity: l.Entity})
						if err != nil {
							return err
						}
						for _, w := range ws {
							ap := rev(1, `{}`, eff("deals:"+l.Entity+":r1:notify", "notify"))
							ap.Lease, ap.Now, ap.WorkID, ap.EventPK, ap.Actor = l, t0, w.ID, w.Event.PK, "worker"
							if _, err := s.FlowApply(f.ctx, &ap); err != nil {
								return err
							}
							settled[h]++
						}
					}
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	for h, err := range errs {
		if err != nil {
			t.Fatalf("process %d: %v", h, err)
		}
	}
	if settled[0]+settled[1] != n {
		t.Fatalf("processes settled %d + %d items, want %d in all", settled[0], settled[1], n)
	}
	if rows := f.audit("work_settled"); len(rows) != n {
		t.Fatalf("%d work_settled rows, want %d", len(rows), n)
	}
	if es := f.effects(&store.EffectListParams{}); len(es) != n {
		t.Fatalf("%d effects, want %d", len(es), n)
	}
	for _, e := range events(t, f.s, &store.EventListParams{}) {
		if e.Disposition != store.DispositionApplied {
			t.Fatalf("event %s is %s", e.EventID, e.Disposition)
		}
	}
	if c := f.workCount(); c != 0 {
		t.Fatalf("WorkCount = %d", c)
	}
}

// testSkippedEffects: an effect the flow chose not to create is recorded
// in the audit trail with why, when (and only when) its event is applied,
// and it supersedes nothing: the pending effect of the same name carries
// the state that still has to be sent.
func testSkippedEffects(t *testing.T, o Opener) {
	f := newPipe(t, o)
	// Work is taken in order key order; the third event carries an older
	// revision than the one applied.
	e1, e2, e3 := f.event("evt_1"), f.event("evt_2"), f.event("evt_3")
	f.route(t0, to(e1, rt("plans", "u1", "1")), to(e2, rt("plans", "u1", "2")), to(e3, rt("plans", "u1", "3")))
	f.step("plans", "u1", t0, rev(1, `{"plan":"pro"}`, eff("plans:u1:r1:track", "track")))
	skip := func(p store.FlowApplyParams, key string) store.FlowApplyParams {
		p.Skipped = []*store.SkippedEffect{{EpisodeKey: key, Effect: "track", Destination: "braze", Reason: "unchanged since r1"}}
		return p
	}
	r := f.step("plans", "u1", t0.Add(time.Second), skip(rev(2, `{"plan":"pro"}`), "plans:u1:r2:track"))
	if r.Disposition != store.DispositionApplied || r.EffectsSkipped != 1 || r.EffectsInserted != 0 || r.Superseded != 0 {
		t.Fatalf("r2: %+v, want applied with one skipped effect and nothing superseded", r)
	}
	rows := f.audit("effect_skipped")
	if len(rows) != 1 || rows[0].Detail != "plans:u1:r2:track: unchanged since r1" || rows[0].Entity != "u1" || rows[0].EventID != "evt_2" {
		t.Fatalf("effect_skipped audit = %+v", rows)
	}
	if es := f.effects(&store.EffectListParams{Flow: "plans"}); len(es) != 1 || es[0].Version != "r1" || es[0].State != store.EffectApproved {
		t.Fatalf("effects = %+v, want r1's still approved", es)
	}
	// A stale event applies nothing, so it records no skip either.
	if r := f.step("plans", "u1", t0.Add(2*time.Second), skip(rev(0, `{"plan":"pro"}`), "plans:u1:r0:track")); r.Disposition != store.DispositionStale || r.EffectsSkipped != 0 {
		t.Fatalf("stale r0: %+v", r)
	}
	if rows := f.audit("effect_skipped"); len(rows) != 1 {
		t.Fatalf("a stale event recorded a skip: %+v", rows)
	}
}

// testEqualJSON: the ledger's equality questions are about JSON values,
// not text, on every driver (PostgreSQL's jsonb reorders keys and
// respaces; SQLite keeps the text). The same version with the same state
// written differently is a duplicate, not a version conflict, and the same
// episode key with the same request written differently is no key
// conflict; a number that differs only beyond float64's precision is a
// different state.
func testEqualJSON(t *testing.T, o Opener) {
	f := newPipe(t, o)
	req := func(key, body string) *store.EffectInsert {
		e := eff(key, "notify")
		e.Request = []byte(body)
		return e
	}
	steps := []struct {
		ap   store.FlowApplyParams
		want store.Disposition
	}{
		{rev(2, `{"a":1,"b":[1,2],"n":9007199254740993}`, req("k2", `{"x":1,"y":"z"}`)), store.DispositionApplied},
		{rev(2, `{"n":9007199254740993, "b":[1, 2.0], "a":1e0}`), store.DispositionDuplicate},
		{rev(2, `{"a":1,"b":[1,2],"n":9007199254740992}`), store.DispositionDeadLettered},
		{rev(3, `{"a":3}`, req("k2", `{ "y": "z", "x": 1.0 }`)), store.DispositionApplied},
		{rev(4, `{"a":4}`, req("k2", `{"y":"z","x":2}`)), store.DispositionApplied},
	}
	for i := range steps {
		pk := f.event(fmt.Sprintf("evt_%d", i))
		f.route(t0, to(pk, rt("deals", "d1", fmt.Sprintf("k%d", i))))
	}
	for i, s := range steps {
		res := f.step("deals", "d1", t0.Add(time.Duration(i)*time.Second), s.ap)
		if res.Disposition != s.want {
			t.Fatalf("step %d: %s %q, want %s", i, res.Disposition, res.Reason, s.want)
		}
	}
	// Step 3 repeats k2 with an equal request: no conflict; step 4 with
	// another request: one.
	if rows := f.audit("key_conflict"); len(rows) != 2 || !strings.Contains(rows[0].Detail, "version_conflict") && !strings.Contains(rows[0].Detail, "r2") ||
		!strings.Contains(rows[1].Detail, "k2") {
		t.Fatalf("key_conflict audit = %+v, want the version conflict of step 2 and the episode conflict of step 4", rows)
	}
}

// testApplyBatch: FlowApplyBatch settles a leased entity's items in one
// transaction exactly as FlowApply would one by one (each item sees the
// projection the one before it wrote), releases a drained entity with the
// last item, and rolls every item back when any fails.
func testApplyBatch(t *testing.T, o Opener) {
	f := newPipe(t, o)
	var pks []int64
	for i := range 4 {
		pk := f.event(fmt.Sprintf("evt_%d", i))
		pks = append(pks, pk)
		f.route(t0, to(pk, rt("deals", "d1", fmt.Sprintf("k%d", i))))
	}
	params := func(l *store.Lease, at time.Time, ws []*store.WorkItem, aps ...store.FlowApplyParams) []*store.FlowApplyParams {
		var ps []*store.FlowApplyParams
		for i := range aps {
			ap := aps[i]
			ap.Lease, ap.Now, ap.WorkID, ap.EventPK, ap.Actor = l, at, ws[i].ID, ws[i].Event.PK, "worker"
			ps = append(ps, &ap)
		}
		return ps
	}

	// A batch that fails on its second item (it names another event)
	// writes nothing, not even the first item.
	l := f.lease("deals", "d1", t0)
	ws := f.pending("deals", "d1")
	bad := params(l, t0, ws, rev(1, `{"s":1}`, eff("e1", "notify")), rev(2, `{"s":2}`))
	bad[1].EventPK = pks[3]
	if _, err := f.s.FlowApplyBatch(f.ctx, bad); err == nil {
		t.Fatal("FlowApplyBatch with a wrong event: no error")
	}
	if got := len(f.pending("deals", "d1")); got != 4 {
		t.Fatalf("after the failed batch %d items pending, want 4: the first item was not rolled back", got)
	}
	if pr := f.projection("deals", "d1"); pr.VersionSort != "" {
		t.Fatalf("after the failed batch the projection is %s, want none", pr.Version)
	}

	// A batch with a lost lease writes nothing either.
	stale := params(l, l.Until.Add(time.Second), ws, rev(1, `{"s":1}`))
	if _, err := f.s.FlowApplyBatch(f.ctx, stale); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("FlowApplyBatch after the lease: %v, want ErrLeaseLost", err)
	}

	// The whole backlog in one batch: the third item is older than the
	// second, which it sees applied.
	ps := params(l, t0, ws, rev(1, `{"s":1}`, eff("e1", "notify")), rev(3, `{"s":3}`, eff("e3", "notify")),
		rev(2, `{"s":2}`, eff("e2", "notify")), rev(3, `{"s":3}`))
	ps[3].ReleaseIfDrained = true
	res, err := f.s.FlowApplyBatch(f.ctx, ps)
	if err != nil {
		t.Fatalf("FlowApplyBatch: %v", err)
	}
	want := []store.Disposition{store.DispositionApplied, store.DispositionApplied, store.DispositionStale, store.DispositionDuplicate}
	for i, r := range res {
		if r.Disposition != want[i] {
			t.Fatalf("item %d: %s %q, want %s", i, r.Disposition, r.Reason, want[i])
		}
		if d := f.disposition(pks[i]); d != want[i] {
			t.Fatalf("event %d: disposition %s, want %s", i, d, want[i])
		}
	}
	if res[1].Superseded != 1 || !res[3].Released || res[0].Released {
		t.Fatalf("results %+v %+v %+v: want r3 to supersede e1 and the last item to release", res[0], res[1], res[3])
	}
	pr := f.projection("deals", "d1")
	if pr.Version != "r3" || pr.Pending != 0 || pr.AppliedEventPK != pks[1] {
		t.Fatalf("projection %+v, want r3 from event %d with nothing pending", pr, pks[1])
	}
	if f.workCount() != 0 {
		t.Fatalf("work pending after the batch: %d", f.workCount())
	}
	// Released: another worker claims nothing (no pending work), and a
	// new event makes the entity claimable at once.
	pk := f.event("evt_late")
	f.route(t0, to(pk, rt("deals", "d1", "k9")))
	if l2 := f.lease("deals", "d1", t0.Add(time.Second)); l2 == nil || l2.Token == l.Token {
		t.Fatalf("entity not claimable after the drained release: %+v", l2)
	}
}

// testCrossedBatches: two flows share a page of events and order them
// oppositely (one by revision, one by another key), and each settles its
// page in one FlowApplyBatch at the same moment. Every batch must commit:
// a batch that locked its events in its own business order would wait on
// the other in a circle (a deadlock on PostgreSQL), so the events' locks
// are taken in one order first.
func testCrossedBatches(t *testing.T, o Opener) {
	f := newPipe(t, o)
	const page = 6
	for round := range 12 {
		entity := fmt.Sprintf("e%d", round)
		var pks []int64
		for i := range page {
			pk := f.event(fmt.Sprintf("evt_%d_%d", round, i))
			pks = append(pks, pk)
			f.route(t0, to(pk, rt("up", entity, fmt.Sprintf("k%02d", i)), rt("down", entity, fmt.Sprintf("k%02d", page-i))))
		}
		at := t0.Add(time.Duration(round) * time.Hour)
		leases := f.claim("w", at, 1000)
		if len(leases) != 2 {
			t.Fatalf("round %d: %d leases, want 2", round, len(leases))
		}
		var wg sync.WaitGroup
		errs := make([]error, len(leases))
		results := make([][]*store.FlowApplyResult, len(leases))
		for i, l := range leases {
			ws := f.pending(l.Flow, l.Entity)
			var ps []*store.FlowApplyParams
			for j, w := range ws {
				ap := rev(j+1, fmt.Sprintf(`{"n":%d}`, j+1))
				ap.Lease, ap.Now, ap.WorkID, ap.EventPK, ap.Actor = l, at, w.ID, w.Event.PK, "worker"
				ps = append(ps, &ap)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = f.s.FlowApplyBatch(f.ctx, ps)
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: FlowApplyBatch of %s: %v", round, leases[i].Flow, err)
			}
			if len(results[i]) != page {
				t.Fatalf("round %d: %s settled %d items, want %d", round, leases[i].Flow, len(results[i]), page)
			}
		}
		for _, pk := range pks {
			if d := f.disposition(pk); d != store.DispositionApplied {
				t.Fatalf("round %d: event %d is %s after both flows settled it, want applied", round, pk, d)
			}
		}
		if n := f.workCount(); n != 0 {
			t.Fatalf("round %d: WorkCount = %d", round, n)
		}
	}
}

// testApplyGroupClaim: FlowApplyGroupClaim settles as FlowApplyGroup
// would and, in the same transaction, claims due effects as EffectClaim
// would: a lone submission's effect is leased to the claim's owner when
// the call returns, a second claim finds nothing, and a claim for a
// destination with nothing due takes nothing.
func testApplyGroupClaim(t *testing.T, o Opener) {
	f := newPipe(t, o)
	a := f.event("evt_a")
	f.route(t0, to(a, rt("deals", "a", "k1")))
	b := f.event("evt_b")
	f.route(t0, to(b, rt("deals", "b", "k1")))
	at := t0.Add(time.Minute)
	leases := map[string]*store.Lease{}
	for _, l := range f.claim("w", at, 10) {
		leases[l.Entity] = l
	}
	sub := func(entity string, pk int64, e *store.EffectInsert) []*store.FlowApplyParams {
		ws := f.pending("deals", entity)
		ap := rev(1, `{"s":1}`, e)
		ap.Lease, ap.Now, ap.WorkID, ap.EventPK, ap.Actor, ap.ReleaseIfDrained = leases[entity], at, ws[0].ID, pk, "worker", true
		return []*store.FlowApplyParams{&ap}
	}
	claim := func(dest string, limit int) *store.EffectClaimParams {
		return &store.EffectClaimParams{Owner: "deliverer", Now: at, LeaseFor: time.Minute, Limit: limit, Destinations: []string{dest}}
	}
	// A lone submission.
	outs, claimed := f.s.FlowApplyGroupClaim(f.ctx, [][]*store.FlowApplyParams{sub("a", a, eff("ka", "notify"))},
		[]*store.EffectClaimParams{claim("crm", 2), claim("billing", 2)})
	if len(outs) != 1 || outs[0].Err != nil || outs[0].Results[0].EffectsInserted != 1 || !outs[0].Results[0].Released {
		t.Fatalf("lone submission: %+v", outs)
	}
	if len(claimed) != 2 || len(claimed[0]) != 1 || claimed[0][0].EpisodeKey != "ka" || claimed[0][0].Token == "" ||
		!claimed[0][0].Until.Equal(at.Add(time.Minute)) || len(claimed[1]) != 0 {
		t.Fatalf("claimed with the lone submission: %+v; want ka leased for a minute, nothing for billing", claimed)
	}
	if again, err := f.s.EffectClaim(f.ctx, claim("crm", 10)); err != nil || len(again) != 0 {
		t.Fatalf("EffectClaim after the handoff: %d effects, %v; want none (ka is leased)", len(again), err)
	}
	// The claim is a lease like any other: the call settles under it.
	c := claimed[0][0]
	if err := f.s.EffectSettle(f.ctx, &store.EffectSettleParams{EffectID: c.ID, Token: c.Token, Now: at, State: store.EffectDone,
		Attempt: &store.Attempt{EffectID: c.ID, StartedAt: at, Status: 200}}); err != nil {
		t.Fatalf("settle the handed-off effect: %v", err)
	}
	// Without claims it is FlowApplyGroup.
	outs, claimed = f.s.FlowApplyGroupClaim(f.ctx, [][]*store.FlowApplyParams{sub("b", b, eff("kb", "notify"))}, nil)
	if len(outs) != 1 || outs[0].Err != nil || claimed != nil {
		t.Fatalf("without claims: %+v, claimed %v", outs, claimed)
	}
	if due, err := f.s.EffectClaim(f.ctx, claim("crm", 10)); err != nil || len(due) != 1 || due[0].EpisodeKey != "kb" {
		t.Fatalf("EffectClaim after a group without claims: %+v, %v; want kb", due, err)
	}
}

// testApplyGroup: several entities' pages settled by one FlowApplyGroup.
// Each submission gets what FlowApplyBatch would have given it alone: a
// lost lease fails only its own submission (and writes nothing of it), a
// submission with a bad item fails only itself, and an event shared by two
// flows in the group, both of whose items the group settles, ends with the
// aggregate disposition of both.
func testApplyGroup(t *testing.T, o Opener) {
	f := newPipe(t, o)
	shared := f.event("evt_shared")
	f.route(t0, to(shared, rt("up", "s1", "k1"), rt("down", "s1", "k1")))
	var pks []int64
	for i := range 3 {
		pk := f.event(fmt.Sprintf("evt_a%d", i))
		pks = append(pks, pk)
		f.route(t0, to(pk, rt("deals", "a", fmt.Sprintf("k%d", i))))
	}
	lost := f.event("evt_lost")
	f.route(t0, to(lost, rt("deals", "lost", "k1")))
	bad := f.event("evt_bad")
	f.route(t0, to(bad, rt("deals", "bad", "k1")))
	good := f.event("evt_good")
	f.route(t0, to(good, rt("deals", "good", "k1")))
	// deals/more has two items and settles one: it must keep its lease.
	for i := range 2 {
		f.route(t0, to(f.event(fmt.Sprintf("evt_more%d", i)), rt("deals", "more", fmt.Sprintf("k%d", i))))
	}

	at := t0.Add(time.Minute)
	leases := map[string]*store.Lease{}
	for _, l := range f.claim("w", at, 1000) {
		leases[l.Flow+"/"+l.Entity] = l
	}
	if len(leases) != 7 {
		t.Fatalf("claimed %d entities, want 7", len(leases))
	}
	page := func(key string, aps ...store.FlowApplyParams) []*store.FlowApplyParams {
		l := leases[key]
		ws := f.pending(l.Flow, l.Entity)
		var ps []*store.FlowApplyParams
		for i := range aps {
			ap := aps[i]
			ap.Lease, ap.Now, ap.WorkID, ap.EventPK, ap.Actor = l, at, ws[i].ID, ws[i].Event.PK, "worker"
			ps = append(ps, &ap)
		}
		ps[len(ps)-1].ReleaseIfDrained = true
		return ps
	}
	subs := [][]*store.FlowApplyParams{
		page("deals/a", rev(1, `{"s":1}`, eff("a1", "notify")), rev(3, `{"s":3}`, eff("a3", "notify")), rev(2, `{"s":2}`)),
		page("up/s1", rev(1, `{"u":1}`, eff("u1", "notify"))),
		page("deals/lost", rev(1, `{"l":1}`, eff("l1", "notify"))),
		page("down/s1", rev(1, `{"d":1}`)),
		page("deals/more", rev(1, `{"m":1}`)),
	}
	// The lost lease: another worker holds the entity now.
	f.release(leases["deals/lost"], at, time.Time{})
	f.claim("other", at, 1000)

	outs := f.s.FlowApplyGroup(f.ctx, subs)
	if len(outs) != len(subs) {
		t.Fatalf("%d outcomes for %d submissions", len(outs), len(subs))
	}
	if !errors.Is(outs[2].Err, store.ErrLeaseLost) {
		t.Fatalf("the lost lease's submission: %v, want ErrLeaseLost", outs[2].Err)
	}
	for _, i := range []int{0, 1, 3, 4} {
		if outs[i].Err != nil || len(outs[i].Results) != len(subs[i]) {
			t.Fatalf("submission %d: %d results, %v", i, len(outs[i].Results), outs[i].Err)
		}
	}
	// Drained entities are released, the one with work left is not.
	if !outs[1].Results[0].Released || !outs[3].Results[0].Released || outs[4].Results[0].Released {
		t.Fatalf("released: up/s1 %v, down/s1 %v, deals/more %v; want true, true, false",
			outs[1].Results[0].Released, outs[3].Results[0].Released, outs[4].Results[0].Released)
	}
	// A submission with a bad item (it names an event its item is not
	// for) fails alone; the other in its group settles.
	badSubs := [][]*store.FlowApplyParams{
		page("deals/bad", rev(1, `{"b":1}`, eff("b1", "notify"))),
		page("deals/good", rev(1, `{"g":1}`, eff("g1", "notify"))),
	}
	badSubs[0][0].EventPK = pks[0]
	badOuts := f.s.FlowApplyGroup(f.ctx, badSubs)
	if badOuts[0].Err == nil || errors.Is(badOuts[0].Err, store.ErrLeaseLost) {
		t.Fatalf("the bad submission: %v, want its own error", badOuts[0].Err)
	}
	if badOuts[1].Err != nil || len(badOuts[1].Results) != 1 || badOuts[1].Results[0].Disposition != store.DispositionApplied {
		t.Fatalf("the good submission beside the bad one: %+v", badOuts[1])
	}
	want := []store.Disposition{store.DispositionApplied, store.DispositionApplied, store.DispositionStale}
	for i, r := range outs[0].Results {
		if r.Disposition != want[i] || f.disposition(pks[i]) != want[i] {
			t.Fatalf("deals/a item %d: %s (event %s), want %s", i, r.Disposition, f.disposition(pks[i]), want[i])
		}
	}
	if r := outs[0].Results; r[1].Superseded != 1 || r[0].EffectsInserted != 1 || !r[2].Released {
		t.Fatalf("deals/a results %+v %+v %+v: want r3 to supersede a1 and the last item to release", r[0], r[1], r[2])
	}
	if pr := f.projection("deals", "a"); pr.Version != "r3" || pr.Pending != 0 || pr.AppliedEventPK != pks[1] {
		t.Fatalf("deals/a projection %+v, want r3 from event %d", pr, pks[1])
	}
	// Both flows settled the shared event in the group: applied.
	if d := f.disposition(shared); d != store.DispositionApplied {
		t.Fatalf("the shared event is %s, want applied", d)
	}
	for _, e := range []string{"up/s1", "down/s1"} {
		if pr := f.projection(strings.Split(e, "/")[0], "s1"); pr.Version != "r1" || pr.Pending != 0 {
			t.Fatalf("%s projection %+v, want r1, nothing pending", e, pr)
		}
	}
	// Nothing of the failed submissions was written.
	for _, e := range []string{"lost", "bad"} {
		if pr := f.projection("deals", e); pr.VersionSort != "" || pr.Pending != 1 {
			t.Fatalf("deals/%s projection %+v after its failed submission, want nothing applied and 1 pending", e, pr)
		}
	}
	if n := f.workCount(); n != 3 {
		t.Fatalf("WorkCount = %d, want 3 (the failed submissions' items and deals/more's second)", n)
	}
	var keys []string
	for _, e := range f.effects(&store.EffectListParams{Limit: 100}) {
		keys = append(keys, e.EpisodeKey+" "+string(e.State))
	}
	slices.Sort(keys)
	if got := strings.Join(keys, ", "); got != "a1 superseded, a3 approved, g1 approved, u1 approved" {
		t.Fatalf("effects: %s", got)
	}
	// The audit rows of the group keep each item's order: a3's approval
	// comes after a1's supersession, which comes after a1's approval.
	var order []string
	rows, err := f.s.AuditList(f.ctx, &store.AuditListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range rows {
		if a.Action == store.ActionEffectApproved || a.Action == store.ActionEffectSuperseded {
			order = append(order, a.Action+" "+strings.Fields(a.Detail)[0])
		}
	}
	if got := strings.Join(order, ", "); !strings.Contains(got, "effect_approved a1, effect_superseded a1, effect_approved a3") {
		t.Fatalf("audit order: %s", got)
	}
	// The releases freed the leases in the database: new work for deals/a
	// is claimable at once, while deals/more stays leased to its worker.
	f.route(at, to(f.event("evt_a_next"), rt("deals", "a", "k9")))
	var claimed []string
	for _, l := range f.claim("third", at, 1000) {
		claimed = append(claimed, l.Flow+"/"+l.Entity)
	}
	if got := strings.Join(claimed, ", "); got != "deals/a" {
		t.Fatalf("a third worker claimed [%s], want [deals/a]", got)
	}
}

// A routable event carries the Content-Type of its first delivery, as the
// work list gives it to the processor (a forward sends it on with the
// body): a later delivery's does not replace it, and a delivery that kept
// none gives "".
func testRoutableContentType(t *testing.T, o Opener) {
	f := newPipe(t, o)
	const form = "application/x-www-form-urlencoded; charset=utf-8"
	a := f.event("ct_a", func(d *store.DeliveryInput) { d.Headers = map[string]string{"Content-Type": form, "User-Agent": "x"} })
	again := delivery("crm", "ct_a", 1)
	again.Type, again.Entity, again.Headers = "deal.updated", "deal_ct_a", map[string]string{"Content-Type": "text/plain"}
	if res := commit(t, f.s, one(again)); res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	b := f.event("ct_b", func(d *store.DeliveryInput) { d.Headers = nil })
	evs, err := f.s.EventListUnrouted(f.ctx, &store.EventListUnroutedParams{Limit: 10})
	if err != nil || len(evs) != 2 {
		t.Fatalf("EventListUnrouted: %v %d events", err, len(evs))
	}
	if evs[0].ContentType != form || evs[1].ContentType != "" {
		t.Fatalf("unrouted content types %q, %q; want the first delivery's %q, then none", evs[0].ContentType, evs[1].ContentType, form)
	}
	f.route(t0, to(a, rt("fwd", "ct_a", "1")), to(b, rt("fwd", "ct_b", "1")))
	if ws := f.pending("fwd", "ct_a"); len(ws) != 1 || ws[0].Event.ContentType != form {
		t.Fatalf("WorkListPending gave %+v, want the first delivery's Content-Type", ws)
	}
	groups, err := f.s.WorkListPendingGroup(f.ctx, []*store.WorkListPendingParams{{Flow: "fwd", Entity: "ct_a", Limit: 5}, {Flow: "fwd", Entity: "ct_b", Limit: 5}})
	if err != nil || len(groups) != 2 || len(groups[0]) != 1 || len(groups[1]) != 1 {
		t.Fatalf("WorkListPendingGroup: %v %v", err, groups)
	}
	if groups[0][0].Event.ContentType != form || groups[1][0].Event.ContentType != "" {
		t.Fatalf("group content types %q, %q; want %q, then none", groups[0][0].Event.ContentType, groups[1][0].Event.ContentType, form)
	}
}

// Every event that asks for an effect is named on it, oldest first: the
// source event, then each later event that asks for it when its episode
// key exists already (a duplicate with a new id, another flow's route),
// each once however often it asks. EffectGet and EffectList agree.
func testEffectSourceEvents(t *testing.T, o Opener) {
	f := newPipe(t, o)
	a, b, c := f.event("evt_a"), f.event("evt_b"), f.event("evt_c")
	f.route(t0, to(a, rt("sync", "c1", "1"), rt("audit", "c1", "1")), to(b, rt("sync", "c2", "1"), rt("audit", "c2", "1")), to(c, rt("sync", "c3", "1")))
	key := "sync:c1:r1:mail"
	f.step("sync", "c1", t0, rev(1, `{"n":1}`, eff(key, "mail"), eff("sync:c1:r1:crm", "crm")))
	f.step("sync", "c2", t0, rev(1, `{"n":1}`, eff(key, "mail")))  // a duplicate with a new id
	f.step("audit", "c1", t0, rev(1, `{"n":1}`, eff(key, "mail"))) // the source event again, by another flow
	f.step("audit", "c2", t0, rev(1, `{"n":1}`, eff(key, "mail"))) // the duplicate again, by another flow
	f.step("sync", "c3", t0, rev(1, `{"n":1}`, eff(key, "mail")))  // a third event
	want := map[string][]string{key: {"evt_a", "evt_b", "evt_c"}, "sync:c1:r1:crm": {"evt_a"}}
	es := f.effects(&store.EffectListParams{})
	if len(es) != 2 {
		t.Fatalf("%d effects, want 2", len(es))
	}
	for _, e := range es {
		g, err := f.s.EffectGet(f.ctx, e.ID)
		if err != nil || g == nil {
			t.Fatalf("EffectGet %d: %v", e.ID, err)
		}
		for _, got := range []*store.Effect{e, g} {
			if !slices.Equal(got.SourceEventIDs(), want[e.EpisodeKey]) || got.SourceEventID != "evt_a" {
				t.Errorf("effect %s: source events %v (first %q), want %v", e.EpisodeKey, got.SourceEventIDs(), got.SourceEventID, want[e.EpisodeKey])
			}
		}
		if g.SourceEvents[0].Source != "crm" {
			t.Errorf("effect %s: source events %+v, want each with its source", e.EpisodeKey, g.SourceEvents)
		}
	}
}

// The traceparent an event was received under is kept with the event: the
// first delivery's (a later one's does not replace it), read with the
// event's routable fields (routing, pending work) and with every effect it
// is the source of, so that processing and delivery continue its trace.
// An event received without one reads "".
func testTraceContext(t *testing.T, o Opener) {
	f := newPipe(t, o)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	a := f.event("tc_a", func(d *store.DeliveryInput) { d.TraceContext = tp })
	again := delivery("crm", "tc_a", 1)
	again.Type, again.Entity, again.TraceContext = "deal.updated", "deal_tc_a", "00-11111111111111111111111111111111-2222222222222222-01"
	b := f.event("tc_b")
	if res := commit(t, f.s, one(again)); res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	evs, err := f.s.EventListUnrouted(f.ctx, &store.EventListUnroutedParams{Limit: 10})
	if err != nil || len(evs) != 2 || evs[0].TraceContext != tp || evs[1].TraceContext != "" {
		t.Fatalf("EventListUnrouted: %v %+v; want the first delivery's traceparent, then none", err, evs)
	}
	f.route(t0, to(a, rt("sync", "tc_a", "1")), to(b, rt("sync", "tc_b", "1")))
	if ws := f.pending("sync", "tc_a"); len(ws) != 1 || ws[0].Event.TraceContext != tp {
		t.Fatalf("WorkListPending gave %+v, want the event's traceparent", ws)
	}
	f.step("sync", "tc_a", t0, rev(1, `{"n":1}`, eff("sync:tc_a:r1:crm", "crm")))
	f.step("sync", "tc_b", t0, rev(1, `{"n":1}`, eff("sync:tc_b:r1:crm", "crm")))
	for _, e := range f.effects(&store.EffectListParams{}) {
		want := ""
		if e.SourceEventID == "tc_a" {
			want = tp
		}
		g, err := f.s.EffectGet(f.ctx, e.ID)
		if err != nil || e.TraceContext != want || g.TraceContext != want {
			t.Fatalf("effect %s: list %q get %q (%v), want %q", e.EpisodeKey, e.TraceContext, g.TraceContext, err, want)
		}
	}
	claimed, err := f.s.EffectClaim(f.ctx, &store.EffectClaimParams{Owner: "w", Now: t0, LeaseFor: time.Minute, Limit: 10})
	if err != nil || len(claimed) != 2 {
		t.Fatalf("EffectClaim: %v %d", err, len(claimed))
	}
	for _, c := range claimed {
		if (c.SourceEventID == "tc_a") != (c.TraceContext == tp) {
			t.Fatalf("claimed effect of %s carries traceparent %q", c.SourceEventID, c.TraceContext)
		}
	}
}
