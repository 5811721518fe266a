package signals

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

// MonitorStore is what the background loop reads and writes.
type MonitorStore interface {
	Store
	SignalHistoryRecord(ctx context.Context, p *store.SignalHistoryRecordParams) error
	EffectDeadlineEscalate(ctx context.Context, p *store.EffectDeadlineEscalateParams) ([]*store.Effect, error)
	WorkCount(ctx context.Context) (int64, error)
	EffectList(ctx context.Context, p *store.EffectListParams) ([]*store.Effect, error)
}

// actor is who the audit trail names for the deadline escalations.
const actor = "signals"

// escalateBatch bounds the effects escalated in one round; a full batch
// runs the round again at once rather than waiting a whole interval.
const escalateBatch = 100

// queueSample bounds the pending effects read to measure the delivery
// queue: past it the depth gauge reads "at least queueSample", which is
// all a dashboard needs to see a backlog, for a read that stays cheap.
const queueSample = 1000

// The queues whose depth and oldest age are exported.
const (
	queueWork    = "work"
	QueueEffects = "effects"
)

// Options configure a Monitor; zero values take defaults.
type Options struct {
	Logger *slog.Logger
	Clock  clock.Clock
	// Health hears whether this stage's rounds make progress (nil: nobody).
	Health *health.Board
	// Registerer receives the gauges (nil: not exported).
	Registerer prometheus.Registerer
	// OnEscalated is told about the effects whose business deadline this
	// round escalated, as they are after the escalation (the server sends
	// a notification per effect through the delivery worker's notifier).
	OnEscalated func(ctx context.Context, effects []*store.Effect)
	// Gatherer is the server's metrics registry, read each round for the
	// rate trends (trends.go); nil records the exception-queue trends only.
	Gatherer prometheus.Gatherer
	// Owners are the configured owners: an effect a missed deadline moves
	// to dead takes its destination's, as a dead settle does.
	Owners store.Owners
}

// Monitor measures the signals every signals.interval: it escalates
// missed business deadlines, computes the report, updates the gauges and
// records the history. A failing round is logged once per window by the
// loop runtime, and the next round runs as usual.
type Monitor struct {
	st   MonitorStore
	cfg  config.Signals
	opts Options
	log  *slog.Logger
	clk  clock.Clock
	loop *loop.Loop

	value, status *prometheus.GaugeVec
	computedAt    prometheus.Gauge
	queueDepth    *prometheus.GaugeVec
	queueAge      *prometheus.GaugeVec
	// trends is touched by Round only, which the loop never runs twice
	// at once.
	trends trendSampler

	mu     sync.Mutex
	latest *Report
}

// NewMonitor returns a monitor of st with the config's signals section.
func NewMonitor(st MonitorStore, cfg config.Signals, opts Options) *Monitor {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if cfg.Interval <= 0 {
		cfg.Interval = config.Duration(config.DefaultSignalsInterval)
	}
	m := &Monitor{
		st: st, cfg: cfg, opts: opts, log: opts.Logger, clk: opts.Clock, trends: trendSampler{g: opts.Gatherer},
		// The label sets are bounded: the registry's names, the two
		// queues.
		value: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hookledger_signal_value",
			Help: "Current value of each outcome signal (docs/signals.md).",
		}, []string{"signal"}),
		status: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hookledger_signal_status",
			Help: "Status of each outcome signal: 0 ok, 1 warn, 2 alert.",
		}, []string{"signal"}),
		computedAt: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hookledger_signals_computed_timestamp_seconds",
			Help: "When the signals were last measured (Unix time); a stale value means the gauges are stale too.",
		}),
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hookledger_queue_depth",
			Help: "Items waiting: work (events routed or not yet routed, not yet processed), effects (approved or retry_wait; read up to 1000).",
		}, []string{"queue"}),
		queueAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hookledger_queue_oldest_age_seconds",
			Help: "Age of the oldest waiting item: work (oldest unfinished event), effects (oldest pending effect); 0 when empty.",
		}, []string{"queue"}),
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(m.value, m.status, m.computedAt, m.queueDepth, m.queueAge)
	}
	m.loop = loop.New("signals", m.step, loop.Options{PollInterval: cfg.Interval.D(), Logger: opts.Logger, Clock: opts.Clock,
		Stage: opts.Health.Stage("signals")})
	return m
}

// Start runs a round at once and then every interval, until Stop or
// until ctx ends. A second call returns loop.ErrStarted.
func (m *Monitor) Start(ctx context.Context) error { return m.loop.Start(ctx) }

// Stop ends the loop, waiting for a round in progress within ctx.
func (m *Monitor) Stop(ctx context.Context) error { return m.loop.Stop(ctx) }

// Latest is the report of the last successful round, or nil before one.
func (m *Monitor) Latest() *Report {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.latest
}

func (m *Monitor) step(ctx context.Context) (bool, error) { return m.Round(ctx) }

// Round does one round now (the loop's step; tests call it with a fake
// clock). Each part runs even when another failed: a store that cannot
// record history still updates the gauges. more reports a full batch of
// escalations, so the loop runs again at once.
func (m *Monitor) Round(ctx context.Context) (more bool, err error) {
	now := m.clk.Now()
	var errs []error
	escalated, err := m.st.EffectDeadlineEscalate(ctx, &store.EffectDeadlineEscalateParams{Now: now, Actor: actor, Limit: escalateBatch,
		Owners: m.opts.Owners})
	if err != nil {
		errs = append(errs, fmt.Errorf("escalate missed deadlines: %w", err))
	} else if len(escalated) > 0 {
		for _, e := range escalated {
			m.log.Warn("business deadline missed", "effect", e.ID, "episode", e.EpisodeKey, "destination", e.Destination,
				"deadline", e.DeadlineAt.UTC().Format(time.RFC3339), "state", e.State)
		}
		if m.opts.OnEscalated != nil {
			m.opts.OnEscalated(ctx, escalated)
		}
		more = len(escalated) >= escalateBatch
	}

	report, snap, err := Compute(ctx, m.st, &m.cfg, now)
	if err != nil {
		errs = append(errs, err)
	} else {
		m.export(report, snap)
		if err := m.st.SignalHistoryRecord(ctx, historyOf(report, now)); err != nil {
			errs = append(errs, fmt.Errorf("record signal history: %w", err))
		}
	}
	if err := m.measureQueues(ctx, now, snap); err != nil {
		errs = append(errs, err)
	}
	if err := m.recordTrends(ctx, now); err != nil {
		errs = append(errs, err)
	}
	return more, errors.Join(errs...)
}

// export updates the gauges and the latest report.
func (m *Monitor) export(r *Report, snap *store.SignalSnapshot) {
	for _, s := range r.Signals {
		m.value.WithLabelValues(s.Name).Set(float64(s.Value))
		m.status.WithLabelValues(s.Name).Set(float64(level(s.Status)))
	}
	m.computedAt.Set(float64(snap.At.UnixNano()) / 1e9)
	m.mu.Lock()
	m.latest = r
	m.mu.Unlock()
}

func historyOf(r *Report, now time.Time) *store.SignalHistoryRecordParams {
	p := &store.SignalHistoryRecordParams{Now: now, Points: make([]store.SignalHistoryInput, 0, len(r.Signals))}
	for _, s := range r.Signals {
		p.Points = append(p.Points, store.SignalHistoryInput{Name: s.Name, Value: s.Value, Status: s.Status})
	}
	return p
}

// measureQueues sets the queue gauges. The work queue's depth is the
// store's pending work count and its age the oldest unfinished event's
// (from the snapshot, when there is one); the effects queue is read from
// the ledger, at most queueSample rows.
func (m *Monitor) measureQueues(ctx context.Context, now time.Time, snap *store.SignalSnapshot) error {
	var errs []error
	if n, err := m.st.WorkCount(ctx); err != nil {
		errs = append(errs, fmt.Errorf("count work: %w", err))
	} else {
		m.queueDepth.WithLabelValues(queueWork).Set(float64(n))
	}
	if snap != nil {
		age := 0.0
		for _, ms := range snap.Measures {
			if ms != nil && ms.Name == store.SignalUnfinishedEvents && ms.Value > 0 && !ms.Oldest.IsZero() {
				age = max(snap.At.Sub(ms.Oldest), 0).Seconds()
			}
		}
		m.queueAge.WithLabelValues(queueWork).Set(age)
	}
	pending, err := m.st.EffectList(ctx, &store.EffectListParams{
		States: []store.EffectState{store.EffectApproved, store.EffectRetryWait}, Limit: queueSample, WithoutRequest: true})
	if err != nil {
		errs = append(errs, fmt.Errorf("measure the effects queue: %w", err))
	} else {
		var oldest time.Time
		for _, e := range pending {
			if oldest.IsZero() || e.CreatedAt.Before(oldest) {
				oldest = e.CreatedAt
			}
		}
		age := 0.0
		if !oldest.IsZero() {
			age = max(now.Sub(oldest), 0).Seconds()
		}
		m.queueDepth.WithLabelValues(QueueEffects).Set(float64(len(pending)))
		m.queueAge.WithLabelValues(QueueEffects).Set(age)
	}
	return errors.Join(errs...)
}
