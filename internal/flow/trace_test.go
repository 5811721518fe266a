package flow

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/tracing"
)

// Each flow's processing of an event is a span in the event's trace,
// under the receive span whose context was stored with it, with a child
// for its preparation (the version, state and effects computed from the
// event) and one for its settle, the transaction in which the revision
// guard decides: applied with the effects it inserted, or stale.
func TestProcessSpansPrepareAndSettle(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	p, err := tracing.New(context.Background(), tracing.Settings{}, tracing.Options{Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, fmt.Sprintf(sources, "https://api.invalid")+`flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.rev}
    state: event.state
    effects:
      - name: upsert
        destination: crm
        request: {path: '"/deals/" + entity', body: '{"state": state}'}
`)
	var logs strings.Builder
	log := slog.New(tracing.LogHandler(slog.NewTextHandler(&logs, nil)))
	f.eng = New(f.cfg, f.st, Options{Clock: f.clk, LeaseFor: 10 * time.Second, RetryDelay: 5 * time.Second, Tracing: p, Logger: log})
	receive := map[string]string{ // event id -> the receive span's trace and span ids
		"e2":     "4bf92f3577b34da6a3ce929d0e0e4736/00f067aa0ba902b7",
		"e1":     "5bf92f3577b34da6a3ce929d0e0e4736/10f067aa0ba902b7",
		"ebad":   "6bf92f3577b34da6a3ce929d0e0e4736/20f067aa0ba902b7",
		"eroute": "7bf92f3577b34da6a3ce929d0e0e4736/30f067aa0ba902b7",
	}
	for i, ev := range []struct{ id, body string }{
		{"e2", `{"order_id":"o1","rev":2,"state":"PAID"}`},
		{"e1", `{"order_id":"o1","rev":1,"state":"CREATED"}`},        // behind r2: the revision guard refuses it
		{"ebad", `{"order_id":"o1","rev":3}`},                        // no state: its preparation fails
		{"eroute", `{"order_id":"o1","rev":"three","state":"PAID"}`}, // no revision to order it by: its routing fails
	} {
		tid, sid := receive[ev.id][:32], receive[ev.id][33:]
		res, err := f.st.InboxCommit(context.Background(), &store.InboxCommitParams{Submissions: []*store.Submission{{
			Deliveries: []*store.DeliveryInput{{RequestID: fmt.Sprint("req-", i), Source: "shop", EventID: ev.id, Type: "order.updated",
				OccurredAt: t0, ReceivedAt: f.clk.Now(), TraceContext: "00-" + tid + "-" + sid + "-01", Body: []byte(ev.body)}},
		}}})
		if err != nil || res[0].Err != nil {
			t.Fatalf("commit: %v %v", err, res)
		}
		f.drain()
	}

	spans := exp.GetSpans()
	byID := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID().String()] = s
		// The payload's values (the state) never reach a span.
		for _, kv := range s.Attributes {
			if v := kv.Value.String(); strings.Contains(v, "PAID") || strings.Contains(v, "CREATED") {
				t.Errorf("%s span: %s = %q holds the payload", s.Name, kv.Key, v)
			}
		}
	}
	attrs := func(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
		m := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes {
			m[kv.Key] = kv.Value
		}
		return m
	}
	want := map[string]struct {
		version, disposition string
		inserted             int64
	}{"e2": {"r2", "applied", 1}, "e1": {"r1", "stale", 0}, "ebad": {"", "dead_lettered", 0}}
	seen := map[string]bool{}
	for _, s := range spans {
		if s.Name != "prepare" && s.Name != "settle" {
			continue
		}
		proc, ok := byID[s.Parent.SpanID().String()]
		if !ok || proc.Name != "process orders" {
			t.Fatalf("%s span's parent %s is not a process span", s.Name, s.Parent.SpanID())
		}
		pa := attrs(proc)
		ev := pa[tracing.AttrEventID].AsString()
		w, ok := want[ev]
		if !ok {
			t.Fatalf("process span of event %q", ev)
		}
		if got := proc.SpanContext.TraceID().String() + "/" + proc.Parent.SpanID().String(); got != receive[ev] {
			t.Fatalf("process span of %s: trace/parent %s, want the receive span %s", ev, got, receive[ev])
		}
		a := attrs(s)
		switch s.Name {
		case "prepare":
			if a[tracing.AttrVersion].AsString() != w.version {
				t.Errorf("prepare of %s: version %q, want %q", ev, a[tracing.AttrVersion].AsString(), w.version)
			}
		case "settle":
			if a[tracing.AttrDisposition].AsString() != w.disposition || a["hookledger.effects_inserted"].AsInt64() != w.inserted {
				t.Errorf("settle of %s: %v, want disposition %s with %d effects", ev, s.Attributes, w.disposition, w.inserted)
			}
		}
		seen[ev+" "+s.Name] = true
	}
	if len(seen) != 6 {
		t.Fatalf("prepare and settle spans of %v, want both for e1, e2 and ebad", seen)
	}
	// The warning of a dead letter, in processing or in routing, leads to
	// its trace.
	for _, ev := range []string{"ebad", "eroute"} {
		var line string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `msg="event dead-lettered"`) && strings.Contains(l, "event_id="+ev+" ") {
				line = l
			}
		}
		if want := "trace_id=" + receive[ev][:32]; !strings.Contains(line, want) {
			t.Errorf("dead-letter log line of %s %q lacks %s", ev, line, want)
		}
	}
}
