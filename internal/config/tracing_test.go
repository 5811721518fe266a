package config

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestTracingSettings(t *testing.T) {
	c, err := Parse("h.yaml", []byte("tracing:\n  endpoint: http://127.0.0.1:4318\n  protocol: grpc\n  sample_ratio: 0.01\n  service_name: billing\n"+
		"destinations:\n  - {name: crm, base_url: 'https://crm.example', trace_propagation: false}\n  - {name: app, base_url: 'https://app.example'}\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	tr := c.Tracing
	if tr.Endpoint != "http://127.0.0.1:4318" || tr.Protocol != "grpc" || tr.SampleRatio == nil || *tr.SampleRatio != 0.01 || tr.ServiceName != "billing" {
		t.Errorf("tracing = %+v", tr)
	}
	if c.Destinations[0].PropagatesTrace() || !c.Destinations[1].PropagatesTrace() {
		t.Errorf("trace_propagation: crm %v (set false), app %v (default on)", c.Destinations[0].PropagatesTrace(), c.Destinations[1].PropagatesTrace())
	}
}

func TestTracingBadValues(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		line      int
		want      string
	}{
		{"protocol", "tracing:\n  protocol: http/json\n", 2, `tracing.protocol: "http/json" is not one of http/protobuf, grpc`},
		{"ratio", "tracing:\n  sample_ratio: 1.5\n", 2, "tracing.sample_ratio: 1.5 is not between 0 and 1"},
		{"endpoint", "tracing:\n  endpoint: 127.0.0.1:4318\n", 2, `tracing.endpoint: "127.0.0.1:4318" is not an http:// or https:// URL`},
		{"unknown key", "tracing:\n  exporter: zipkin\n", 2, `unknown field "exporter"`},
		{"trusted source", "tracing:\n  trusted_sources: [billing]\n", 2, `tracing.trusted_sources[0]: no source named "billing" is configured`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("h.yaml", []byte(tc.src), env(nil))
			var es Errors
			var e1 *Error
			switch {
			case errors.As(err, &es) && len(es) == 1:
				e1 = es[0]
			case errors.As(err, &e1):
			default:
				t.Fatalf("err = %v, want one config error", err)
			}
			if e1.File != "h.yaml" || e1.Line != tc.line || !strings.Contains(e1.Msg, tc.want) {
				t.Errorf("err = %v, want h.yaml:%d: …%s…", e1, tc.line, tc.want)
			}
		})
	}
}

// The examples of docs/tracing.md load as written.
func TestTracingDocLoads(t *testing.T) {
	doc, err := os.ReadFile("../../docs/tracing.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	rest := string(doc)
	for {
		var block string
		var ok bool
		if _, rest, ok = strings.Cut(rest, "```yaml\n"); !ok {
			break
		}
		block, rest, _ = strings.Cut(rest, "```")
		blocks++
		if _, err := Parse("docs/tracing.md", []byte(block), env(nil)); err != nil {
			t.Errorf("example %d does not load: %v", blocks, err)
		}
	}
	if blocks != 4 {
		t.Fatalf("docs/tracing.md: %d yaml examples, want 4", blocks)
	}
}
