// Package tracing exports OpenTelemetry traces of hookledger's work: a
// delivery attempt, later the receive and processing stages. It owns the
// tracer provider (exporter, sampler, resource) and the names of the
// attributes the ledger's identities are recorded under, so that every
// stage names a source, an effect or an episode key the same way.
//
// Tracing is off unless configured (the config's tracing block or the
// standard OTEL_* variables): then the provider is OpenTelemetry's no-op
// one, a span costs one interface call, and no traceparent is sent, since
// a no-op span has no valid context to propagate.
//
// A span never holds a secret, a signature or a body: the attributes are
// identities, names, status codes and error classes, chosen here.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// scopeName is the instrumentation scope every hookledger span is
// recorded under.
const scopeName = "github.com/hookledger/hookledger"

// Protocols an exporter speaks (OTEL_EXPORTER_OTLP_PROTOCOL's values).
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// Settings say whether and where traces go. The config's tracing block
// fills them; Resolve completes them from the OTEL_* environment.
type Settings struct {
	// Enabled turns tracing on. Resolve also sets it when an endpoint
	// (here or in OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT) or
	// OTEL_TRACES_EXPORTER=otlp is given, and clears it when
	// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none.
	Enabled bool
	// Endpoint is the collector's URL (http://host:4318 for OTLP/HTTP,
	// http://host:4317 for gRPC). Empty: the exporter's own default and
	// the OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT variables.
	Endpoint string
	// Protocol is http/protobuf (the default) or grpc.
	Protocol string
	// SampleRatio is the share of new traces recorded, 0 to 1; nil leaves
	// the choice to OTEL_TRACES_SAMPLER (default: every trace). A trace
	// that arrives sampled from a trusted sender stays sampled.
	SampleRatio *float64
	// ServiceName names the process in the traces (default hookledger,
	// or OTEL_SERVICE_NAME).
	ServiceName string
	// Version is the build's version stamp, recorded as service.version.
	Version string
}

// Resolve completes s from the environment lookup (os.LookupEnv in a
// program): the config's values come first, the variables fill what it
// leaves out, and OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER=none turn
// tracing off whatever else is set, as the specification asks.
func (s Settings) Resolve(lookup func(string) (string, bool)) (Settings, error) {
	get := func(k string) string {
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	if s.Endpoint != "" || get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || get("OTEL_EXPORTER_OTLP_ENDPOINT") != "" {
		s.Enabled = true
	}
	switch exp := strings.ToLower(get("OTEL_TRACES_EXPORTER")); exp {
	case "":
	case "otlp":
		s.Enabled = true
	case "none":
		s.Enabled = false
	default:
		return s, fmt.Errorf("OTEL_TRACES_EXPORTER: %q is not one of otlp, none", exp)
	}
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		s.Enabled = false
	}
	if s.Protocol == "" {
		s.Protocol = get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	}
	if s.Protocol == "" {
		s.Protocol = get("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if s.Protocol == "" {
		s.Protocol = ProtocolHTTP
	}
	if s.Protocol != ProtocolHTTP && s.Protocol != ProtocolGRPC {
		return s, fmt.Errorf("tracing protocol: %q is not one of %s, %s", s.Protocol, ProtocolHTTP, ProtocolGRPC)
	}
	if s.ServiceName == "" {
		s.ServiceName = get("OTEL_SERVICE_NAME")
	}
	if s.ServiceName == "" {
		s.ServiceName = "hookledger"
	}
	if r := s.SampleRatio; r != nil && (*r < 0 || *r > 1) {
		return s, fmt.Errorf("tracing sample_ratio: %v is not between 0 and 1", *r)
	}
	return s, nil
}

// Provider is the process's tracer provider: a tracer for every stage and
// the propagator that writes and reads traceparent and tracestate.
type Provider struct {
	tp       trace.TracerProvider
	shutdown func(context.Context) error
	prop     propagation.TextMapPropagator
}

// Options are what tests and embedding programs inject.
type Options struct {
	// Exporter, when set, receives the spans instead of an OTLP exporter
	// (tests: tracetest.InMemoryExporter). Spans go to it synchronously.
	Exporter sdktrace.SpanExporter
}

// Off is a provider that records nothing.
func Off() *Provider {
	return &Provider{tp: noop.NewTracerProvider(), prop: propagation.TraceContext{}}
}

// New builds the provider s describes; with s.Enabled false it is Off.
// It does not connect: an unreachable collector shows as export errors
// later (logged by OpenTelemetry's handler), never as a refusal to start.
func New(ctx context.Context, s Settings, opts Options) (*Provider, error) {
	if !s.Enabled && opts.Exporter == nil {
		return Off(), nil
	}
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL,
		semconv.ServiceName(s.ServiceName), semconv.ServiceVersion(s.Version)))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if s.SampleRatio != nil {
		tpOpts = append(tpOpts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(*s.SampleRatio))))
	}
	if opts.Exporter != nil {
		tpOpts = append(tpOpts, sdktrace.WithSyncer(opts.Exporter))
	} else {
		exp, err := newExporter(ctx, s)
		if err != nil {
			return nil, err
		}
		tpOpts = append(tpOpts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)
	return &Provider{tp: tp, shutdown: tp.Shutdown, prop: propagation.TraceContext{}}, nil
}

// newExporter builds the OTLP exporter; the exporter itself reads the
// OTEL_EXPORTER_OTLP_* variables the settings leave unset (headers,
// timeout, certificates).
func newExporter(ctx context.Context, s Settings) (sdktrace.SpanExporter, error) {
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch s.Protocol {
	case ProtocolGRPC:
		var o []otlptracegrpc.Option
		if s.Endpoint != "" {
			o = append(o, otlptracegrpc.WithEndpointURL(s.Endpoint))
		}
		exp, err = otlptracegrpc.New(ctx, o...)
	default:
		var o []otlptracehttp.Option
		if s.Endpoint != "" {
			o = append(o, otlptracehttp.WithEndpointURL(strings.TrimRight(s.Endpoint, "/")+"/v1/traces"))
		}
		exp, err = otlptracehttp.New(ctx, o...)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: exporter: %w", err)
	}
	return exp, nil
}

// Tracer is the tracer every stage records its spans with.
func (p *Provider) Tracer() trace.Tracer { return p.tp.Tracer(scopeName) }

// Propagator writes and reads the W3C traceparent and tracestate headers.
func (p *Provider) Propagator() propagation.TextMapPropagator { return p.prop }

// Shutdown flushes the spans not exported yet and stops the exporter,
// within ctx. Safe on Off.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil || p.shutdown == nil {
		return nil
	}
	if err := p.shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// ShutdownTimeout bounds the final flush at stop: a collector that is
// down must not hold the process.
const ShutdownTimeout = 5 * time.Second

// The attributes of the ledger's identities.
const (
	AttrSource      = attribute.Key("hookledger.source")
	AttrEventID     = attribute.Key("hookledger.event_id")
	AttrFlow        = attribute.Key("hookledger.flow")
	AttrEntity      = attribute.Key("hookledger.entity")
	AttrVersion     = attribute.Key("hookledger.version")
	AttrEpisodeKey  = attribute.Key("hookledger.episode_key")
	AttrEffectID    = attribute.Key("hookledger.effect_id")
	AttrEffect      = attribute.Key("hookledger.effect")
	AttrDestination = attribute.Key("hookledger.destination")
	AttrAttempt     = attribute.Key("hookledger.attempt")
	AttrDisposition = attribute.Key("hookledger.disposition")
	AttrState       = attribute.Key("hookledger.state")
	AttrRetryAfter  = attribute.Key("hookledger.retry_after_s")
)

// Enabled reports whether spans are recorded and exported.
func (p *Provider) Enabled() bool { return p != nil && p.shutdown != nil }

// LogHandler adds trace_id and span_id to every record logged with a
// context that holds a span, so that a log line and the trace it belongs
// to can be found from each other. Records without a span pass unchanged.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return l.Handler.Handle(ctx, r)
}

func (l logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{l.Handler.WithAttrs(attrs)}
}

func (l logHandler) WithGroup(name string) slog.Handler {
	return logHandler{l.Handler.WithGroup(name)}
}

// Child starts a span under the one ctx holds, from the same provider, so
// a stage inside a traced request needs no tracer of its own. Without a
// recording span in ctx (tracing off, or the trace not sampled) it starts
// nothing and returns a no-op span.
func Child(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, noop.Span{}
	}
	return parent.TracerProvider().Tracer(scopeName).Start(ctx, name, trace.WithAttributes(attrs...))
}

// Annotate adds attributes to the span ctx holds, when it records; attrs
// is called only then, so an unrecorded request builds none.
func Annotate(ctx context.Context, attrs func() []attribute.KeyValue) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attrs()...)
	}
}

// Traceparent is the W3C traceparent of the span ctx holds, stored with
// an event so that work done later continues its trace; "" without a
// valid span (tracing off).
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// remote is the span context a stored traceparent names; not valid when
// it is empty or malformed (a stored value is never trusted to parse).
func remote(traceparent string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	return trace.SpanContextFromContext(ctx)
}

// Continue returns the options that make a span continue the stored
// trace: its child, or, when asChild is false (a replay, a re-drive,
// where a parent would claim the first request caused this work), a new
// trace linking to it. Nothing when traceparent is empty or malformed.
func Continue(ctx context.Context, traceparent string, asChild bool) (context.Context, []trace.SpanStartOption) {
	sc := remote(traceparent)
	if !sc.IsValid() {
		return ctx, nil
	}
	if asChild {
		return trace.ContextWithRemoteSpanContext(ctx, sc), nil
	}
	return ctx, []trace.SpanStartOption{trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: sc})}
}
