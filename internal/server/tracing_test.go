package server

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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
					m := map[string]string{"name": s.Name, "trace_id": fmt.Sprintf("%x", s.TraceId), "span_id": fmt.Sprintf("%x", s.SpanId),
						"parent": fmt.Sprintf("%x", s.ParentSpanId)}
					for _, l := range s.Links {
						m["link_trace"], m["link_span"] = fmt.Sprintf("%x", l.TraceId), fmt.Sprintf("%x", l.SpanId)
					}
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
	// A replay processes the event again, in a trace of its own.
	if code, b := h.callReplay(`{"source":"billing","wait_seconds":30}`); code != 200 {
		t.Fatalf("replay: %d %s", code, b)
	}
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
	// One trace for the delivery: the webhook's request, the processing of
	// its event and the call to the destination, stored with the event
	// and continued by the stages that came after the acknowledgement.
	var recv, proc, replayed map[string]string
	for _, s := range otlp.spans {
		switch {
		case s["name"] == "POST /hooks/{source}":
			recv = s
		case s["name"] == "process to_app" && s["link_trace"] == "":
			proc = s
		case s["name"] == "process to_app":
			replayed = s
		}
	}
	var route []map[string]string // otlp.mu is held: not spanNamed
	for _, s := range otlp.spans {
		if s["name"] == "route" {
			route = append(route, s)
		}
	}
	if len(route) != 1 || route[0]["parent"] != recv["span_id"] || route[0]["trace_id"] != recv["trace_id"] {
		t.Fatalf("route spans %v, want one under the receive span", route)
	}
	if recv == nil || proc == nil || replayed == nil {
		t.Fatalf("receive span %v, process span %v, replayed %v; want all three", recv, proc, replayed)
	}
	if replayed["trace_id"] == recv["trace_id"] || replayed["link_trace"] != recv["trace_id"] || replayed["link_span"] != recv["span_id"] {
		t.Fatalf("replayed processing %v, want a trace of its own linking to the receive span %v", replayed, recv)
	}
	if proc["trace_id"] != recv["trace_id"] || proc["parent"] != recv["span_id"] || proc["hookledger.disposition"] != "applied" ||
		found["trace_id"] != recv["trace_id"] || found["parent"] != recv["span_id"] {
		t.Fatalf("receive %v\nprocess %v\ndeliver %v\nwant processing and the attempt under the receive span, in its trace", recv, proc, found)
	}
}

// spanNamed returns the exported spans called name.
func (r *otlpReceiver) spanNamed(name string) []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]string
	for _, s := range r.spans {
		if s["name"] == name {
			out = append(out, s)
		}
	}
	return out
}

// A webhook's request is a server span named for its route, with its
// source and status. A sender's traceparent parents it only when the
// source is listed in tracing.trusted_sources; another sender's is a link,
// the span starting a trace of its own. Admin API calls are spans named
// for the API's route.
func TestServerReceiveSpansAndTrust(t *testing.T) {
	const senderTrace, senderSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, trusted := range []bool{false, true} {
		t.Run(fmt.Sprintf("trusted=%v", trusted), func(t *testing.T) {
			otlp := newOTLPReceiver(t)
			app, down, ordered := newReceiver(t), newReceiver(t), newReceiver(t)
			extra := fmt.Sprintf("tracing:\n  endpoint: %s\n", otlp.srv.URL)
			if trusted {
				extra += "  trusted_sources: [billing]\n"
			}
			h := startWith(t, forwardConfig(sqliteURL(t), "", app, down, ordered)+extra)
			body := `{"type":"invoice.paid","timestamp":"2026-11-03T08:59:00Z","data":{"id":"in_1"}}`
			sig, err := verifier(t, swSecret).Sign("msg_1", t0, []byte(body))
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest("POST", h.base+"/hooks/billing", strings.NewReader(body))
			req.Header = http.Header{"Webhook-Id": {"msg_1"}, "Webhook-Timestamp": {fmt.Sprint(t0.Unix())}, "Webhook-Signature": {sig},
				"Content-Type": {"application/json"}, "Traceparent": {"00-" + senderTrace + "-" + senderSpan + "-01"}}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("webhook: %d", resp.StatusCode)
			}
			h.effectList("flow=to_app")
			h.stop()

			recv := otlp.spanNamed("POST /hooks/{source}")
			if len(recv) != 1 {
				t.Fatalf("%d receive spans, want 1; all: %v", len(recv), otlp.spans)
			}
			s := recv[0]
			if s["hookledger.source"] != "billing" || s["http.route"] != "/hooks/{source}" {
				t.Fatalf("receive span %v", s)
			}
			if trusted {
				if s["trace_id"] != senderTrace || s["parent"] != senderSpan || s["link_trace"] != "" {
					t.Fatalf("trusted sender: span %v, want the sender's trace %s as parent", s, senderTrace)
				}
			} else if s["trace_id"] == senderTrace || s["parent"] != "" || s["link_trace"] != senderTrace || s["link_span"] != senderSpan {
				t.Fatalf("untrusted sender: span %v, want a trace of its own linking to %s/%s", s, senderTrace, senderSpan)
			}
			if s["hookledger.event_id"] != "msg_1" || s["hookledger.event_type"] != "invoice.paid" {
				t.Fatalf("receive span does not name its event: %v", s)
			}
			// Verifying the signature and the durable commit are its
			// children.
			for _, name := range []string{"verify", "commit"} {
				c := otlp.spanNamed(name)
				if len(c) != 1 || c[0]["parent"] != s["span_id"] || c[0]["trace_id"] != s["trace_id"] {
					t.Fatalf("%s spans %v, want one under the receive span %s", name, c, s["span_id"])
				}
			}
			// No span holds the source's secret, the request's signature
			// or its body.
			otlp.mu.Lock()
			for _, sp := range otlp.spans {
				for k, v := range sp {
					if strings.Contains(v, swSecret) || strings.Contains(v, sig) || strings.Contains(v, `"data"`) || strings.Contains(v, body) {
						t.Errorf("span %s: %s = %q holds a secret, the signature or the body", sp["name"], k, v)
					}
				}
			}
			otlp.mu.Unlock()
			if api := otlp.spanNamed("GET /api/v1/effects"); len(api) != 1 {
				var names []string
				for _, s := range otlp.spans {
					names = append(names, s["name"])
				}
				t.Fatalf("admin API spans named %q, want one \"GET /api/v1/effects\"", names)
			}
		})
	}
}

// A publish is a span whose context is stored with the message: the
// delivery to each endpoint is an attempt span in its trace, and the
// endpoint receives that attempt's context in traceparent.
func TestServerPublishTraceReachesTheEndpoint(t *testing.T) {
	otlp := newOTLPReceiver(t)
	rcv := newReceiver(t)
	h := startWith(t, publishConfig(sqliteURL(t), rcv.srv.URL+"/hooks/in")+fmt.Sprintf("tracing:\n  endpoint: %s\n", otlp.srv.URL))
	if code, body, _ := h.publish("k1", `{"type":"invoice.paid","data":{"id":"in_1"}}`); code != 202 {
		t.Fatalf("publish: %d %s", code, body)
	}
	waitFor(t, "the delivery to the endpoint", func() bool { return len(rcv.deliveries()) == 1 })
	tp := rcv.deliveries()[0].header.Get("Traceparent")
	h.stop()

	pub := otlp.spanNamed("publish")
	if len(pub) != 1 {
		t.Fatalf("%d publish spans, want 1", len(pub))
	}
	var attempt map[string]string
	otlp.mu.Lock()
	for _, s := range otlp.spans {
		if strings.HasPrefix(s["name"], "deliver ") && s["hookledger.destination"] != "" {
			attempt = s
		}
	}
	otlp.mu.Unlock()
	if attempt == nil || attempt["trace_id"] != pub[0]["trace_id"] || attempt["parent"] != pub[0]["span_id"] {
		t.Fatalf("attempt span %v, want one under the publish span %v", attempt, pub[0])
	}
	if want := "00-" + attempt["trace_id"] + "-" + attempt["span_id"] + "-01"; tp != want {
		t.Fatalf("the endpoint received traceparent %q, want the attempt's %q", tp, want)
	}
}

// publish.trace_propagation: false keeps the trace context from the
// endpoints; the attempt is still traced.
func TestServerPublishTracePropagationOff(t *testing.T) {
	otlp := newOTLPReceiver(t)
	rcv := newReceiver(t)
	h := startWith(t, publishConfig(sqliteURL(t), rcv.srv.URL+"/hooks/in")+
		fmt.Sprintf("tracing:\n  endpoint: %s\npublish:\n  trace_propagation: false\n", otlp.srv.URL))
	if code, body, _ := h.publish("k1", `{"type":"invoice.paid","data":{"id":"in_1"}}`); code != 202 {
		t.Fatalf("publish: %d %s", code, body)
	}
	waitFor(t, "the delivery to the endpoint", func() bool { return len(rcv.deliveries()) == 1 })
	hdr := rcv.deliveries()[0].header
	h.stop()
	if tp, ts := hdr.Get("Traceparent"), hdr.Get("Tracestate"); tp != "" || ts != "" {
		t.Fatalf("the endpoint received traceparent %q, tracestate %q with publish.trace_propagation false", tp, ts)
	}
	if len(otlp.spanNamed("publish")) != 1 {
		t.Fatal("the publish was not traced")
	}
}
