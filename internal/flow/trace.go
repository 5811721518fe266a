package flow

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/tracing"
)

// itemTrace is the tracing of one work item's processing: the span of
// the whole (process <flow>) and its context, which its prepare and
// settle spans are children of.
type itemTrace struct {
	ctx     context.Context
	process trace.Span
}

// startProcess opens the span of one work item's processing, in the trace
// of the request that brought its event in: its child on the first pass,
// a new trace linking to it for a replay (which a person started, not the
// sender). nil when tracing is off.
func (e *Engine) startProcess(ctx context.Context, l *store.Lease, it *store.WorkItem) *itemTrace {
	if !e.opts.Tracing.Enabled() {
		return nil
	}
	attrs := []attribute.KeyValue{tracing.AttrFlow.String(l.Flow), tracing.AttrEntity.String(l.Entity),
		tracing.AttrSource.String(it.Event.Source), tracing.AttrEventID.String(it.Event.EventID)}
	if it.ReplayID != 0 {
		attrs = append(attrs, attribute.Int64("hookledger.replay_id", it.ReplayID))
	}
	ictx, cont := tracing.Continue(ctx, it.Event.TraceContext, it.ReplayID == 0)
	ictx, span := e.opts.Tracing.Tracer().Start(ictx, "process "+l.Flow, append(cont, trace.WithAttributes(attrs...))...)
	return &itemTrace{ctx: ictx, process: span}
}

// startPrepare opens the span of an item's preparation under its process
// span: the version, state and effects computed from the event (with a
// refetch of the source's API when the flow asks for one).
func (t *itemTrace) startPrepare() trace.Span {
	if t == nil {
		return noop.Span{}
	}
	_, span := tracing.Child(t.ctx, "prepare")
	return span
}

// endPrepare records what the preparation computed, or that it failed
// (the event is then dead-lettered) or must be retried later (then the
// item's processing ends here, to start again on the next pass). The
// error's text stays out: it may quote the payload's values.
func (t *itemTrace) endPrepare(span trace.Span, p *store.FlowApplyParams, err error, deferred bool) {
	if t == nil {
		return
	}
	switch {
	case deferred:
		span.SetStatus(codes.Error, "deferred")
		t.process.SetAttributes(attribute.Bool("hookledger.deferred", true))
		t.process.SetStatus(codes.Error, "deferred")
	case err != nil:
		span.SetStatus(codes.Error, "the flow's expressions failed")
	case p != nil && p.Version != "":
		span.SetAttributes(tracing.AttrVersion.String(p.Version), attribute.Int("hookledger.effects", len(p.Effects)))
	}
	span.End()
	if deferred {
		t.process.End()
	}
}

// startSettles opens, under each item's process span, the span of the
// page's settle: the one transaction in which the revision guard decides
// each item's disposition and its effects are inserted. The items share
// its time.
func startSettles(traces []*itemTrace) []trace.Span {
	if len(traces) == 0 {
		return nil
	}
	spans := make([]trace.Span, len(traces))
	for i, t := range traces {
		_, spans[i] = tracing.Child(t.ctx, "settle", attribute.Int("hookledger.page", len(traces)))
	}
	return spans
}

// endProcessSpans records each item's outcome on its settle and process
// spans: the version it carried, its disposition (the revision guard's
// verdict), the effects it created; or the error that settled none of
// the page.
func endProcessSpans(traces []*itemTrace, settles []trace.Span, ps []*store.FlowApplyParams, results []*store.FlowApplyResult, err error) {
	for i, t := range traces {
		spans := []trace.Span{settles[i], t.process}
		for _, span := range spans {
			switch {
			case err != nil || i >= len(results):
				span.SetStatus(codes.Error, "the page was not settled")
			default:
				res := results[i]
				span.SetAttributes(tracing.AttrDisposition.String(string(res.Disposition)),
					attribute.Int("hookledger.effects_inserted", res.EffectsInserted))
				if i < len(ps) && ps[i].Version != "" {
					span.SetAttributes(tracing.AttrVersion.String(ps[i].Version))
				}
				// Not the reason: it may quote the payload's values.
				if res.Disposition == store.DispositionDeadLettered {
					span.SetStatus(codes.Error, "dead_lettered")
				}
			}
			span.End()
		}
	}
}

// routeSpans records, in each routed event's trace, the span of its
// routing: the flows it was routed into and how many failed. Routing a
// page is one transaction, so the spans share its time. It returns each
// event's context in its trace, for the lines logged about it (nil when
// tracing is off).
func (e *Engine) routeSpans(ctx context.Context, evs []*store.RoutableEvent, ds []*store.RouteDecision) []context.Context {
	if !e.opts.Tracing.Enabled() || len(evs) != len(ds) {
		return nil
	}
	tracer := e.opts.Tracing.Tracer()
	ctxs := make([]context.Context, len(evs))
	for i, ev := range evs {
		var flows []string
		failed := 0
		for _, r := range ds[i].Routes {
			flows = append(flows, r.Flow)
			if r.Failed != "" {
				failed++
			}
		}
		ictx, cont := tracing.Continue(ctx, ev.TraceContext, true)
		ictx, span := tracer.Start(ictx, "route", append(cont, trace.WithAttributes(tracing.AttrSource.String(ev.Source),
			tracing.AttrEventID.String(ev.EventID), attribute.StringSlice("hookledger.flows", flows),
			attribute.Int("hookledger.routes_failed", failed)))...)
		if failed > 0 {
			span.SetStatus(codes.Error, "a route failed")
		}
		span.End()
		ctxs[i] = ictx
	}
	return ctxs
}
