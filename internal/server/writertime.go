package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookledger/hookledger/internal/store"
)

// writerTimer is a store whose writes all pass through one connection
// (SQLite), which keeps account of that connection's time.
type writerTimer interface {
	WriterTime() (busy, commit time.Duration)
}

// registerWriterTime exports the store's single writer's time, when it has
// one: on SQLite the writer is what the pipeline's capacity runs into
// first (docs/observability.md). PostgreSQL has no single writer to
// report.
func registerWriterTime(st store.Store, reg prometheus.Registerer) {
	wt, ok := st.(writerTimer)
	if !ok {
		return
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "hookledger_store_writer_busy_seconds_total",
			Help: "Time SQLite's one writer connection spent on write transactions (statements and commit); near 1 a second a second, each write waits for the commit in progress.",
		}, func() float64 { busy, _ := wt.WriterTime(); return busy.Seconds() }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "hookledger_store_writer_commit_seconds_total",
			Help: "Of the writer's busy time, the time spent committing: WAL page writes, fsync and checkpoints.",
		}, func() float64 { _, commit := wt.WriterTime(); return commit.Seconds() }),
	)
}
