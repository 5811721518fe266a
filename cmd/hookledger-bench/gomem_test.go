package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// allocSink keeps allocations of the test from being optimised away.
var allocSink [][]byte

// TestReadGoMemCountsWhatTheRuntimeAllocated reads a real Go collector
// over loopback HTTP twice, with 64 MiB allocated in between, and with
// the bearer token the servers may ask for.
func TestReadGoMemCountsWhatTheRuntimeAllocated(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		metrics.ServeHTTP(w, r)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()

	before, err := readGoMem(ctx, srv.Client(), addr, "tok")
	if err != nil {
		t.Fatal(err)
	}
	for range 64 {
		allocSink = append(allocSink, make([]byte, 1<<20))
	}
	allocSink = nil
	after, err := readGoMem(ctx, srv.Client(), addr, "tok")
	if err != nil {
		t.Fatal(err)
	}
	d := after.since(before)
	if d.alloc < 64<<20 {
		t.Errorf("allocated %.0f bytes between the readings, want at least 64 MiB", d.alloc)
	}
	if d.gcs < 0 {
		t.Errorf("collections went back: %v", d.gcs)
	}

	if _, err := readGoMem(ctx, srv.Client(), addr, "wrong"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a refused /metrics: err = %v, want the status named", err)
	}
}
