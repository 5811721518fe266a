// Package retention is the maintenance loop that deletes what is past its
// source's retention: finished effects with their attempts (each leaves a
// tombstone of its episode key), events with their deliveries, work rows
// and loop visits, and audit rows (docs/retention.md). It keeps everything
// an unfinished event or effect still needs; the store decides that, one
// short transaction per batch, and this loop paces the batches so that
// ingest, which shares the database's writer, waits for one batch at most.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/health"
	"github.com/hookledger/hookledger/internal/loop"
	"github.com/hookledger/hookledger/internal/store"
)

// Store is what the loop needs of the store.
type Store interface {
	RetentionPrune(ctx context.Context, p *store.RetentionPruneParams) (*store.RetentionPruneResult, error)
}

// The tables the deleted-rows counter is labelled with.
const (
	tableEvents     = "events"
	tableDeliveries = "deliveries"
	tableWork       = "work"
	tableLoopVisits = "loop_visits"
	tableAudit      = "audit"
	tableEffects    = "effects"
	tableAttempts   = "effect_attempts"
)

// errBusy reports that Pass found another process pruning (PostgreSQL).
var errBusy = errors.New("retention pass left to another process holding the pruning lock")

// Options configure a Service; zero values take defaults.
type Options struct {
	Logger *slog.Logger
	Clock  clock.Clock
	// Health hears whether this stage's rounds make progress (nil: nobody).
	Health *health.Board
	// Registerer receives the metrics (nil: not exported).
	Registerer prometheus.Registerer
	// Wait pauses between two batches of a pass (default: a timer that
	// ends early with ctx). Tests replace it to pace nothing.
	Wait func(ctx context.Context, d time.Duration) error
}

// Policy is what a pass deletes: each source's retention, the retention
// of rows of no configured source, and the pacing.
type Policy struct {
	Sources   map[string]time.Duration
	Default   time.Duration
	BatchSize int
	Pause     time.Duration
	Interval  time.Duration
}

// PolicyOf reads the policy from a loaded config. Rows of a source no
// longer configured, and audit rows of no source, are kept as long as the
// longest configured retention (at least the default), so removing a
// source from the file never shortens what its rows were promised.
func PolicyOf(cfg *config.Config) Policy {
	p := Policy{Sources: map[string]time.Duration{}, Default: config.DefaultRetention,
		BatchSize: cfg.Retention.BatchSize, Pause: cfg.Retention.Pause.D(), Interval: cfg.Retention.Interval.D()}
	for i := range cfg.Sources {
		s := &cfg.Sources[i]
		keep := s.RetentionOrDefault()
		p.Sources[s.Name] = keep
		p.Default = max(p.Default, keep)
	}
	return p
}

// Params returns the store params of a pass starting at now.
func (p Policy) Params(now time.Time) store.RetentionPruneParams {
	out := store.RetentionPruneParams{Now: now, Cutoffs: map[string]time.Time{}, BatchSize: p.BatchSize}
	for name, keep := range p.Sources {
		out.Cutoffs[name] = now.Add(-keep)
	}
	if p.Default > 0 {
		out.DefaultCutoff = now.Add(-p.Default)
	}
	return out
}

// PassResult is what one pass deleted.
type PassResult struct {
	store.RetentionPruneResult
	Batches  int
	Duration time.Duration
}

// Service runs pruning passes every interval.
type Service struct {
	st     Store
	pol    Policy
	opts   Options
	log    *slog.Logger
	clk    clock.Clock
	loop   *loop.Loop
	mu     sync.Mutex // one pass at a time (the loop's steps, or Pass)
	pass   *passState
	busy1  bool // the last step found another process pruning
	last   *PassResult
	lastMu sync.Mutex

	deleted              *prometheus.CounterVec
	lastDuration, lastAt prometheus.Gauge
	busy                 prometheus.Counter
}

// passState is a pass in progress: its params with the cursors, what it
// deleted so far and when it started.
type passState struct {
	params    store.RetentionPruneParams
	total     PassResult
	started   time.Time
	effDone   bool
	evDone    bool
	auditDone bool
	lastBatch time.Duration // how long the last batch took
}

// New returns a service that prunes st by pol.
func New(st Store, pol Policy, opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Wait == nil {
		opts.Wait = clock.Sleep
	}
	if pol.Interval <= 0 {
		pol.Interval = config.DefaultRetentionInterval
	}
	if pol.BatchSize <= 0 {
		pol.BatchSize = config.DefaultRetentionBatch
	}
	s := &Service{
		st: st, pol: pol, opts: opts, log: opts.Logger, clk: opts.Clock,
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookledger_retention_deleted_rows_total",
			Help: "Rows deleted by retention, by table (docs/retention.md).",
		}, []string{"table"}),
		lastDuration: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hookledger_retention_last_run_duration_seconds",
			Help: "How long the last complete retention pass took, pauses between batches included.",
		}),
		lastAt: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hookledger_retention_last_run_timestamp_seconds",
			Help: "When the last retention pass ended (Unix time); 0 before the first.",
		}),
		busy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookledger_retention_busy_total",
			Help: "Passes left to another process that held the pruning lock (PostgreSQL).",
		}),
	}
	for _, t := range []string{tableEvents, tableDeliveries, tableWork, tableLoopVisits, tableAudit, tableEffects, tableAttempts} {
		s.deleted.WithLabelValues(t) // present at 0 from the start
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(s.deleted, s.lastDuration, s.lastAt, s.busy)
	}
	s.loop = loop.New("retention", s.Step, loop.Options{PollInterval: pol.Interval, Logger: opts.Logger, Clock: opts.Clock,
		Stage: opts.Health.Stage("retention")})
	return s
}

// Start runs a pass at once and then every interval, until Stop or until
// ctx ends. A second call returns loop.ErrStarted.
func (s *Service) Start(ctx context.Context) error { return s.loop.Start(ctx) }

// Stop ends the loop, waiting within ctx for the batch in progress (a
// batch is one short transaction; a pass cut short starts over next time).
func (s *Service) Stop(ctx context.Context) error { return s.loop.Stop(ctx) }

// Last is the last complete pass, or nil before one.
func (s *Service) Last() *PassResult {
	s.lastMu.Lock()
	defer s.lastMu.Unlock()
	return s.last
}

// Step runs one batch of the current pass, starting a pass when none is
// in progress; more reports that the pass goes on. Between two batches
// it pauses first, at least Pause and at least as long as the last batch
// took, so that the writer goes to ingest.
func (s *Service) Step(ctx context.Context) (more bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.step(ctx)
}

func (s *Service) step(ctx context.Context) (bool, error) {
	ps := s.pass
	if ps == nil {
		now := s.clk.Now()
		ps = &passState{params: s.pol.Params(now), started: now}
		s.pass = ps
	} else if wait := max(s.pol.Pause, ps.lastBatch); wait > 0 {
		// Pausing as long as the last batch took gives pruning at most
		// half of the writer's time: on SQLite ingest waits for the
		// writer, and a pass that ran batch after batch would queue
		// every webhook behind it for the whole pass.
		if err := s.opts.Wait(ctx, wait); err != nil {
			return false, err
		}
	}
	began := s.clk.Now()
	r, err := s.st.RetentionPrune(ctx, &ps.params)
	ps.lastBatch = s.clk.Now().Sub(began)
	if err != nil {
		// The pass starts over next interval; batches already committed
		// stay deleted, and the cursors only skip work, never rows.
		s.pass = nil
		return false, fmt.Errorf("retention batch: %w", err)
	}
	ps.total.Batches++
	s.busy1 = r.Busy
	if r.Busy {
		s.pass = nil
		s.busy.Inc()
		s.log.Info("retention pass left to another process holding the pruning lock")
		return false, nil
	}
	s.count(&ps.total.RetentionPruneResult, r)
	// A table whose scan is done is not scanned again this pass.
	if !ps.effDone {
		ps.params.AfterEffectID = r.NextEffectID
		ps.effDone = r.EffectsDone
	}
	if !ps.evDone {
		ps.params.AfterEventPK = r.NextEventPK
		ps.evDone = r.EventsDone
	}
	if !ps.auditDone {
		ps.params.AfterAuditID = r.NextAuditID
		ps.auditDone = r.AuditDone
	}
	if ps.effDone {
		ps.params.AfterEffectID = maxCursor
	}
	if ps.evDone {
		ps.params.AfterEventPK = maxCursor
	}
	if ps.auditDone {
		ps.params.AfterAuditID = maxCursor
	}
	if !ps.effDone || !ps.evDone || !ps.auditDone {
		return true, nil
	}
	s.pass = nil
	end := s.clk.Now()
	ps.total.Duration = end.Sub(ps.started)
	s.lastDuration.Set(ps.total.Duration.Seconds())
	s.lastAt.Set(float64(end.UnixNano()) / 1e9)
	res := ps.total
	s.lastMu.Lock()
	s.last = &res
	s.lastMu.Unlock()
	if res.Deleted() > 0 {
		s.log.Info("retention pass", "events", res.Events, "deliveries", res.Deliveries, "work", res.Work,
			"loop_visits", res.LoopVisits, "audit", res.Audit, "effects", res.Effects, "effect_attempts", res.Attempts, "batches", res.Batches, "duration", res.Duration)
	}
	return false, nil
}

// maxCursor makes a finished table's scan read nothing for the rest of
// the pass: no key is above it.
const maxCursor = int64(1<<63 - 1)

func (s *Service) count(total *store.RetentionPruneResult, r *store.RetentionPruneResult) {
	for _, c := range []struct {
		table string
		n     int64
		sum   *int64
	}{
		{tableEvents, r.Events, &total.Events},
		{tableDeliveries, r.Deliveries, &total.Deliveries},
		{tableWork, r.Work, &total.Work},
		{tableLoopVisits, r.LoopVisits, &total.LoopVisits},
		{tableAudit, r.Audit, &total.Audit},
		{tableEffects, r.Effects, &total.Effects},
		{tableAttempts, r.Attempts, &total.Attempts},
	} {
		*c.sum += c.n
		if c.n > 0 {
			s.deleted.WithLabelValues(c.table).Add(float64(c.n))
		}
	}
}

// Pass runs a whole pass now, batch after batch (the benchmark and the
// tests; the server runs passes through Start).
func (s *Service) Pass(ctx context.Context) (*PassResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pass = nil
	for {
		more, err := s.step(ctx)
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
	}
	if s.busy1 {
		return nil, errBusy
	}
	s.lastMu.Lock()
	defer s.lastMu.Unlock()
	out := *s.last
	return &out, nil
}
