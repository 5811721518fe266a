package tracing_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/hookledger/hookledger/internal/tracing"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestResolve(t *testing.T) {
	half := 0.5
	for _, tc := range []struct {
		name     string
		in       tracing.Settings
		env      []string
		enabled  bool
		protocol string
		service  string
		err      string
	}{
		{name: "off by default", protocol: tracing.ProtocolHTTP, service: "hookledger"},
		{name: "config enables", in: tracing.Settings{Enabled: true}, enabled: true, protocol: tracing.ProtocolHTTP, service: "hookledger"},
		{name: "config endpoint enables", in: tracing.Settings{Endpoint: "http://127.0.0.1:4318"}, enabled: true, protocol: tracing.ProtocolHTTP, service: "hookledger"},
		{name: "env endpoint enables", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}, enabled: true, protocol: tracing.ProtocolHTTP, service: "hookledger"},
		{name: "env traces endpoint enables", env: []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/v1/traces"}, enabled: true, protocol: tracing.ProtocolHTTP, service: "hookledger"},
		{name: "exporter otlp", env: []string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_SERVICE_NAME", "billing"}, enabled: true, protocol: tracing.ProtocolGRPC, service: "billing"},
		{name: "config protocol first", in: tracing.Settings{Enabled: true, Protocol: tracing.ProtocolHTTP}, env: []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, enabled: true, protocol: tracing.ProtocolHTTP, service: "hookledger"},
		{name: "sdk disabled wins", in: tracing.Settings{Enabled: true, Endpoint: "http://c:4318"}, env: []string{"OTEL_SDK_DISABLED", "true"}, protocol: tracing.ProtocolHTTP, service: "hookledger"},
		{name: "exporter none wins", in: tracing.Settings{Enabled: true}, env: []string{"OTEL_TRACES_EXPORTER", "none"}, protocol: tracing.ProtocolHTTP, service: "hookledger"},
		{name: "unknown exporter", env: []string{"OTEL_TRACES_EXPORTER", "zipkin"}, err: `OTEL_TRACES_EXPORTER: "zipkin" is not one of otlp, none`},
		{name: "unknown protocol", env: []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"}, err: `tracing protocol: "http/json" is not one of http/protobuf, grpc`},
		{name: "ratio kept", in: tracing.Settings{Enabled: true, SampleRatio: &half}, enabled: true, protocol: tracing.ProtocolHTTP, service: "hookledger"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.in.Resolve(env(tc.env...))
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Enabled != tc.enabled || got.Protocol != tc.protocol || got.ServiceName != tc.service {
				t.Fatalf("got enabled %v protocol %q service %q, want %v %q %q", got.Enabled, got.Protocol, got.ServiceName, tc.enabled, tc.protocol, tc.service)
			}
			if tc.in.SampleRatio != nil && got.SampleRatio != tc.in.SampleRatio {
				t.Fatal("sample ratio lost")
			}
		})
	}
}

// Off records nothing: its spans are not recording and carry no context
// to propagate.
func TestOffRecordsNothing(t *testing.T) {
	p, err := tracing.New(context.Background(), tracing.Settings{}, tracing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Enabled() {
		t.Fatal("a provider built from empty settings is enabled")
	}
	ctx, span := p.Tracer().Start(context.Background(), "x")
	defer span.End()
	h := http.Header{}
	p.Propagator().Inject(ctx, propagation.HeaderCarrier(h))
	if span.IsRecording() || span.SpanContext().IsValid() || h.Get("Traceparent") != "" {
		t.Fatalf("off: recording %v valid %v traceparent %q", span.IsRecording(), span.SpanContext().IsValid(), h.Get("Traceparent"))
	}
}

// The log handler stamps records logged inside a span with its ids, and
// leaves the others alone.
func TestLogHandlerAddsTraceIDs(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	p, err := tracing.New(context.Background(), tracing.Settings{}, tracing.Options{Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	log := slog.New(tracing.LogHandler(slog.NewTextHandler(&buf, nil))).With("component", "test")
	ctx, span := p.Tracer().Start(context.Background(), "x")
	log.InfoContext(ctx, "inside")
	span.End()
	log.InfoContext(context.Background(), "outside")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("log: %q", buf.String())
	}
	sc := span.SpanContext()
	if !strings.Contains(lines[0], "trace_id="+sc.TraceID().String()) || !strings.Contains(lines[0], "span_id="+sc.SpanID().String()) ||
		!strings.Contains(lines[0], "component=test") {
		t.Fatalf("inside a span: %q", lines[0])
	}
	if strings.Contains(lines[1], "trace_id") {
		t.Fatalf("outside a span: %q", lines[1])
	}
}

// Spans reach a real OTLP/HTTP receiver on loopback, as protobuf on
// /v1/traces, with the service's name and version, when the endpoint is
// configured; shutdown flushes them.
func TestExportsOverOTLPHTTP(t *testing.T) {
	var mu sync.Mutex
	var names []string
	var service string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("export to %s as %q", r.URL.Path, r.Header.Get("Content-Type"))
		}
		b, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Errorf("not an OTLP export: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.Resource.Attributes {
				if kv.Key == "service.name" {
					service = kv.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names = append(names, s.Name)
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	defer srv.Close()
	set, err := tracing.Settings{Endpoint: srv.URL, ServiceName: "hookledger-test", Version: "v9"}.Resolve(env())
	if err != nil {
		t.Fatal(err)
	}
	p, err := tracing.New(context.Background(), set, tracing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.Tracer().Start(context.Background(), "deliver dest")
	span.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(names) != 1 || names[0] != "deliver dest" || service != "hookledger-test" {
		t.Fatalf("received spans %q of service %q", names, service)
	}
}

// Handler: off, it is the handler itself; on, a request is a server span
// named for the route, with the status the handler wrote (5xx an error),
// and the handler sees the span in its context.
func TestHandler(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !trace.SpanContextFromContext(r.Context()).IsValid() && r.URL.Path != "/off" {
			t.Error("the handler's context holds no span")
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	if got := tracing.Off().Handler(h, tracing.ServerOptions{}); reflect.ValueOf(got).Pointer() != reflect.ValueOf(h).Pointer() {
		t.Fatal("tracing off wraps the handler")
	}
	exp := tracetest.NewInMemoryExporter()
	p, err := tracing.New(context.Background(), tracing.Settings{}, tracing.Options{Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /hooks/{source}", p.Handler(h, tracing.ServerOptions{Attributes: func(r *http.Request) []attribute.KeyValue {
		return []attribute.KeyValue{tracing.AttrSource.String(r.PathValue("source"))}
	}}))
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("POST", "/hooks/stripe", nil))
	spans := exp.GetSpans()
	if rec.Code != 503 || len(spans) != 1 {
		t.Fatalf("status %d, %d spans", rec.Code, len(spans))
	}
	s := spans[0]
	a := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		a[kv.Key] = kv.Value
	}
	if s.Name != "POST /hooks/{source}" || s.SpanKind != trace.SpanKindServer || s.Status.Code != codes.Error ||
		a["http.response.status_code"].AsInt64() != 503 || a["http.route"].AsString() != "/hooks/{source}" || a["hookledger.source"].AsString() != "stripe" {
		t.Fatalf("span %s kind %v status %v attributes %v", s.Name, s.SpanKind, s.Status, s.Attributes)
	}
}

// A request's own traceparent becomes the span's parent only when Trusted
// says so; with no Trusted (the admin API) or a false one, it is a link
// and the span starts a trace of its own.
func TestHandlerTrustsOnlyWhenTold(t *testing.T) {
	const inTrace, inSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, tc := range []struct {
		name    string
		trusted func(*http.Request) bool
		parent  bool
	}{
		{"no Trusted", nil, false},
		{"untrusted", func(*http.Request) bool { return false }, false},
		{"trusted", func(*http.Request) bool { return true }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			p, err := tracing.New(context.Background(), tracing.Settings{}, tracing.Options{Exporter: exp})
			if err != nil {
				t.Fatal(err)
			}
			h := p.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), tracing.ServerOptions{Trusted: tc.trusted})
			req := httptest.NewRequest("POST", "/api/v1/messages", nil)
			req.Header.Set("Traceparent", "00-"+inTrace+"-"+inSpan+"-01")
			h.ServeHTTP(httptest.NewRecorder(), req)
			spans := exp.GetSpans()
			if len(spans) != 1 {
				t.Fatalf("%d spans, want 1", len(spans))
			}
			s := spans[0]
			isChild := s.SpanContext.TraceID().String() == inTrace && s.Parent.SpanID().String() == inSpan && len(s.Links) == 0
			isLinked := s.SpanContext.TraceID().String() != inTrace && !s.Parent.IsValid() && len(s.Links) == 1 &&
				s.Links[0].SpanContext.SpanID().String() == inSpan
			if (tc.parent && !isChild) || (!tc.parent && !isLinked) {
				t.Fatalf("span trace %s parent %s links %v; want parent %v", s.SpanContext.TraceID(), s.Parent.SpanID(), s.Links, tc.parent)
			}
		})
	}
}
