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
// the bearer token the servers may ask for; the SQLite writer's counters
// come from the same scrape.
func TestReadGoMemCountsWhatTheRuntimeAllocated(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	busy, commit := 2.5, 0.5
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hookledger_store_writer_busy_seconds_total"}, func() float64 { return busy }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "hookledger_store_writer_commit_seconds_total"}, func() float64 { return commit }))
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
	busy, commit = 4, 1.25
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
	if d.writerBusy != 1.5 || d.writerCommit != 0.75 {
		t.Errorf("writer between the readings: busy %v commit %v, want 1.5 and 0.75", d.writerBusy, d.writerCommit)
	}

	if _, err := readGoMem(ctx, srv.Client(), addr, "wrong"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a refused /metrics: err = %v, want the status named", err)
	}
}
