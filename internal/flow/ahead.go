package flow

import (
	"context"
	"sync"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
)

// Routing ahead. On a database one process owns (SQLite), every write
// goes through one writer, which runs the jobs queued while a
// transaction runs inside that transaction. The router used to read a
// webhook back once its inbox commit was durable, decide it, and route
// it in a commit of its own: at half the pipeline's capacity the writer
// is busy most of the time, and an event waited for a commit in
// progress and then its own, twice (docs/benchmarks-history.md, "What
// would move goals 1 to 4 from here").
//
// RouteAhead is handed each inbox group as the inbox writer gives it to
// the store. It decides the group's events from the requests' bodies on
// a goroutine of its own while the group waits for the writer, prepares
// their work as the router prepares a page's, and queues the routing
// behind the group's job (store.Pipeline.EventRouteStored): it finds the
// events the group stored, routes them, leases their entities, settles
// their work and claims their effects, usually in the group's own
// commit. The flows' expressions never run on the writer, and nothing
// waits for them: routing that is not ready by the group's commit joins
// the next one, and an event it does not route (a duplicate, an event
// stored otherwise than decided, one behind an older event still
// waiting, a failed submission, a failed take) is the router's, which
// RouteAhead wakes once the commit has ended.
//
// Where the database is shared (PostgreSQL), the inbox's commit is a
// transaction of its own and routing's another, whoever runs it: there
// is nothing to share, and the router's pages, taken under row locks,
// stay the only way.

// aheadTakes bounds the routing takes ahead in flight. A take lasts
// until its group's commit, and groups keep coming meanwhile: eight
// followed every group at half the pipeline's capacity, and a group that
// finds them all busy is left to the router instead of queueing.
const aheadTakes = 8

// RouteAhead routes the events of an inbox group, the submissions subs,
// in the write transaction that stores them where it can (see above).
// It returns at once, with two funcs for the caller to call: queued
// once the group is queued for the writer (store.InboxCommitParams.
// Queued) or else once its commit has ended, and after once the commit
// has ended, whatever its outcome, which wakes the router for the events
// routing ahead leaves (nil when it leaves none). It takes nothing
// before Start, after Stop, or on a shared database.
func (e *Engine) RouteAhead(subs []*store.Submission) (queued, after func()) {
	if e.st.Shared() {
		for _, sub := range subs {
			for _, d := range sub.Deliveries {
				if !d.Unrouted {
					return nil, e.WakeRouting
				}
			}
		}
		return nil, nil
	}
	evs, keys, rest := e.aheadEvents(subs)
	if rest {
		after = e.WakeRouting
	}
	if len(evs) == 0 {
		return nil, after
	}
	if len(evs) > inlineMax {
		// A large group is a busy pipeline, whose writer every read
		// ahead would cost; the router reads its pages beside it.
		return nil, e.WakeRouting
	}
	t := &aheadTake{ticketed: make(chan struct{}), mine: make(chan struct{})}
	if !e.takeAhead(func(ctx context.Context) { e.routeAhead(ctx, t, evs, keys) }) {
		return nil, e.WakeRouting
	}
	return func() { e.ticket(t) }, after
}

// aheadTake chains the takes ahead in the order their groups were queued
// for the writer, which is the order of their events' pks: a take queues
// its routing only once the take before it has queued its own (or given
// up), so that it never finds the events of an older group still waiting
// for their take, and routes its own after them (EventRouteStored routes
// nothing behind an older event still waiting).
type aheadTake struct {
	ticketed chan struct{}   // closed once prev is set (Engine.ticket)
	prev     <-chan struct{} // closed once the take before has queued its routing
	mine     chan struct{}   // closed once this take has queued its routing, or given up
	mineOnce sync.Once
}

// queued closes mine: the take has queued its routing, or given up.
func (t *aheadTake) queued() {
	t.mineOnce.Do(func() { close(t.mine) })
}

// ticket places t after the last take whose group was queued: called
// once, as t's group is queued (the store calls the inbox's Queued in
// queue order).
func (e *Engine) ticket(t *aheadTake) {
	e.aheadMu.Lock()
	t.prev, e.aheadLast = e.aheadLast, t.mine
	e.aheadMu.Unlock()
	close(t.ticketed)
}

// takeAhead runs take on a goroutine of its own as a routing take ahead,
// unless the engine is not running or aheadTakes are in flight already.
func (e *Engine) takeAhead(take func(ctx context.Context)) bool {
	e.aheadMu.Lock()
	defer e.aheadMu.Unlock()
	ctx := e.aheadCtx
	if ctx == nil || ctx.Err() != nil {
		return false
	}
	select {
	case e.aheadSlots <- struct{}{}:
	default:
		return false
	}
	// Under aheadMu, which Stop takes before it waits for running.
	e.running.Add(1)
	go func() {
		defer e.running.Done()
		defer func() { <-e.aheadSlots }()
		take(ctx)
	}()
	return true
}

// aheadEvents is the events of subs that can be routed ahead, each as
// the store keeps it, and the delivery that carries it; rest reports
// that the router has others to route. An event no flow wants (created
// unrouted at receipt) has nothing to route, and one that a refetch flow
// wants cannot be decided before it is stored: such a flow orders its
// entity's work by the event's pk.
func (e *Engine) aheadEvents(subs []*store.Submission) (evs []*store.RoutableEvent, keys []store.DeliveryKey, rest bool) {
	for _, sub := range subs {
		for _, d := range sub.Deliveries {
			if d.Unrouted {
				continue
			}
			if e.refetched(d.Source, d.Type) {
				rest = true
				continue
			}
			evs = append(evs, &store.RoutableEvent{
				Source: d.Source, EventID: d.EventID, Type: d.Type, Entity: d.Entity, Account: d.Account,
				OccurredAt: storedTime(d.OccurredAt), ReceivedAt: storedTime(d.ReceivedAt),
				CausationID: d.CausationID, Hop: d.Hop, Body: d.Body,
				ContentType: d.Headers["Content-Type"], TraceContext: d.TraceContext,
			})
			keys = append(keys, store.DeliveryKey{Source: d.Source, EventID: d.EventID, RequestID: d.RequestID, BatchIndex: d.BatchIndex})
		}
	}
	return evs, keys, rest
}

// waitFor waits until c is closed (true) or ctx ends (false).
func waitFor(ctx context.Context, c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	case <-ctx.Done():
		return false
	}
}

// closedChan is a channel closed already.
func closedChan() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// storedTime is t as the store keeps it and reads it back: in UTC, to
// the microsecond (zero stays zero).
func storedTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return time.UnixMicro(t.UnixMicro()).UTC()
}

// refetched reports whether a flow that orders by refetch subscribes to
// events of typ from source.
func (e *Engine) refetched(source, typ string) bool {
	for _, f := range e.bySource[source] {
		if f.Version.Mode == config.ModeRefetch && subscribes(f, typ) {
			return true
		}
	}
	return false
}

// routeAhead is the take t of RouteAhead: the events evs, each carried
// by the delivery keys[i], decided while their group waits for the
// writer, then routed behind it (once the group and the take before are
// queued) as a routing take routes a page, with the leases and the
// settle of the free slots it can take.
func (e *Engine) routeAhead(ctx context.Context, t *aheadTake, evs []*store.RoutableEvent, keys []store.DeliveryKey) {
	defer t.queued() // given up, if it has not queued
	rs := &routeSettle{}
	ds := e.decide(ctx, evs, nil, true, rs)
	// prev is set once ticketed is closed: the second wait reads it after
	// the first.
	if !waitFor(ctx, t.ticketed) || !waitFor(ctx, t.prev) {
		rs.drop()
		return
	}
	// Slots for the entities the events make ready, no more, promised as
	// the writer runs the take (slotClaim).
	ready := readyEntities(ds)
	var settle func(context.Context, []*store.Lease) store.RouteSettle
	if len(ready) > 0 {
		settle = func(ctx context.Context, leases []*store.Lease) store.RouteSettle {
			return rs.prepare(ctx, e, leases)
		}
	}
	slots := e.slotClaim()
	now := e.clk.Now()
	page, err := e.st.EventRouteStored(ctx, &store.EventRouteStoredParams{Now: now, Events: evs, Keys: keys, Decisions: ds,
		Claim: e.leaseParams(now, len(ready), slots), Settle: settle, SettleMax: inlineMax, Queued: t.queued})
	if err != nil {
		page = store.RoutedPage{}
	}
	for _, l := range page.Leases {
		delete(ready, entityOf(l))
	}
	leases := rs.finish(ctx, e, page)
	slots.done(len(page.Leases))
	for _, l := range leases {
		e.process(ctx, l)
	}
	if err != nil {
		// The events are the router's: it says so if the database fails.
		e.log.Debug("routing ahead failed; the router routes the events", "events", len(evs), "err", err)
		e.WakeRouting()
		return
	}
	var routed []*store.RoutableEvent
	var decided []*store.RouteDecision
	for i, ev := range evs {
		if ev.PK != 0 {
			routed, decided = append(routed, ev), append(decided, ds[i])
		}
	}
	if len(routed) < len(evs) {
		// The group's commit has ended (this take ran after its job):
		// what the take left, the router finds.
		e.WakeRouting()
	}
	if len(routed) == 0 {
		return
	}
	e.recordRouted(ctx, routed, decided)
	e.routingStage.OK()
	// An entity the take made ready and did not lease is the claim's
	// (held by a slot of its own, it is found again as that ends).
	if len(ready) > 0 {
		e.claimWanted.Store(true)
		e.loop.Wake()
	}
}

// entity names one flow's entity.
type entity struct{ flow, name string }

// entityOf is the entity l leases.
func entityOf(l *store.Lease) entity { return entity{l.Flow, l.Entity} }

// readyEntities is the entities the decisions ds give work to.
func readyEntities(ds []*store.RouteDecision) map[entity]bool {
	ready := map[entity]bool{}
	for _, d := range ds {
		for _, r := range d.Routes {
			if r.Failed == "" {
				ready[entity{r.Flow, r.Entity}] = true
			}
		}
	}
	return ready
}
