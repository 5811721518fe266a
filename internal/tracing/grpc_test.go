package tracing_test

import (
	"context"
	"net"
	"os"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/hookledger/hookledger/internal/tracing"
)

// grpcCollector is an OTLP/gRPC trace collector: it keeps the names of
// the spans it receives and the service they came from.
type grpcCollector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu      sync.Mutex
	names   []string
	service string
}

func (c *grpcCollector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, kv := range rs.Resource.Attributes {
			if kv.Key == "service.name" {
				c.service = kv.Value.GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.names = append(c.names, s.Name)
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// Configured by the standard variables alone (no tracing block), spans
// reach a real OTLP/gRPC collector on loopback, with the service's name,
// and OTEL_TRACES_SAMPLER's ratio applies: at 0 a new trace is dropped
// while a trace that arrives sampled stays sampled (parent-based).
func TestExportsOverOTLPGRPCFromEnv(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := &grpcCollector{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, col)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+lis.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_SERVICE_NAME", "hookledger-grpc")
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "0")
	set, err := tracing.Settings{}.Resolve(os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	if !set.Enabled || set.Protocol != tracing.ProtocolGRPC {
		t.Fatalf("settings from the environment: %+v", set)
	}
	p, err := tracing.New(context.Background(), set, tracing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, dropped := p.Tracer().Start(context.Background(), "new trace")
	dropped.End()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	parent := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
	_, kept := p.Tracer().Start(parent, "deliver dest")
	kept.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if len(col.names) != 1 || col.names[0] != "deliver dest" || col.service != "hookledger-grpc" {
		t.Fatalf("received spans %q of service %q, want only \"deliver dest\" of hookledger-grpc", col.names, col.service)
	}
}
