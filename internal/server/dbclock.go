package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/loop"
	"github.com/hookledger/hookledger/internal/store"
)

// databaseClock is offered by a store whose database is shared by several
// processes (PostgreSQL): its clock is the one they all follow.
type databaseClock interface {
	DatabaseNow(ctx context.Context) (time.Time, error)
}

const (
	// clockSyncInterval: an NTP-disciplined host drifts well under a
	// millisecond in this time, an undisciplined one a few; leases last
	// seconds to minutes.
	clockSyncInterval = 30 * time.Second
	// clockSyncTimeout bounds one measurement (several readings).
	clockSyncTimeout = 5 * time.Second
	// clockWarnOffset: a host that differs from the database by more than
	// this has a broken time service, which an operator should hear about
	// even though the leases no longer depend on it.
	clockWarnOffset = time.Second
)

// clockSync keeps a clock.Synced on the database's time: it measures once
// before the server uses the clock, then again every clockSyncInterval.
// Leases (lease_until) and due times (not_before, next_attempt_at) are
// written by one process and judged by the others; judged by each host's
// own clock, a host minutes ahead would see every other process's lease as
// expired and take over its entities and effects. Following the database's
// clock, all processes agree to within the round trip of a reading
// (docs/architecture.md, "The database's clock").
type clockSync struct {
	clk    *clock.Synced
	log    *slog.Logger
	loop   *loop.Loop
	warned bool // only the loop's goroutine (and start, before it) touches it
}

// newClockSync returns nil when the store has no database clock to follow
// (SQLite: one process, whose host clock is the only one). Otherwise it
// measures the offset once, so that nothing reads an unsynchronised clock,
// and registers hookledger_clock_offset_seconds on reg.
func newClockSync(ctx context.Context, st store.Store, host clock.Clock, log *slog.Logger, reg prometheus.Registerer) (*clockSync, error) {
	db, ok := st.(databaseClock)
	if !ok {
		return nil, nil
	}
	cs := &clockSync{clk: clock.NewSynced(host, db.DatabaseNow, 0), log: log}
	if err := cs.measure(ctx); err != nil {
		return nil, fmt.Errorf("follow the database clock: %w", err)
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hookledger_clock_offset_seconds",
		Help: "The database's clock minus this host's, as last measured; leases and due times follow the database.",
	}, func() float64 { return cs.clk.Offset().Seconds() }))
	cs.loop = loop.New("clock sync", func(ctx context.Context) (bool, error) {
		return false, cs.measure(ctx)
	}, loop.Options{PollInterval: clockSyncInterval, Logger: log, Clock: host})
	return cs, nil
}

func (cs *clockSync) measure(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, clockSyncTimeout)
	defer cancel()
	m, err := cs.clk.Measure(ctx)
	if err != nil {
		// The previous offset stays in force: it drifts by milliseconds
		// over minutes, while the database is unreachable anyway.
		return err
	}
	off := m.Offset
	if off < 0 {
		off = -off
	}
	switch {
	case off > clockWarnOffset && !cs.warned:
		cs.warned = true
		cs.log.Warn("this host's clock differs from the database's: leases and due times follow the database, but fix the host's time service (NTP)",
			"offset", m.Offset.String(), "round_trip", m.RoundTrip.String())
	case off <= clockWarnOffset && cs.warned:
		cs.warned = false
		cs.log.Info("this host's clock agrees with the database's again", "offset", m.Offset.String())
	default:
		cs.log.Debug("database clock measured", "offset", m.Offset.String(), "round_trip", m.RoundTrip.String())
	}
	return nil
}

// Start re-measures in the background until Stop.
func (cs *clockSync) Start(ctx context.Context) error { return cs.loop.Start(ctx) }

// Stop ends the re-measuring; the clock keeps its last offset.
func (cs *clockSync) Stop(ctx context.Context) error { return cs.loop.Stop(ctx) }
