package config

import (
	"slices"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// Defaults of the signals block.
const (
	// DefaultSignalsInterval is how often the server measures the signals:
	// often enough that a gauge or a status check is at most one scrape
	// behind, rarely enough that the measurement (indexed reads only) is
	// noise next to ingest.
	DefaultSignalsInterval = 15 * time.Second
	// DefaultSignalsWindow is how far back key_conflicts and loop_blocks
	// count occurrences: a day covers one business cycle of every flow, so
	// a conflict that happens once a day is still seen by the next check.
	DefaultSignalsWindow = 24 * time.Hour
	// DefaultDeadlineWarnShare is the share of an effect's time between
	// creation and deadline below which deadline_risk calls it near: with a
	// quarter left, a person still has time to act on a warning.
	DefaultDeadlineWarnShare = 0.25
)

// Signals configures the outcome signals (docs/signals.md): how often they
// are measured, the window of the occurrence counts and each signal's
// thresholds.
type Signals struct {
	Interval Duration `yaml:"interval"`
	Window   Duration `yaml:"window"`
	// DeadlineWarnShare is the share of the time between an effect's
	// creation and its deadline that is left when deadline_risk starts to
	// warn (the flow engine computes each effect's deadline_warn_at with
	// it). 0 takes the default.
	DeadlineWarnShare float64 `yaml:"deadline_warn_share"`
	// Thresholds by signal name. After loading, every one of the nine
	// names is present with its four fields set: a field the file leaves
	// out takes the default, and 0 turns that check off.
	Thresholds map[string]SignalThreshold `yaml:"thresholds"`
}

// SignalThreshold is when one signal leaves ok. A signal is warn (alert)
// when its value is at least Warn (Alert), or when its oldest item is at
// least WarnAge (AlertAge) old; alert wins over warn. For deadline_risk
// the value thresholds compare the count of near (Warn) and passed (Alert)
// effects. Pointers tell a field left out (the default applies) from one
// set to 0 (the check is off).
type SignalThreshold struct {
	Warn     *int64    `yaml:"warn"`
	Alert    *int64    `yaml:"alert"`
	WarnAge  *Duration `yaml:"warn_age"`
	AlertAge *Duration `yaml:"alert_age"`
}

// SignalLimits is a threshold with its defaults applied; 0 is off.
type SignalLimits struct {
	Warn, Alert       int64
	WarnAge, AlertAge time.Duration
}

// DefaultSignalLimits returns the built-in thresholds of the nine signals.
// Why each one (docs/signals.md says the same for operators):
//   - revision_lag, unfinished_events: an entity or event is behind for
//     seconds during any burst, so only age counts: 5 minutes is far past a
//     healthy pipeline's latency (warn), 30 minutes means something is
//     stuck, such as a dead-lettered newest revision (alert). No value
//     threshold: a burst makes many items briefly behind.
//   - deadline_risk: every near deadline warns and every passed one
//     alerts; a business deadline is the point of declaring one.
//   - unknown_outcomes: any effect whose outcome is unknown warns (the
//     reconciler usually settles it within minutes); one still unknown
//     after an hour needs a person to look at the destination (alert).
//   - key_conflicts: each conflict is a key design or routing problem to
//     look into (warn); the unique index already kept the business state
//     correct, so it does not alert.
//   - dead_letters: each dead letter waits for a person (warn); one left
//     for a day means the exception queue is not being worked (alert).
//   - reconciliation_mismatches: the destination disagrees with a done
//     effect: the business state is wrong now (alert at 1).
//   - compensation_outstanding: an undo in flight warns; one not done
//     within an hour leaves a half-undone business state (alert).
//   - loop_blocks: the guard held, but a flow is feeding itself (warn).
func DefaultSignalLimits() map[string]SignalLimits {
	return map[string]SignalLimits{
		store.SignalRevisionLag:              {WarnAge: 5 * time.Minute, AlertAge: 30 * time.Minute},
		store.SignalUnfinishedEvents:         {WarnAge: 5 * time.Minute, AlertAge: 30 * time.Minute},
		store.SignalDeadlineRisk:             {Warn: 1, Alert: 1},
		store.SignalUnknownOutcomes:          {Warn: 1, AlertAge: time.Hour},
		store.SignalKeyConflicts:             {Warn: 1},
		store.SignalDeadLetters:              {Warn: 1, AlertAge: 24 * time.Hour},
		store.SignalReconciliationMismatches: {Alert: 1},
		store.SignalCompensationOutstanding:  {Warn: 1, AlertAge: time.Hour},
		store.SignalLoopBlocks:               {Warn: 1},
	}
}

// Limits returns the thresholds of the named signal with its defaults
// applied (the defaults alone when the config has no entry for it).
func (s *Signals) Limits(name string) SignalLimits {
	l := DefaultSignalLimits()[name]
	t := s.Thresholds[name]
	if t.Warn != nil {
		l.Warn = *t.Warn
	}
	if t.Alert != nil {
		l.Alert = *t.Alert
	}
	if t.WarnAge != nil {
		l.WarnAge = t.WarnAge.D()
	}
	if t.AlertAge != nil {
		l.AlertAge = t.AlertAge.D()
	}
	return l
}

func (c *Config) setSignalDefaults() {
	s := &c.Signals
	setDur(&s.Interval, DefaultSignalsInterval)
	setDur(&s.Window, DefaultSignalsWindow)
	if s.DeadlineWarnShare == 0 {
		s.DeadlineWarnShare = DefaultDeadlineWarnShare
	}
	// Unknown names stay in the map for validate to report; the nine are
	// filled in so that every reader sees the effective values.
	if s.Thresholds == nil {
		s.Thresholds = map[string]SignalThreshold{}
	}
	for _, name := range store.SignalNames() {
		l := s.Limits(name)
		warnAge, alertAge := Duration(l.WarnAge), Duration(l.AlertAge)
		s.Thresholds[name] = SignalThreshold{Warn: &l.Warn, Alert: &l.Alert, WarnAge: &warnAge, AlertAge: &alertAge}
	}
}

func (c *Config) validateSignals(add func(path, format string, args ...any)) {
	s := &c.Signals
	if s.Interval < 0 {
		add("$.signals.interval", "signals.interval must be positive")
	}
	if s.Window < 0 {
		add("$.signals.window", "signals.window must be positive")
	}
	if s.DeadlineWarnShare < 0 || s.DeadlineWarnShare > 1 {
		add("$.signals.deadline_warn_share", "signals.deadline_warn_share must be from 0 to 1 (the share of the time to the deadline that is left when deadline_risk warns), got %g", s.DeadlineWarnShare)
	}
	names := make([]string, 0, len(s.Thresholds))
	for name := range s.Thresholds {
		names = append(names, name)
	}
	// Sorted, so that a file with several mistakes reports them the same
	// way every time.
	slices.Sort(names)
	known := store.SignalNames()
	for _, name := range names {
		p := "$.signals.thresholds." + name
		if !slices.Contains(known, name) {
			add(p, "signals.thresholds: unknown signal %q (one of %s)", name, strings.Join(known, ", "))
			continue
		}
		t := s.Thresholds[name]
		for _, f := range []struct {
			field string
			neg   bool
		}{
			{"warn", t.Warn != nil && *t.Warn < 0},
			{"alert", t.Alert != nil && *t.Alert < 0},
			{"warn_age", t.WarnAge != nil && *t.WarnAge < 0},
			{"alert_age", t.AlertAge != nil && *t.AlertAge < 0},
		} {
			if f.neg {
				add(p+"."+f.field, "signals.thresholds.%s.%s must not be negative (0 turns the check off)", name, f.field)
			}
		}
	}
}
