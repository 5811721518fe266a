package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// goMem is what a server's Go runtime has allocated and how many times it
// has collected, so far, as its /metrics says (the Go collector every
// hookledger server registers). Two readings a run apart give the run's
// allocation per event: on a shared machine CPU time per event varies by
// a fifth from run to run, while the bytes a build allocates per event
// hardly move, so a change that allocates less shows there first.
//
// The same scrape carries, on SQLite, how long the store's one writer has
// worked (hookledger_store_writer_*_seconds_total; zero where the store
// exports none: PostgreSQL, or a build from before the counters).
type goMem struct {
	alloc float64 // go_memstats_alloc_bytes_total
	gcs   float64 // go_gc_duration_seconds's count: completed collections

	writerBusy, writerCommit float64 // seconds
}

// readGoMem reads addr's /metrics, with token as a bearer token (the
// servers here may ask for it: metrics.auth token).
func readGoMem(ctx context.Context, client *http.Client, addr, token string) (goMem, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return goMem{}, fmt.Errorf("read Go memory figures: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return goMem{}, fmt.Errorf("read Go memory figures: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return goMem{}, fmt.Errorf("read Go memory figures: GET /metrics answered %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return goMem{}, fmt.Errorf("read Go memory figures: %w", err)
	}
	var m goMem
	alloc, gc := mfs["go_memstats_alloc_bytes_total"], mfs["go_gc_duration_seconds"]
	if alloc == nil || len(alloc.GetMetric()) == 0 || gc == nil || len(gc.GetMetric()) == 0 {
		return goMem{}, errors.New("read Go memory figures: /metrics has no go_memstats_alloc_bytes_total or go_gc_duration_seconds")
	}
	m.alloc = alloc.GetMetric()[0].GetCounter().GetValue()
	m.gcs = float64(gc.GetMetric()[0].GetSummary().GetSampleCount())
	counter := func(name string) float64 {
		if mf := mfs[name]; mf != nil && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
		return 0
	}
	m.writerBusy = counter("hookledger_store_writer_busy_seconds_total")
	m.writerCommit = counter("hookledger_store_writer_commit_seconds_total")
	return m, nil
}

// since is the allocation and collections from then until m.
func (m goMem) since(then goMem) goMem {
	return goMem{alloc: m.alloc - then.alloc, gcs: m.gcs - then.gcs,
		writerBusy: m.writerBusy - then.writerBusy, writerCommit: m.writerCommit - then.writerCommit}
}
