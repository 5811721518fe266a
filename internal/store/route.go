package store

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Routing (EventRoute, EventRouteNext): what a routing decision writes is
// written here once; where a page of events to route is taken depends on
// whether processes share the database (Driver.Shared).

// RouteTx is the statements of routing.
type RouteTx interface {
	// EventsClaim claims for routing, of the events pks, each that is not
	// routed yet: it marks the event routed (and takes it off any queue
	// the driver keeps for the router) and returns it. Where the database
	// has row locks, an event another transaction holds is passed over
	// without waiting: its router's decision stands, or, should that
	// router roll back, the event is found again.
	EventsClaim(ctx context.Context, pks []int64) ([]RouteEvent, error)
	// EventsTake claims up to limit accepted events waiting for the
	// router, in pk order, as EventsClaim claims them, and returns each
	// with the body of its first delivery. Only a shared database
	// (Driver.Shared) takes pages so: its rows are locked until the
	// commit, and another router's page passes them over. A driver whose
	// database one process owns answers ErrNotShared.
	EventsTake(ctx context.Context, limit int) ([]*RoutableEvent, []RouteEvent, error)
	// EventsStoredBy returns, for each key, the event its delivery stored
	// when that delivery is the event's only one, as EventListUnrouted
	// lists an event (body and all, routed or not); nil where the
	// delivery is not stored, or the event has others.
	EventsStoredBy(ctx context.Context, keys []DeliveryKey) ([]*RoutableEvent, error)
	// EventsWaiting returns, in pk order, the pks of up to limit events
	// waiting for the router (accepted, not routed) whose pk is at most
	// upTo.
	EventsWaiting(ctx context.Context, upTo int64, limit int) ([]int64, error)
	// EventsWithoutPending returns, of the events pks, those without a
	// pending work item, in pk order.
	EventsWithoutPending(ctx context.Context, pks []int64) ([]int64, error)
	// EntitiesLease leases up to p.Limit ready entities (as many as
	// p.Slots grants: EntityClaimParams.Lease), in claim order, as
	// Pipeline.EntityClaim does: the statement of a claim made inside
	// another transaction (routing's). With p.List, a shared database
	// (Driver.Shared) may read each lease's first p.List pending items,
	// whole, in the same statement (Lease.Pending; nil where it read
	// none): WorkListLeased then lists only the leases without.
	EntitiesLease(ctx context.Context, p *EntityClaimParams) ([]*Lease, error)
	// WorkListLeased is Pipeline.WorkListPendingGroup inside the
	// transaction: routing's, which lists the work of the entities it
	// leased so that the processor need not read it again. A shared
	// database (Driver.Shared) lists the items whole, where the read is
	// one transaction less per webhook (PostgreSQL reads them in the
	// lease's statement, EntitiesLease, and is asked here only for a
	// lease that came without). A driver whose database one
	// process owns lists their keys only (ID, Flow, Entity, OrderKey,
	// ReplayID and Event.PK): its one writer holds the read, and routing
	// read the page's events before the write transaction, so the rules
	// fill the events in from the page (leaseAfterRouting).
	WorkListLeased(ctx context.Context, ps []*WorkListPendingParams) ([][]*WorkItem, error)
}

// ErrNotShared is the answer of a statement only a database that several
// processes share runs.
var ErrNotShared = errors.New("the database is not shared between processes")

// RouteEvent is an event as routing claims it: what its audit rows and
// its disposition need.
type RouteEvent struct {
	PK                            int64
	Source, EventID, Type, Entity string
	Disposition                   Disposition
}

// EventRoute records routing decisions in one transaction of the
// processing path (see Pipeline). A decision for an event that is already
// routed (another router got there first) is skipped as a whole, which
// is what makes concurrent routing safe: the event is claimed before
// anything else is written.
func (r *Rules) EventRoute(ctx context.Context, p *EventRouteParams) error {
	_, err := r.eventRoute(ctx, p, nil, nil)
	return err
}

// eventRoute is EventRoute, leasing ready entities in the same transaction
// when claim asks for some. With settle (a database one process owns,
// whose page was read before the transaction), it also lists the leased
// entities' work, fills in their events from the page, and settles there
// what settle asks of them (settleInRouting); should that fail the
// transaction, the page is routed again without it.
func (r *Rules) eventRoute(ctx context.Context, p *EventRouteParams, claim *EntityClaimParams, settle *pageSettle) (RoutedPage, error) {
	storableRoutes(p.Decisions)
	byPK := decisionsByPK(p.Decisions)
	var page RoutedPage
	err := r.db.InTx(ctx, TxProcess, func(ctx context.Context, tx Tx) error {
		var err error
		page, _, err = r.routeInTx(ctx, tx, p, byPK, claim, settle)
		return err
	})
	if err != nil && settle != nil {
		return r.eventRoute(ctx, p, claim, nil)
	}
	if err != nil {
		return RoutedPage{}, fmt.Errorf("route events: %w", err)
	}
	return page, nil
}

// routeInTx is eventRoute's transaction: it claims the events decided
// (byPK), records their decisions, and leases and settles as claim and
// settle ask. It returns the events it claimed.
func (r *Rules) routeInTx(ctx context.Context, tx Tx, p *EventRouteParams, byPK map[int64]*RouteDecision, claim *EntityClaimParams, settle *pageSettle) (RoutedPage, []RouteEvent, error) {
	var page RoutedPage
	claimed, err := tx.EventsClaim(ctx, slices.Sorted(maps.Keys(byPK)))
	if err != nil {
		return page, nil, fmt.Errorf("mark routed: %w", err)
	}
	settleRest, err := routeClaimed(ctx, tx, p, byPK, claimed)
	if err != nil {
		return page, nil, err
	}
	if settle == nil {
		// Listed only for a settle: the processor lists on a reader
		// what it settles itself.
		page.Leases, err = leaseThenSettleRest(ctx, tx, unlisted(claim), nil, settleRest)
		return page, claimed, err
	}
	if page.Leases, err = leaseThenSettleRest(ctx, tx, claim, settle.page, settleRest); err != nil {
		return page, nil, err
	}
	page.Settled, page.Claimed, err = r.settleInRouting(ctx, tx, settle.fn, page.Leases)
	return page, claimed, err
}

// leaseThenSettleRest takes routing's leases (leaseAfterRouting), whose
// statement carries the enqueue before it, and then settles what the
// enqueue's answer leaves to settle (routeClaimed's settleRest).
func leaseThenSettleRest(ctx context.Context, tx Tx, claim *EntityClaimParams, page *routedPage, settleRest func(context.Context) error) ([]*Lease, error) {
	leases, err := leaseAfterRouting(ctx, tx, claim, page)
	if err != nil {
		return nil, err
	}
	return leases, settleRest(ctx)
}

// EventRouteStored routes events decided from the requests that carried
// them (see Pipeline). The router would otherwise read them back once
// their inbox commit is durable and route them in a transaction of its
// own: on a database one process owns, whose one writer runs jobs queued
// while a transaction runs in that transaction, this one can share the
// inbox's commit, and an event is stored, routed, settled and its effects
// claimed in one commit instead of two.
//
// An event is routed here only when the delivery named by its key is the
// event's only one and the event is stored exactly as it was decided,
// body and all: the router decides on the event as stored with its first
// delivery, and a duplicate, or a delivery whose submission failed while
// another stored the event, is left to the router, which decides on what
// was stored. Nothing is routed while an older event waits for the
// router: routing stays in pk order. Should the settle fail the transaction, the page is routed
// again without it, as EventRouteNext does.
func (r *Rules) EventRouteStored(ctx context.Context, p *EventRouteStoredParams) (RoutedPage, error) {
	if len(p.Keys) != len(p.Events) || len(p.Decisions) != len(p.Events) {
		return RoutedPage{}, fmt.Errorf("route stored events: %d events, %d keys and %d decisions", len(p.Events), len(p.Keys), len(p.Decisions))
	}
	storableRoutes(p.Decisions)
	settling := settles(p.Settle, p.Claim, p.SettleMax, len(p.Events))
	var page RoutedPage
	routed := map[int]int64{} // index in p.Events: pk
	err := r.inTxQueued(ctx, func(ctx context.Context, tx Tx) error {
		page = RoutedPage{}
		clear(routed)
		stored, err := tx.EventsStoredBy(ctx, p.Keys)
		if err != nil {
			return fmt.Errorf("find stored events: %w", err)
		}
		var evs []*RoutableEvent
		var ds []*RouteDecision
		at := map[int64]int{}
		for i, ev := range stored {
			if ev == nil || !sameEvent(ev, p.Events[i]) {
				continue
			}
			d := *p.Decisions[i]
			d.EventPK = ev.PK
			evs, ds, at[ev.PK] = append(evs, ev), append(ds, &d), i
		}
		if len(evs) == 0 {
			return nil
		}
		// The router routes in pk order, and so an entity's work in the
		// order the events came: none of these is routed after an older
		// event that still waits (one left to the router, or whose own
		// take is still to run), whose entity is not known before it is
		// decided. Of len(evs)+1 waiting, one at least is not ours.
		waiting, err := tx.EventsWaiting(ctx, slices.Max(slices.Collect(maps.Keys(at))), len(evs)+1)
		if err != nil {
			return fmt.Errorf("find waiting events: %w", err)
		}
		for _, pk := range waiting {
			if _, ours := at[pk]; !ours {
				evs, ds = beforePK(evs, ds, pk)
				break
			}
		}
		if len(evs) == 0 {
			return nil
		}
		var settle *pageSettle
		if settling {
			settle = &pageSettle{fn: p.Settle, page: newRoutedPage(evs, ds)}
		}
		var claimed []RouteEvent
		page, claimed, err = r.routeInTx(ctx, tx, &EventRouteParams{Now: p.Now, Decisions: ds}, decisionsByPK(ds), p.Claim, settle)
		for _, ev := range claimed {
			routed[at[ev.PK]] = ev.PK
		}
		page.Events = len(claimed)
		return err
	}, p.Queued)
	if settling && err != nil {
		q := *p
		q.Settle = nil
		return r.EventRouteStored(ctx, &q)
	}
	if err != nil {
		return RoutedPage{}, fmt.Errorf("route stored events: %w", err)
	}
	for i, pk := range routed {
		p.Events[i].PK, p.Decisions[i].EventPK = pk, pk
	}
	return page, nil
}

// beforePK is, of the events evs and their decisions ds (one each, in the
// same order), those of pk below pk.
func beforePK(evs []*RoutableEvent, ds []*RouteDecision, pk int64) ([]*RoutableEvent, []*RouteDecision) {
	var es []*RoutableEvent
	var out []*RouteDecision
	for i, ev := range evs {
		if ev.PK < pk {
			es, out = append(es, ev), append(out, ds[i])
		}
	}
	return es, out
}

// inTxQueued runs fn in a transaction of the processing path, calling
// queued (when set) once it is queued for the database's one writer
// (QueuedDriver), or else before it runs.
func (r *Rules) inTxQueued(ctx context.Context, fn func(ctx context.Context, tx Tx) error, queued func()) error {
	if d, ok := r.db.(QueuedDriver); ok && queued != nil {
		return d.InTxQueued(ctx, fn, queued)
	}
	if queued != nil {
		queued()
	}
	return r.db.InTx(ctx, TxProcess, fn)
}

// sameEvent reports whether a and b are the same event with the same
// first delivery, pk aside: what routing and processing read of it.
func sameEvent(a, b *RoutableEvent) bool {
	return a.Source == b.Source && a.EventID == b.EventID && a.Type == b.Type && a.Entity == b.Entity &&
		a.Account == b.Account && a.OccurredAt.Equal(b.OccurredAt) && a.ReceivedAt.Equal(b.ReceivedAt) &&
		a.CausationID == b.CausationID && a.Hop == b.Hop && bytes.Equal(a.Body, b.Body) &&
		a.ContentType == b.ContentType && a.TraceContext == b.TraceContext
}

// pageSettle is what a routing transaction on a database one process owns
// needs to settle its leased entities' work: the settle, and the page's
// events, read before the transaction, by pk.
type pageSettle struct {
	fn   func(context.Context, []*Lease) RouteSettle
	page *routedPage
}

// unlisted is claim without a listing of the leased work.
func unlisted(claim *EntityClaimParams) *EntityClaimParams {
	if claim == nil || claim.List == 0 {
		return claim
	}
	c := *claim
	c.List = 0
	return &c
}

// readAhead is claim asking the driver to read the settle's group with
// the lease (EntityClaimParams.ReadAhead): the page settles in routing.
func readAhead(claim *EntityClaimParams) *EntityClaimParams {
	c := *claim
	c.ReadAhead = true
	return &c
}

// leaseAfterRouting takes the leases a routing page's Claim asks for, in
// the routing transaction, with their first page of work when Claim.List
// asks for it. page, when set, is the routing page read before the
// transaction: only the entities it routed to are listed, the driver
// lists the work's keys only (RouteTx.WorkListLeased), and a lease
// carries its work only when every item is one of the page's events,
// filled in from there.
func leaseAfterRouting(ctx context.Context, tx Tx, claim *EntityClaimParams, page *routedPage) ([]*Lease, error) {
	if claim == nil || claim.Limit <= 0 {
		return nil, nil
	}
	leases, err := tx.EntitiesLease(ctx, claim)
	if err != nil {
		return nil, fmt.Errorf("claim entities: %w", err)
	}
	if claim.List <= 0 || len(leases) == 0 {
		return leases, nil
	}
	// With the page's events, only the entities the page routed to can
	// carry their work: the others' is older than the page, and listing
	// it would hold the one writer for nothing. A lease the driver's
	// lease statement listed already (RouteTx.EntitiesLease) is not
	// listed again.
	listed := leases[:0:0]
	for _, l := range leases {
		if l.Pending == nil && (page == nil || page.routed[entityKey{l.Flow, l.Entity}]) {
			listed = append(listed, l)
		}
	}
	if len(listed) == 0 {
		return leases, nil
	}
	ps := make([]*WorkListPendingParams, len(listed))
	for i, l := range listed {
		ps[i] = &WorkListPendingParams{Flow: l.Flow, Entity: l.Entity, Limit: claim.List}
	}
	items, err := tx.WorkListLeased(ctx, ps)
	if err != nil {
		return nil, fmt.Errorf("list leased work: %w", err)
	}
	for i, l := range listed {
		if i < len(items) && len(items[i]) > 0 && fillEvents(items[i], page) {
			l.Pending = items[i]
		}
	}
	return leases, nil
}

// entityKey is one flow's entity.
type entityKey struct{ flow, entity string }

// routedPage is a routing page read before its transaction (a database
// one process owns): its events by pk, and the entities it routes to.
type routedPage struct {
	events map[int64]*RoutableEvent
	routed map[entityKey]bool
}

// newRoutedPage indexes the page evs, decided as ds.
func newRoutedPage(evs []*RoutableEvent, ds []*RouteDecision) *routedPage {
	pg := &routedPage{events: make(map[int64]*RoutableEvent, len(evs)), routed: make(map[entityKey]bool, len(ds))}
	for _, ev := range evs {
		pg.events[ev.PK] = ev
	}
	for _, d := range ds {
		for _, r := range d.Routes {
			if r.Failed == "" {
				pg.routed[entityKey{r.Flow, r.Entity}] = true
			}
		}
	}
	return pg
}

// fillEvents fills in each listed item's event from the routing page
// (nothing to do when page is nil: the items were listed whole), and
// reports whether every item's event was there. An item of an event
// routed before is not the page's: its entity's work is then left to the
// processor's listing.
func fillEvents(items []*WorkItem, page *routedPage) bool {
	if page == nil {
		return true
	}
	for _, it := range items {
		ev := page.events[it.Event.PK]
		if ev == nil {
			return false // older work: not the page's
		}
		it.Event = *ev
	}
	return true
}

// EventRouteNext routes the next page of unrouted events (see Pipeline).
// On a shared database the page is taken under row locks, which another
// router's page passes over, decided and recorded in one transaction:
// listing without the locks let every process read and decide the same
// page (each event was read, decoded and decided 2.1 times with two
// processes), and the second router's work was thrown away by the claim.
// A database one process owns takes its pages under a lock of the
// process instead: the page is read and decided before the write
// transaction, which decides nothing, so the one writer is held no
// longer than it writes.
func (r *Rules) EventRouteNext(ctx context.Context, p *EventRouteNextParams) (RoutedPage, error) {
	if !r.db.Shared() {
		r.routeMu.Lock()
		defer r.routeMu.Unlock()
		evs, err := r.db.EventListUnrouted(ctx, &EventListUnroutedParams{Limit: p.Limit})
		if err != nil || len(evs) == 0 {
			return RoutedPage{}, err
		}
		ds := p.Decide(evs)
		if err := checkDecisions(evs, ds); err != nil {
			return RoutedPage{}, fmt.Errorf("route events: %w", err)
		}
		var settle *pageSettle
		if p.settles(len(evs)) {
			settle = &pageSettle{fn: p.Settle, page: newRoutedPage(evs, ds)}
		}
		page, err := r.eventRoute(ctx, &EventRouteParams{Now: p.Now, Decisions: ds}, p.Claim, settle)
		if err != nil {
			return RoutedPage{}, err
		}
		page.Events = len(evs)
		return page, nil
	}
	var page RoutedPage
	settling := false
	err := r.db.InTx(ctx, TxProcess, func(ctx context.Context, tx Tx) error {
		page, settling = RoutedPage{}, false
		evs, claimed, err := tx.EventsTake(ctx, ClampLimit(p.Limit))
		if err != nil || len(evs) == 0 {
			return err
		}
		ds := p.Decide(evs)
		if err := checkDecisions(evs, ds); err != nil {
			return err
		}
		settleRest, err := routeClaimed(ctx, tx, &EventRouteParams{Now: p.Now, Decisions: ds}, decisionsByPK(ds), claimed)
		if err != nil {
			return err
		}
		claim := p.Claim
		if p.settles(len(evs)) {
			claim = readAhead(claim)
		}
		leases, err := leaseThenSettleRest(ctx, tx, claim, nil, settleRest)
		if err != nil {
			return err
		}
		page = RoutedPage{Events: len(evs), Leases: leases}
		if !p.settles(len(evs)) {
			return nil
		}
		settling = true
		page.Settled, page.Claimed, err = r.settleInRouting(ctx, tx, p.Settle, leases)
		return err
	})
	if err != nil && settling {
		// The settle must not cost the page its routing: routed again
		// without it, the processor settles those entities as it would
		// have. The failure is the settle's or the database's; if the
		// latter, the second try says so.
		q := *p
		q.Settle = nil
		return r.EventRouteNext(ctx, &q)
	}
	if err != nil {
		return RoutedPage{}, fmt.Errorf("route events: %w", err)
	}
	return page, nil
}

// settleInRouting settles, in the routing transaction, what settle asks
// of the leases that came with their work (EventRouteNextParams.Settle).
func (r *Rules) settleInRouting(ctx context.Context, tx Tx, settle func(context.Context, []*Lease) RouteSettle, leases []*Lease) ([]FlowApplyOutcome, [][]*ClaimedEffect, error) {
	var listed []*Lease
	for _, l := range leases {
		if len(l.Pending) > 0 {
			listed = append(listed, l)
		}
	}
	if len(listed) == 0 {
		return nil, nil, nil
	}
	want := settle(ctx, listed)
	if len(want.Subs) == 0 {
		return nil, nil, nil
	}
	got, claimed, err := r.applyGroupClaim(ctx, tx, want.Subs, want.Claims)
	if err != nil {
		return nil, nil, fmt.Errorf("settle in routing: %w", err)
	}
	return got, claimed, nil
}

// decisionsByPK indexes decisions by event; a later decision for an event
// replaces an earlier one.
func decisionsByPK(ds []*RouteDecision) map[int64]*RouteDecision {
	byPK := make(map[int64]*RouteDecision, len(ds))
	for _, d := range ds {
		byPK[d.EventPK] = d
	}
	return byPK
}

// routeClaimed records the decisions of the events claimed: an event with
// no route ends unrouted (audited), the others' work rows are enqueued,
// and an event whose routes all failed (dead letters) or whose work rows
// all existed already settles by the aggregate rule. That last step is
// settleRest, which the caller runs after the statement that follows the
// enqueue (routing's lease, when it leases): only the enqueue's answer
// tells which events it concerns, and a pipelining driver has that answer
// once the next statement is sent, so the enqueue travels with the lease
// instead of in a round trip of its own. settleRest touches events alone,
// never the entities a lease takes.
func routeClaimed(ctx context.Context, tx Tx, p *EventRouteParams, byPK map[int64]*RouteDecision, claimed []RouteEvent) (settleRest func(context.Context) error, err error) {
	slices.SortFunc(claimed, func(a, b RouteEvent) int { return cmp.Compare(a.PK, b.PK) })
	q := &EnqueueParams{Now: p.Now, Actor: "router", Pending: map[int64]bool{}}
	var withWork []int64
	for _, ev := range claimed {
		d := byPK[ev.PK]
		if len(d.Routes) == 0 {
			if ev.Disposition != DispositionAccepted {
				continue
			}
			if err := tx.SetDisposition(ctx, ev.PK, DispositionUnrouted); err != nil {
				return nil, fmt.Errorf("set unrouted: %w", err)
			}
			if err := tx.Audit(ctx, &AuditInsertParams{At: p.Now, Actor: "router", Action: actionDisposition,
				Source: ev.Source, EventID: ev.EventID, Entity: ev.Entity, Detail: unroutedDetail("accepted", ev.Type)}); err != nil {
				return nil, err
			}
			continue
		}
		for _, rt := range d.Routes {
			q.Items = append(q.Items, EnqueueItem{EventPK: ev.PK, Source: ev.Source, EventID: ev.EventID, Route: rt})
		}
		withWork = append(withWork, ev.PK)
	}
	if err := tx.WorkEnqueue(ctx, q); err != nil {
		return nil, fmt.Errorf("enqueue: %w", err)
	}
	return func(ctx context.Context) error {
		if err := tx.Flush(ctx); err != nil {
			return err
		}
		// An event routed to flows normally has pending work now: a row
		// this transaction inserted, which nothing else can settle before
		// the commit. Only the others are asked for.
		var rest []int64
		for _, pk := range withWork {
			if !q.Pending[pk] {
				rest = append(rest, pk)
			}
		}
		if len(rest) == 0 {
			return nil
		}
		settle, err := tx.EventsWithoutPending(ctx, rest)
		if err != nil {
			return fmt.Errorf("find settled events: %w", err)
		}
		for _, pk := range settle {
			if err := settleEvent(ctx, tx, pk, 0, p.Now, "router"); err != nil {
				return err
			}
		}
		return nil
	}, nil
}
