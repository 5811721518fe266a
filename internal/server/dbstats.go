package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/loop"
	"github.com/hookledger/hookledger/internal/store"
)

// tableAnalyzer is offered by a store whose query plans rest on table
// statistics that can fall far behind a fast-growing table (PostgreSQL).
type tableAnalyzer interface {
	AnalyzeGrown(ctx context.Context) ([]string, error)
}

// statsInterval is how often the tables' growth is looked at: one query on
// the statistics views (well under a millisecond), and an ANALYZE only for
// a table that doubled. At 1,000 events a second a new table doubles
// every second or two while it is small.
const statsInterval = time.Second

// NewStatsKeeper returns the loop that keeps the planner's statistics in
// step with the tables' growth (postgres.Store.AnalyzeGrown), or nil for a
// store without one. serve runs it; so does hookledger-bench pipeline,
// which runs the engine as serve does.
func NewStatsKeeper(st store.Store, log *slog.Logger, clk clock.Clock) *loop.Loop {
	a, ok := st.(tableAnalyzer)
	if !ok {
		return nil
	}
	return loop.New("table statistics", func(ctx context.Context) (bool, error) {
		grown, err := a.AnalyzeGrown(ctx)
		if len(grown) > 0 {
			log.Debug("analyzed grown tables", "tables", grown)
		}
		return false, err
	}, loop.Options{PollInterval: statsInterval, Logger: log, Clock: clk})
}
