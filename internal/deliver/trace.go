package deliver

import (
	"context"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/tracing"
)

// startAttempt opens the span of one call to a destination and, unless the
// destination turned trace_propagation off, writes its context into the
// call's headers (traceparent, tracestate), so the destination's own
// traces continue this one. With tracing off the span is a no-op whose
// context is invalid, and the propagator writes nothing.
//
// The attributes are the ledger's identities and the request's method and
// address: never the query string (it may carry a key), a header value or
// the body.
func (w *Worker) startAttempt(ctx context.Context, c *store.ClaimedEffect, d *config.Destination, call *Call) (context.Context, trace.Span) {
	// A re-drive, started by the schedule or a person long after, links
	// to the receive span instead of continuing its trace.
	return w.startCall(ctx, "deliver "+d.Name, c, d, call, !c.Redrive, tracing.AttrAttempt.Int(c.Attempts+1))
}

// startCall opens the client span of a call to a destination (an attempt
// or a lookup) with the effect's identities, and propagates its context.
// Outside a span, it continues the trace the effect's event was received
// in: as the receive span's child when asChild, else as a new trace
// linking to it.
func (w *Worker) startCall(ctx context.Context, name string, c *store.ClaimedEffect, d *config.Destination, call *Call, asChild bool, extra ...attribute.KeyValue) (context.Context, trace.Span) {
	if !w.traceOn {
		// Not even the attributes are built: tracing off costs nothing.
		return ctx, noop.Span{}
	}
	attrs := []attribute.KeyValue{
		tracing.AttrDestination.String(d.Name),
		tracing.AttrEffectID.Int64(c.ID),
		tracing.AttrEpisodeKey.String(c.EpisodeKey),
		tracing.AttrFlow.String(c.Flow),
		tracing.AttrEntity.String(c.Entity),
		tracing.AttrVersion.String(c.Version),
		tracing.AttrEffect.String(c.Effect.Effect),
		tracing.AttrSource.String(c.Source),
		tracing.AttrEventID.String(c.SourceEventID),
	}
	attrs = append(attrs, extra...)
	if call.Method != "" {
		attrs = append(attrs, semconv.HTTPRequestMethodKey.String(call.Method))
	}
	if u, err := url.Parse(d.BaseURL); err == nil && u.Host != "" {
		attrs = append(attrs, semconv.ServerAddress(u.Hostname()), semconv.URLScheme(u.Scheme))
		if p, err := strconv.Atoi(u.Port()); err == nil {
			attrs = append(attrs, semconv.ServerPort(p))
		}
	}
	// A lookup inside an attempt stays under the attempt.
	var cont []trace.SpanStartOption
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx, cont = tracing.Continue(ctx, c.TraceContext, asChild)
	}
	opts := append([]trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...)}, cont...)
	ctx, span := w.tracer.Start(ctx, name, opts...)
	if d.PropagatesTrace() && call.Header != nil {
		w.prop.Inject(ctx, propagation.HeaderCarrier(call.Header))
	}
	return ctx, span
}

// endAttempt records the answer on the attempt's span: the status and
// the error class hookledger gave it.
func endAttempt(span trace.Span, resp *Response, class store.ErrorClass) {
	if !span.IsRecording() {
		return
	}
	if resp != nil && resp.Status != 0 {
		span.SetAttributes(semconv.HTTPResponseStatusCode(resp.Status))
	}
	if class != classSuccess && class != store.ClassNone {
		span.SetAttributes(semconv.ErrorTypeKey.String(string(class)))
		span.SetStatus(codes.Error, string(class))
	}
}

// retryOnSpan records the wait before the next attempt, and whether the
// destination's Retry-After chose it.
func retryOnSpan(ctx context.Context, ra retryAfter, wait time.Duration) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.Float64("hookledger.retry_wait_s", wait.Seconds()))
	if ra.OK {
		span.SetAttributes(tracing.AttrRetryAfter.Float64(ra.Wait.Seconds()))
	}
}

// stateOnSpan records, on the attempt's span that ctx holds, the state
// the attempt left the effect in (done, retry_wait, dead,
// needs_reconciliation, …).
func stateOnSpan(ctx context.Context, state store.EffectState) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(tracing.AttrState.String(string(state)))
	}
}

// Why a lookup asks: to reconcile an unknown outcome, or to verify that a
// done effect is still there.
const (
	lookupReconcile = "reconcile"
	lookupVerify    = "verify"
)

// endLookup records a lookup's answer on its span.
func endLookup(span trace.Span, att *store.Attempt, found bool, err error) {
	if !span.IsRecording() {
		return
	}
	if att != nil && att.Status != 0 {
		span.SetAttributes(semconv.HTTPResponseStatusCode(att.Status))
	}
	span.SetAttributes(attribute.Bool("hookledger.found", found))
	if err != nil {
		class := store.ClassTransient
		if att != nil && att.Class != store.ClassNone {
			class = att.Class
		}
		span.SetAttributes(semconv.ErrorTypeKey.String(string(class)))
		span.SetStatus(codes.Error, string(class))
	}
}
