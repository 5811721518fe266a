package flow

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/trace"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
)

// Settling in routing. Where routing's transaction leases the entities it
// made ready and reads their work (PostgreSQL: store.Lease.Pending), the
// processor's transaction that settles that work can be the same one: the
// work is prepared inside the routing transaction, between its reads and
// its commit, and settled there (store.EventRouteNextParams.Settle). A
// lone webhook then costs three transactions (inbox, routing with
// processing, the call's settle) instead of four.
//
// Only work that needs nothing but its expressions is prepared so: a
// refetch calls the source's API, and a flow that reads the entity's
// previous state reads it on another connection; neither belongs inside
// a transaction that holds the page's row locks. The processor settles
// those as before.

// inlineMax bounds the routing pages that settle their entities' work
// themselves, and the entities one page settles: each is prepared one
// after another while the routing transaction is open, where the
// processor prepares them side by side in its slots. A larger page is a
// busy pipeline, where the processor's groups settle many entities in
// shared statements; settling them in small groups in routing cost a
// third more buffers per event at saturation
// (docs/benchmarks-history.md, "Settling in routing").
const inlineMax = 8

// routeSettle is what one routing take was asked to settle, kept between
// the preparation inside the transaction and its outcome after it.
type routeSettle struct {
	pages   []*inlinePage
	claims  []*store.EffectClaimParams
	effects map[string]int
}

// inlinePage is one entity's page prepared in the routing transaction.
type inlinePage struct {
	l       *store.Lease
	items   []*store.WorkItem
	ps      []*store.FlowApplyParams
	traces  []*itemTrace
	settles []trace.Span
}

// errNotInline ends the spans of a page prepared in a routing transaction
// that did not settle it: the processor prepares it again.
var errNotInline = errors.New("not settled in routing")

// inlineable reports whether the leased entity's listed work can be
// prepared inside the routing transaction.
func (e *Engine) inlineable(l *store.Lease) *config.Flow {
	f := e.flows[l.Flow]
	switch {
	case f == nil, len(l.Pending) == 0, len(l.Pending) >= workPage:
		// A full page may not be all the work: the processor pages.
		return nil
	case f.Version.Mode == config.ModeRefetch, f.Compiled.ReadsPrevious, e.changesOnly[f.Name] != nil:
		return nil
	case e.clk.Now().After(l.Until):
		return nil
	}
	return f
}

// prepare prepares, inside the routing transaction, the listed work of up
// to inlineMax of the leases, and promises the delivery worker's slots
// for the effects it would write (Handoff): the settle claims them.
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
		ps, traces, deferred := e.preparePage(ctx, f, l, l.Pending)
		if deferred || len(ps) < len(l.Pending) {
			endProcessSpans(traces, startSettles(traces), ps, nil, errNotInline)
			continue
		}
		// The whole of the entity's work is listed: the apply frees the
		// lease itself if nothing arrived meanwhile.
		ps[len(ps)-1].ReleaseIfDrained = true
		rs.pages = append(rs.pages, &inlinePage{l: l, items: l.Pending, ps: ps, traces: traces, settles: startSettles(traces)})
		out.Subs = append(out.Subs, ps)
	}
	if h := e.opts.Handoff; h != nil && len(out.Subs) > 0 {
		if rs.effects = effectsByDestination(out.Subs); len(rs.effects) > 0 {
			rs.claims = h.Reserve(rs.effects)
			out.Claims = rs.claims
		}
	}
	return out
}

// finish takes the routing page's outcome: the calls of the effects its
// claims took start, and each entity settled there is recorded. It
// returns the leases still to process: those not settled in routing, and
// those settled there whose lease the apply did not free (work arrived
// meanwhile, or the settle failed), which the processor works on as it
// would any lease. A lease settled and freed gives its slot back.
func (rs *routeSettle) finish(ctx context.Context, e *Engine, page store.RoutedPage) []*store.Lease {
	if rs == nil || len(rs.pages) == 0 {
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
