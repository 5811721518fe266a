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
	// defaultDeadlineWarnShare is the share of an effect's time between
	// creation and deadline below which deadline_risk calls it near: with a
	// quarter left, a person still has time to act on a warning.
	defaultDeadlineWarnShare = 0.25
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
	// Thresholds by signal name. After loading, every signal of the
	// registry is present with its four fields set: a field the file
	// leaves out takes the default, and 0 turns that check off.
	Thresholds map[string]SignalThreshold `yaml:"thresholds"`
	// Registry is the signals measured and judged: nil is the product's
	// (store.BuiltinSignals), which is what a loaded config has. Tests
	// set another; no file can.
	Registry *store.SignalRegistry `yaml:"-"`
	// FlowOwners are the flows' configured owners, by flow: dead_letters
	// breaks its dead-lettered events down by them. Set when loading.
	FlowOwners map[string]string `yaml:"-"`
}

// SignalSet returns the registry of the signals: Registry, else the
// built-in one.
func (s *Signals) SignalSet() *store.SignalRegistry {
	if s.Registry != nil {
		return s.Registry
	}
	return store.BuiltinSignals()
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

// DefaultSignalLimits returns the built-in signals' default thresholds by
// name. Why each one is written on its entry of the registry
// (store.BuiltinSignals), and docs/signals.md says the same for operators.
func DefaultSignalLimits() map[string]SignalLimits {
	out := map[string]SignalLimits{}
	for _, d := range store.BuiltinSignals().All() {
		out[d.Name] = SignalLimits(d.Defaults)
	}
	return out
}

// Limits returns the thresholds of the named signal with its defaults
// applied (the defaults alone when the config has no entry for it).
func (s *Signals) Limits(name string) SignalLimits {
	d, _ := s.SignalSet().Lookup(name)
	return s.limits(d)
}

// AllLimits returns the thresholds of every signal of the registry, by
// name, with their defaults applied.
func (s *Signals) AllLimits() map[string]SignalLimits {
	out := map[string]SignalLimits{}
	for _, d := range s.SignalSet().All() {
		out[d.Name] = s.limits(d)
	}
	return out
}

// limits applies the config's threshold of d to d's defaults.
func (s *Signals) limits(d store.SignalDef) SignalLimits {
	l := SignalLimits(d.Defaults)
	t := s.Thresholds[d.Name]
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
	s.FlowOwners = c.Owners().Flows
	setDur(&s.Interval, DefaultSignalsInterval)
	setDur(&s.Window, DefaultSignalsWindow)
	if s.DeadlineWarnShare == 0 {
		s.DeadlineWarnShare = defaultDeadlineWarnShare
	}
	// Unknown names stay in the map for validate to report; the
	// registry's are filled in so that every reader sees the effective
	// values.
	if s.Thresholds == nil {
		s.Thresholds = map[string]SignalThreshold{}
	}
	for name, l := range s.AllLimits() {
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
	known := s.SignalSet().Names()
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
