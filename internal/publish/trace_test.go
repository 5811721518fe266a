package publish

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/tracing"
)

// Every publish is a span saying which message it stored, how many
// endpoints it fans out to and whether its Idempotency-Key replayed an
// earlier publish; the payload never appears in it.
func TestPublishSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	p, err := tracing.New(context.Background(), tracing.Settings{}, tracing.Options{Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, sqliteURLOf(t), "{}")
	e.create("a", newReceiver(t).srv.URL)
	e.create("b", newReceiver(t).srv.URL, "invoice.*")
	s := New(e.cfg, e.st, Options{Clock: e.clk, Registerer: prometheus.NewRegistry(), Tracing: p})
	if err := s.Refresh(e.ctx); err != nil {
		t.Fatal(err)
	}
	const data = `{"secret_looking":"card_4242"}`
	m, fp, err := DecodeMessage([]byte(`{"type":"invoice.paid","data":` + data + `}`))
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Publish(e.ctx, "key-1", fp, m, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish(e.ctx, "key-1", fp, m, "test"); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want one per publish", len(spans))
	}
	// The deliveries to the endpoints continue the publish's trace: its
	// traceparent is stored with the message, as a webhook's is.
	effs, err := e.st.EffectList(e.ctx, &store.EffectListParams{})
	if err != nil || len(effs) != 2 {
		t.Fatalf("effects: %v %d", err, len(effs))
	}
	want := "00-" + spans[0].SpanContext.TraceID().String() + "-" + spans[0].SpanContext.SpanID().String() + "-01"
	for _, f := range effs {
		if f.TraceContext != want {
			t.Fatalf("endpoint effect %s carries traceparent %q, want the publish's %q", f.EpisodeKey, f.TraceContext, want)
		}
	}
	for i, want := range []struct {
		fanout   int64
		replayed bool
	}{{2, false}, {0, true}} { // a replay fans out nothing again
		a := map[attribute.Key]attribute.Value{}
		for _, kv := range spans[i].Attributes {
			a[kv.Key] = kv.Value
			if strings.Contains(kv.Value.String(), "card_4242") {
				t.Errorf("span %d: attribute %s holds the payload", i, kv.Key)
			}
		}
		if spans[i].Name != "publish" || a["hookledger.message_id"].AsString() != first.ID || a["hookledger.message_type"].AsString() != "invoice.paid" ||
			a["hookledger.fanout"].AsInt64() != want.fanout || a["hookledger.replayed"].AsBool() != want.replayed {
			t.Errorf("span %d: %s %v, want message %s fanned out to %d, replayed %v", i, spans[i].Name, spans[i].Attributes, first.ID, want.fanout, want.replayed)
		}
	}
}
