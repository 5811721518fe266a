package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP collector on loopback that keeps the names
// and string attributes of the spans it receives.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []map[string]string // "name" and each string attribute
	srv   *httptest.Server
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		var ex collectortrace.ExportTraceServiceRequest
		if req.URL.Path != "/v1/traces" || proto.Unmarshal(b, &ex) != nil {
			t.Errorf("not an OTLP/HTTP trace export: %s", req.URL.Path)
		}
		r.mu.Lock()
		for _, rs := range ex.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					m := map[string]string{"name": s.Name, "trace_id": fmt.Sprintf("%x", s.TraceId), "span_id": fmt.Sprintf("%x", s.SpanId)}
					for _, kv := range s.Attributes {
						m[kv.Key] = kv.Value.GetStringValue()
					}
					r.spans = append(r.spans, m)
				}
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// A server with a tracing endpoint exports the span of each delivery
// attempt to a real OTLP/HTTP collector, flushed when it stops, and the
// destination receives that span's context in traceparent.
func TestServerExportsAttemptSpans(t *testing.T) {
	otlp := newOTLPReceiver(t)
	app, down, ordered := newReceiver(t), newReceiver(t), newReceiver(t)
	cfg := forwardConfig(sqliteURL(t), "    events: [\"invoice.*\"]\n", app, down, ordered) +
		fmt.Sprintf("tracing:\n  endpoint: %s\n  service_name: hookledger-e2e\n", otlp.srv.URL)
	h := startWith(t, cfg)
	swPost(t, h, "msg_1", "application/json", `{"type":"invoice.paid","timestamp":"2026-11-03T08:59:00Z","data":{"id":"in_1"}}`)
	waitFor(t, "the forward", func() bool { return len(app.deliveries()) == 1 })
	tp := app.deliveries()[0].header.Get("Traceparent")
	h.stop()

	otlp.mu.Lock()
	defer otlp.mu.Unlock()
	var found map[string]string
	for _, s := range otlp.spans {
		if s["name"] == "deliver app" {
			found = s
		}
	}
	if found == nil {
		t.Fatalf("no span \"deliver app\" exported; got %v", otlp.spans)
	}
	if found["hookledger.destination"] != "app" || found["hookledger.episode_key"] != "to_app:msg_1:r0:forward" ||
		found["hookledger.source"] != "billing" || found["hookledger.event_id"] != "msg_1" {
		t.Fatalf("span attributes %v", found)
	}
	if want := "00-" + found["trace_id"] + "-" + found["span_id"] + "-01"; tp != want {
		t.Fatalf("traceparent %q, want the attempt span's context %q", tp, want)
	}
}
