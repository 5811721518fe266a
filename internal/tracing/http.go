package tracing

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ServerOptions say how Handler treats a request.
type ServerOptions struct {
	// Trusted reports whether the request's own traceparent may be the
	// span's parent. A sender outside the organisation could otherwise
	// choose the trace ids (and force sampling) of hookledger's traces;
	// an untrusted one is kept as a link. Nil trusts nobody.
	Trusted func(r *http.Request) bool
	// Attributes adds attributes from the request (the source's name).
	Attributes func(r *http.Request) []attribute.KeyValue
}

// Handler wraps h in a server span named for the route the mux matched
// ("POST /hooks/{source}"), with OpenTelemetry's HTTP server attributes.
// With tracing off it returns h itself: nothing is added to a request.
//
// This is written here rather than taken from otelhttp: the trust rule
// for an incoming traceparent (parent or link) is the point, and otelhttp
// makes every incoming context the parent.
func (p *Provider) Handler(h http.Handler, opts ServerOptions) http.Handler {
	if !p.Enabled() {
		return h
	}
	tracer := p.Tracer()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		start := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			semconv.HTTPRequestMethodKey.String(r.Method), semconv.URLPath(r.URL.Path), semconv.URLScheme(scheme(r)))}
		if in := trace.SpanContextFromContext(p.prop.Extract(ctx, propagation.HeaderCarrier(r.Header))); in.IsValid() {
			if opts.Trusted != nil && opts.Trusted(r) {
				ctx = trace.ContextWithRemoteSpanContext(ctx, in)
			} else {
				start = append(start, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: in,
					Attributes: []attribute.KeyValue{attribute.String("hookledger.link", "sender")}}))
			}
		}
		if opts.Attributes != nil {
			start = append(start, trace.WithAttributes(opts.Attributes(r)...))
		}
		ctx, span := tracer.Start(ctx, routeName(r.Method, r.Pattern), start...)
		defer span.End()
		rec := &statusRecorder{ResponseWriter: w}
		inner := r.WithContext(ctx)
		h.ServeHTTP(rec, inner)
		// A mux inside h (the admin API's) filled in the route it matched
		// on the request it was given: a name that groups requests, unlike
		// the path, which holds ids.
		route := r.Pattern
		if inner.Pattern != "" {
			route = inner.Pattern
		}
		if route != "" {
			span.SetName(routeName(r.Method, route))
			// http.route is the path template alone; Go's patterns may
			// start with the method.
			_, path, found := strings.Cut(route, " ")
			if !found {
				path = route
			}
			span.SetAttributes(semconv.HTTPRoute(path))
		}
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	})
}

// routeName is a span's name: the route with its method ("POST
// /hooks/{source}"), or the method alone when no route is known yet.
func routeName(method, pattern string) string {
	if pattern == "" {
		return method
	}
	if strings.HasPrefix(pattern, method+" ") {
		return pattern
	}
	return method + " " + pattern
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// statusRecorder keeps the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (deadlines,
// flushes) through the recorder.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
