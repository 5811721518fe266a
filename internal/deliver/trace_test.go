package deliver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookledger/hookledger/internal/deliver/delivertest"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/tracing"
)

// traced is a provider recording every span in memory.
func traced(t *testing.T) (*tracing.Provider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	p, err := tracing.New(context.Background(), tracing.Settings{ServiceName: "test"}, tracing.Options{Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p, exp
}

func attrsOf(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// Each attempt is a client span named for the destination, carrying the
// ledger's identities, the status and the error class; the destination
// receives the span's own context in traceparent; and no attribute holds
// the destination's credential, the signing secret or the body.
func TestAttemptSpansAndTraceparent(t *testing.T) {
	const secret = "sk_live_tracing_secret_value"
	p, exp := traced(t)
	x := newWorld(t, setup{tracing: p, dest: "auth: {bearer: " + secret + "}\nsigning: {secrets: [\"whsec_dHJhY2luZ3Rlc3RzZWNyZXRzaWduaW5na2V5MzJieXQ=\"]}"})
	e := x.order("o1", 1)
	x.dest.Script(e.EpisodeKey, delivertest.Fail500)
	x.drain()
	x.wantState(x.get(e.ID), store.EffectRetryWait)
	x.clk.Advance(x.attempts(e.ID)[0].Wait)
	x.drain()
	x.wantState(x.get(e.ID), store.EffectDone)

	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want one per attempt (2): %+v", len(spans), spans)
	}
	reqs := x.dest.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	for i, s := range spans {
		if s.Name != "deliver dest" || s.SpanKind != trace.SpanKindClient {
			t.Fatalf("span %d: name %q kind %v", i, s.Name, s.SpanKind)
		}
		a := attrsOf(s)
		for k, want := range map[attribute.Key]string{
			tracing.AttrDestination: "dest", tracing.AttrEpisodeKey: e.EpisodeKey, tracing.AttrFlow: "orders",
			tracing.AttrEntity: "o1", tracing.AttrEffect: "charge", tracing.AttrSource: "shop",
			"http.request.method": "POST", "server.address": "127.0.0.1",
		} {
			if got := a[k].String(); got != want {
				t.Errorf("span %d: %s = %q, want %q", i, k, got, want)
			}
		}
		if a[tracing.AttrEffectID].AsInt64() != e.ID || a[tracing.AttrAttempt].AsInt64() != int64(i+1) {
			t.Errorf("span %d: effect id %v attempt %v", i, a[tracing.AttrEffectID].String(), a[tracing.AttrAttempt].String())
		}
		// The destination continues this span's trace.
		got := propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(reqs[i].Header))
		sc := trace.SpanContextFromContext(got)
		if !sc.IsValid() || sc.TraceID() != s.SpanContext.TraceID() || sc.SpanID() != s.SpanContext.SpanID() {
			t.Errorf("request %d: traceparent %q does not name span %d (%s/%s)", i, reqs[i].Header.Get("Traceparent"), i,
				s.SpanContext.TraceID(), s.SpanContext.SpanID())
		}
		for _, kv := range s.Attributes {
			v := kv.Value.String()
			if strings.Contains(v, secret) || strings.Contains(v, "whsec_") || strings.Contains(v, `"state"`) {
				t.Errorf("span %d: attribute %s leaks a secret or the body: %q", i, kv.Key, v)
			}
		}
	}
	first, second := attrsOf(spans[0]), attrsOf(spans[1])
	if first["http.response.status_code"].AsInt64() != 500 || first["error.type"].String() != string(store.ClassTransient) ||
		spans[0].Status.Code != codes.Error || first["hookledger.retry_wait_s"].Type() != attribute.FLOAT64 {
		t.Errorf("failed attempt: status %v error.type %q span status %v wait %v", first["http.response.status_code"].String(),
			first["error.type"].String(), spans[0].Status.Code, first["hookledger.retry_wait_s"].String())
	}
	// Each attempt names the state it left the effect in.
	if a, b := first[tracing.AttrState].AsString(), second[tracing.AttrState].AsString(); a != string(store.EffectRetryWait) || b != string(store.EffectDone) {
		t.Errorf("states on the attempts: %q then %q, want retry_wait then done", a, b)
	}
	if second["http.response.status_code"].AsInt64() != 201 || second["error.type"].String() != "" || spans[1].Status.Code == codes.Error {
		t.Errorf("successful attempt: status %v error.type %q span status %v", second["http.response.status_code"].String(),
			second["error.type"].String(), spans[1].Status.Code)
	}
}

// trace_propagation: false keeps the span but sends no trace headers; with
// tracing off nothing is recorded and nothing sent.
func TestTracePropagationOffAndTracingOff(t *testing.T) {
	p, exp := traced(t)
	for _, tc := range []struct {
		name  string
		s     setup
		spans int
	}{
		{"propagation off", setup{tracing: p, dest: "trace_propagation: false"}, 1},
		{"tracing off", setup{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp.Reset()
			x := newWorld(t, tc.s)
			e := x.order("o1", 1)
			x.drain()
			x.wantState(x.get(e.ID), store.EffectDone)
			if n := len(exp.GetSpans()); n != tc.spans {
				t.Fatalf("%d spans, want %d", n, tc.spans)
			}
			for _, r := range x.dest.Requests() {
				if v := r.Header.Get("Traceparent") + r.Header.Get("Tracestate"); v != "" {
					t.Fatalf("trace headers sent: %q", v)
				}
			}
		})
	}
}

// A reconciliation's lookup is a span of its own under the attempt whose
// outcome was unknown, named for the destination, saying why it asked and
// what it found; the attempt's error class is unknown.
func TestLookupSpans(t *testing.T) {
	p, exp := traced(t)
	x := newWorld(t, setup{dest: lookup, tracing: p})
	e := x.order("o1", 1)
	x.dest.Script(e.EpisodeKey, delivertest.TimeoutAfterWork)
	x.drain()
	x.wantState(x.get(e.ID), store.EffectDone)
	var names []string
	var look, attempt tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		names = append(names, s.Name)
		switch s.Name {
		case "lookup dest":
			look = s
		case "deliver dest":
			attempt = s
		}
	}
	// The lookup runs while the attempt settles: it is the attempt's
	// child, and ends first.
	if len(names) != 2 || look.Parent.SpanID() != attempt.SpanContext.SpanID() || !attempt.SpanContext.IsValid() {
		t.Fatalf("spans %q; want an attempt and a lookup under it", names)
	}
	a := attrsOf(look)
	if a["hookledger.lookup"].AsString() != "reconcile" || !a["hookledger.found"].AsBool() || a[tracing.AttrEpisodeKey].AsString() != e.EpisodeKey ||
		look.SpanKind != trace.SpanKindClient {
		t.Fatalf("lookup span attributes %v kind %v", look.Attributes, look.SpanKind)
	}
	if got := attrsOf(attempt)["error.type"].AsString(); got != string(store.ClassUnknown) {
		t.Fatalf("the timed-out attempt's error.type %q, want unknown", got)
	}
}

// An attempt continues the trace its event was received in: the child of
// the stored receive span. A re-drive of a dead effect, which the
// schedule started long after, is a trace of its own that links to it.
func TestRedriveLinksToTheReceiveTrace(t *testing.T) {
	const receiveTrace, receiveSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	p, exp := traced(t)
	x := newWorld(t, setup{tracing: p, dest: "retry: {base: 1s, cap: 10s, factor: 2, attempts: 1, redrive: [15m]}"})
	x.traceparent = "00-" + receiveTrace + "-" + receiveSpan + "-01"
	e := x.order("o1", 1)
	x.dest.Script(e.EpisodeKey, delivertest.Fail500)
	x.drain()
	x.wantState(x.get(e.ID), store.EffectDead)
	x.clk.Advance(15 * time.Minute)
	x.drain()
	x.wantState(x.get(e.ID), store.EffectDone)

	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want the attempt and the re-drive", len(spans))
	}
	first, redrive := spans[0], spans[1]
	if first.SpanContext.TraceID().String() != receiveTrace || first.Parent.SpanID().String() != receiveSpan || len(first.Links) != 0 {
		t.Fatalf("first attempt: trace %s parent %s links %v, want the child of %s/%s", first.SpanContext.TraceID(),
			first.Parent.SpanID(), first.Links, receiveTrace, receiveSpan)
	}
	if redrive.SpanContext.TraceID().String() == receiveTrace || redrive.Parent.IsValid() || len(redrive.Links) != 1 ||
		redrive.Links[0].SpanContext.TraceID().String() != receiveTrace || redrive.Links[0].SpanContext.SpanID().String() != receiveSpan {
		t.Fatalf("re-drive: trace %s parent %v links %v, want a new trace linking to %s/%s", redrive.SpanContext.TraceID(),
			redrive.Parent.SpanID(), redrive.Links, receiveTrace, receiveSpan)
	}
}

// Continuous verification's lookup of a done effect is a client span
// saying why it asked and what it found. The schedule started it, days
// after the delivery, not the sender: it is a trace of its own linking to
// the receive span, not one more child of the delivery's trace.
func TestVerifyLookupSpanLinksToTheReceiveTrace(t *testing.T) {
	const receiveTrace, receiveSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	p, exp := traced(t)
	x := newTracedVerifyWorld(t, "{sample: 1.0, after: 5m}", p)
	x.traceparent = "00-" + receiveTrace + "-" + receiveSpan + "-01"
	e := x.done(1)[0]
	exp.Reset()
	x.clk.Advance(5*time.Minute + time.Second)
	if n := x.step(); n != 1 {
		t.Fatalf("%d lookups, want 1", n)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != "lookup dest" || spans[0].SpanKind != trace.SpanKindClient {
		t.Fatalf("spans %+v, want one client span \"lookup dest\"", spans)
	}
	s := spans[0]
	a := attrsOf(s)
	if a["hookledger.lookup"].AsString() != "verify" || !a["hookledger.found"].AsBool() || a[tracing.AttrEffectID].AsInt64() != e.ID ||
		a["http.response.status_code"].AsInt64() != 200 {
		t.Fatalf("verification span attributes %v", s.Attributes)
	}
	if s.SpanContext.TraceID().String() == receiveTrace || s.Parent.IsValid() || len(s.Links) != 1 ||
		s.Links[0].SpanContext.TraceID().String() != receiveTrace || s.Links[0].SpanContext.SpanID().String() != receiveSpan {
		t.Fatalf("verification: trace %s parent %s links %v, want a new trace linking to %s/%s", s.SpanContext.TraceID(),
			s.Parent.SpanID(), s.Links, receiveTrace, receiveSpan)
	}
}

// A 429's Retry-After is on the attempt's span: the destination's wait,
// the wait taken (the same), the quota class and the status.
func TestAttemptSpanRecordsRetryAfter(t *testing.T) {
	p, exp := traced(t)
	x := newWorld(t, setup{tracing: p, srv: delivertest.Options{RetryAfter: 7 * time.Second}})
	e := x.order("o1", 1)
	x.dest.Script(e.EpisodeKey, delivertest.Fail429Seconds)
	x.drain()
	x.wantState(x.get(e.ID), store.EffectRetryWait)
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	a := attrsOf(spans[0])
	if a["http.response.status_code"].AsInt64() != 429 || a["error.type"].AsString() != string(store.ClassQuota) ||
		a[tracing.AttrRetryAfter].AsFloat64() != 7 || a["hookledger.retry_wait_s"].AsFloat64() != 7 ||
		a[tracing.AttrState].AsString() != string(store.EffectRetryWait) {
		t.Fatalf("attempt span %v, want 429, quota, Retry-After 7 s taken, retry_wait", spans[0].Attributes)
	}
}
