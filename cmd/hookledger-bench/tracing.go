package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// withTracing adds, after each of the targets named in traced (default
// receive's hookledger targets), one target per sampling ratio:
// "sqlite@0.01" runs the sqlite target with tracing on at 0.01. Other
// targets (the no-op server, the floor) run once.
func withTracing(targets []string, ratios string, traced ...string) ([]string, error) {
	if strings.TrimSpace(ratios) == "" {
		return targets, nil
	}
	var rs []string
	for _, r := range strings.Split(ratios, ",") {
		r = strings.TrimSpace(r)
		v, err := strconv.ParseFloat(r, 64)
		if err != nil || v <= 0 || v > 1 {
			return nil, fmt.Errorf("%q is not a sampling ratio in (0, 1]", r)
		}
		rs = append(rs, r)
	}
	var out []string
	for _, t := range targets {
		out = append(out, t)
		if len(traced) == 0 {
			traced = []string{targetSQLite, targetPostgres}
		}
		if slices.Contains(traced, t) {
			for _, r := range rs {
				out = append(out, t+"@"+r)
			}
		}
	}
	return out, nil
}

// otlpSink is an OTLP/HTTP collector that reads and drops what it is
// sent: the cost measured is hookledger's, building and exporting spans,
// not a collector's.
type otlpSink struct {
	net.Listener
	srv     *http.Server
	exports atomic.Int64
}

func startOTLPSink() (*otlpSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("OTLP sink: %w", err)
	}
	s := &otlpSink{Listener: ln}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		s.exports.Add(1)
		// An empty ExportTraceServiceResponse: zero bytes of protobuf.
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// startOTLPSink serves the sink for e's traced servers (e.otlp) until
// the returned stop, which says how many exports it received.
func (e *receiveEnv) startOTLPSink(stderr io.Writer) (stop func(), err error) {
	sink, err := startOTLPSink()
	if err != nil {
		return nil, err
	}
	e.otlp = "http://" + sink.Addr().String()
	return func() {
		fmt.Fprintf(stderr, "OTLP sink: %d exports received\n", sink.exports.Load())
		_ = sink.srv.Close()
	}, nil
}

// tracingYAML is the tracing block of a server's config at ratio: empty
// when tracing is off ("").
func (e *receiveEnv) tracingYAML(ratio string) string {
	if ratio == "" {
		return ""
	}
	return fmt.Sprintf("tracing:\n  endpoint: %s\n  sample_ratio: %s\n", e.otlp, ratio)
}

// targetName names a target for the tables: names' entry for it, with
// the tracing ratio of a traced variant.
func targetName(names map[string]string, target string) string {
	base, ratio, traced := strings.Cut(target, "@")
	if !traced {
		return names[target]
	}
	return names[base] + ", tracing at " + ratio
}
