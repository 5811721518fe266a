package flow

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/tracing"
)

// processSpans opens one span per work item of a page, each in the trace
// of the request that brought its event in: its child on the first pass,
// a new trace linking to it for a replay (which a person started, not the
// sender). nil when tracing is off.
func (e *Engine) processSpans(ctx context.Context, l *store.Lease, items []*store.WorkItem) []trace.Span {
	if !e.opts.Tracing.Enabled() {
		return nil
	}
	tracer := e.opts.Tracing.Tracer()
	spans := make([]trace.Span, len(items))
	for i, it := range items {
		attrs := []attribute.KeyValue{tracing.AttrFlow.String(l.Flow), tracing.AttrEntity.String(l.Entity),
			tracing.AttrSource.String(it.Event.Source), tracing.AttrEventID.String(it.Event.EventID)}
		if it.ReplayID != 0 {
			attrs = append(attrs, attribute.Int64("hookledger.replay_id", it.ReplayID))
		}
		ictx, cont := tracing.Continue(ctx, it.Event.TraceContext, it.ReplayID == 0)
		_, spans[i] = tracer.Start(ictx, "process "+l.Flow, append(cont, trace.WithAttributes(attrs...))...)
	}
	return spans
}

// endProcessSpans records each item's outcome: the version it carried,
// its disposition, the effects it created; or the error that settled none
// of the page.
func endProcessSpans(spans []trace.Span, ps []*store.FlowApplyParams, results []*store.FlowApplyResult, err error) {
	for i, span := range spans {
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

// routeSpans records, in each routed event's trace, the span of its
// routing: the flows it was routed into and how many failed. Routing a
// page is one transaction, so the spans share its time.
func (e *Engine) routeSpans(ctx context.Context, evs []*store.RoutableEvent, ds []*store.RouteDecision) {
	if !e.opts.Tracing.Enabled() || len(evs) != len(ds) {
		return
	}
	tracer := e.opts.Tracing.Tracer()
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
		_, span := tracer.Start(ictx, "route", append(cont, trace.WithAttributes(tracing.AttrSource.String(ev.Source),
			tracing.AttrEventID.String(ev.EventID), attribute.StringSlice("hookledger.flows", flows),
			attribute.Int("hookledger.routes_failed", failed)))...)
		if failed > 0 {
			span.SetStatus(codes.Error, "a route failed")
		}
		span.End()
	}
}
