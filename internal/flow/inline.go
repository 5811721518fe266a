package flow

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/trace"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
)

// Settling in routing. Where routing's transaction leases the entities it
// made ready and reads their work (store.Lease.Pending), the processor's
// transaction that settles that work can be the same one
// (store.EventRouteNextParams.Settle). A lone webhook then costs one
// commit (SQLite) or one transaction (PostgreSQL) fewer between its
// acknowledgement and its call: inbox, routing with processing, the
// call's settle.
//
// On SQLite, whose one writer every stage waits for, the work is
// prepared as the page is decided, before the write transaction (ahead):
// the writer runs no expression, and the settle inside the transaction
// only places what was prepared under the lease and the work row the
// routing wrote (prepare). Only work that needs nothing but its event
// and the flow's expressions is prepared so: a refetch calls the
// source's API, a flow that reads the entity's previous state or
// compensates reads the database, and what it read before the lease
// could be stale by the time the lease is taken; such an entity is left
// to the processor, which prepares it beside the writer. A route whose
// entity the transaction does not lease (held by a slot, or past the
// free slots) was prepared for nothing, and is prepared again by the
// processor: at the light loads where pages are small, rare.
//
// Where the database is shared (PostgreSQL) the decision is itself
// inside the routing transaction, so preparing ahead would gain nothing
// and waste the work of routes not leased: the work is prepared there
// after the lease (in place).

// inlineMax bounds the routing pages that settle their entities' work
// themselves, and the entities one page settles: each is prepared one
// after another by the router, where the processor prepares them side
// by side in its slots. A larger page is a busy pipeline, where the
// processor's groups settle many entities in shared statements; settling
// them in small groups in routing cost a third more buffers per event at
// saturation (docs/benchmarks-history.md, "Settling in routing").
const inlineMax = 8

// routeSettle is what one routing take was asked to settle, kept between
// the preparation (ahead, prepare) and its outcome after the transaction
// (finish).
type routeSettle struct {
	ready   map[readyKey]*readyItem
	pages   []*inlinePage
	claims  []*store.EffectClaimParams
	effects map[string]int
	// decoded is the page's events as the routing decision decoded them,
	// by pk, where the work is prepared in the routing transaction
	// (a shared database).
	decoded map[int64]*input
}

// keep notes the bodies the routing decision decoded (ins, one per event
// of evs, nil where none), for the work prepared in the transaction.
func (rs *routeSettle) keep(evs []*store.RoutableEvent, ins []*input) {
	rs.decoded = make(map[int64]*input, len(evs))
	for i, ev := range evs {
		if ins[i] != nil {
			rs.decoded[ev.PK] = ins[i]
		}
	}
}

// readyKey names the work item a route of the page will be: the event's
// first pass through the flow. The event is named by its identity, not
// its pk: an event routed ahead of its read (Engine.RouteAhead) has its
// pk only inside the transaction that routes it.
type readyKey struct {
	source, eventID, flow string
}

// readyItem is one route's work prepared ahead, for the entity it routes
// to; used once placed in a settled page.
type readyItem struct {
	entity string
	p      *store.FlowApplyParams
	tr     *itemTrace
	used   bool
}

// inlinePage is one entity's page settled in the routing transaction.
type inlinePage struct {
	l       *store.Lease
	items   []*store.WorkItem
	ps      []*store.FlowApplyParams
	traces  []*itemTrace
	settles []trace.Span
}

// errNotInline ends the spans of work prepared for a routing transaction
// that did not settle it: the processor prepares it again.
var errNotInline = errors.New("not settled in routing")

// expressionsOnly reports whether f's work needs nothing but the event
// and the flow's expressions: no refetch, no read of the entity's
// previous state (which a compensating flow reads too), no destination
// taking changes only. Only such work is settled in routing, and on
// SQLite prepared before the entity's lease is taken.
func (e *Engine) expressionsOnly(f *config.Flow) bool {
	return f != nil && f.Version.Mode != config.ModeRefetch && !f.Compiled.ReadsPrevious && e.changesOnly[f.Name] == nil
}

// inlineable reports whether the leased entity's listed work can be
// settled in the routing transaction.
func (e *Engine) inlineable(l *store.Lease) *config.Flow {
	f := e.flows[l.Flow]
	switch {
	case !e.expressionsOnly(f), len(l.Pending) == 0, len(l.Pending) >= workPage:
		// A full page may not be all the work: the processor pages.
		return nil
	case e.clk.Now().After(l.Until):
		return nil
	}
	return f
}

// ahead prepares the work of a decided page (evs, decided as ds, one
// decision per event in the same order, with ins the bodies routing
// decoded, nil where it decoded none) for the routes whose flow allows
// it (expressionsOnly).
func (rs *routeSettle) ahead(ctx context.Context, e *Engine, evs []*store.RoutableEvent, ds []*store.RouteDecision, ins []*input) {
	rs.ready = make(map[readyKey]*readyItem)
	for i, d := range ds {
		for _, r := range d.Routes {
			f := e.flows[r.Flow]
			if r.Failed != "" || !e.expressionsOnly(f) {
				continue
			}
			l := &store.Lease{Flow: r.Flow, Entity: r.Entity}
			it := &store.WorkItem{Flow: r.Flow, Entity: r.Entity, OrderKey: r.OrderKey, Event: *evs[i]}
			p, tr, deferred := e.prepareItem(ctx, f, l, it, ins[i])
			if deferred {
				continue
			}
			rs.ready[readyKey{evs[i].Source, evs[i].EventID, r.Flow}] = &readyItem{entity: r.Entity, p: p, tr: tr}
		}
	}
}

// drop ends the spans of the work prepared ahead that no settle used.
func (rs *routeSettle) drop() {
	for _, r := range rs.ready {
		if !r.used && r.tr != nil {
			traces := []*itemTrace{r.tr}
			endProcessSpans(traces, startSettles(traces), []*store.FlowApplyParams{r.p}, nil, errNotInline)
		}
	}
	rs.ready = nil
}

// prepare assembles, inside the routing transaction, the listed work of
// up to inlineMax of the leases from what was prepared ahead (preparing
// in place what was not, where the database is shared), and promises the
// delivery worker's slots for the effects it would write (Handoff): the
// settle claims them.
func (rs *routeSettle) prepare(ctx context.Context, e *Engine, leases []*store.Lease) store.RouteSettle {
	var out store.RouteSettle
	for _, l := range leases {
		if len(rs.pages) == inlineMax {
			break
		}
		f := e.inlineable(l)
		if f == nil {
			continue
		}
		pg := rs.assemble(ctx, e, f, l)
		if pg == nil {
			continue
		}
		// The whole of the entity's work is listed: the apply frees the
		// lease itself if nothing arrived meanwhile.
		pg.ps[len(pg.ps)-1].ReleaseIfDrained = true
		pg.settles = startSettles(pg.traces)
		rs.pages = append(rs.pages, pg)
		out.Subs = append(out.Subs, pg.ps)
	}
	if h := e.opts.Handoff; h != nil && len(out.Subs) > 0 {
		if rs.effects = effectsByDestination(out.Subs); len(rs.effects) > 0 {
			rs.claims = h.Reserve(rs.effects)
			out.Claims = rs.claims
		}
	}
	return out
}

// assemble is the page of l's listed work, each item placed under l: as
// prepared ahead, or prepared now where the database is shared; nil when
// an item can be neither (or must be deferred), which leaves the entity
// to the processor.
func (rs *routeSettle) assemble(ctx context.Context, e *Engine, f *config.Flow, l *store.Lease) *inlinePage {
	pg := &inlinePage{l: l, items: l.Pending}
	var ahead []*readyItem
	var inPlace []*itemTrace
	for _, it := range l.Pending {
		var p *store.FlowApplyParams
		var tr *itemTrace
		if r := rs.ready[readyKey{it.Event.Source, it.Event.EventID, l.Flow}]; r != nil && !r.used && it.ReplayID == 0 && r.entity == l.Entity {
			p, tr = r.p, r.tr
			ahead = append(ahead, r)
		} else if e.st.Shared() {
			var deferred bool
			if p, tr, deferred = e.prepareItem(ctx, f, l, it, rs.decoded[it.Event.PK]); deferred {
				p = nil
			} else if tr != nil {
				inPlace = append(inPlace, tr)
			}
		}
		if p == nil {
			endProcessSpans(inPlace, startSettles(inPlace), make([]*store.FlowApplyParams, len(inPlace)), nil, errNotInline)
			return nil
		}
		e.place(p, l, it)
		pg.ps = append(pg.ps, p)
		if tr != nil {
			pg.traces = append(pg.traces, tr)
		}
	}
	for _, r := range ahead {
		r.used = true
	}
	return pg
}

// finish takes the routing page's outcome: the calls of the effects its
// claims took start, and each entity settled there is recorded. It
// returns the leases still to process: those not settled in routing, and
// those settled there whose lease the apply did not free (work arrived
// meanwhile, or the settle failed), which the processor works on as it
// would any lease. A lease settled and freed gives its slot back.
func (rs *routeSettle) finish(ctx context.Context, e *Engine, page store.RoutedPage) []*store.Lease {
	if rs == nil {
		return page.Leases
	}
	defer rs.drop()
	if len(rs.pages) == 0 {
		return page.Leases
	}
	if h := e.opts.Handoff; h != nil && len(rs.effects) > 0 {
		h.Take(rs.claims, page.Claimed, rs.effects)
	}
	settled := make(map[*store.Lease]bool, len(rs.pages))
	for i, pg := range rs.pages {
		pg.l.Pending = nil // consumed, whatever the outcome
		if page.Settled == nil || i >= len(page.Settled) {
			endProcessSpans(pg.traces, pg.settles, pg.ps, nil, errNotInline)
			continue
		}
		o := page.Settled[i]
		endProcessSpans(pg.traces, pg.settles, pg.ps, o.Results, o.Err)
		if o.Err != nil || len(o.Results) == 0 {
			e.log.Info("settling in routing failed; processing the entity", "flow", pg.l.Flow, "entity", pg.l.Entity, "err", o.Err)
			continue
		}
		e.recordSettled(ctx, pg.l, pg.items, o.Results, pg.traces)
		// Progress of processing as much as of routing: an entity the
		// processor would have settled is settled (see process).
		e.errs.OK()
		e.processingStage.OK()
		if o.Results[len(o.Results)-1].Released {
			settled[pg.l] = true
		}
	}
	rest := page.Leases[:0:0]
	for _, l := range page.Leases {
		if settled[l] {
			e.giveBack(1)
			continue
		}
		rest = append(rest, l)
	}
	return rest
}
