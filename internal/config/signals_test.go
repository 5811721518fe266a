package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

func TestSignalsDefaults(t *testing.T) {
	c, err := Parse("x.yaml", []byte("# nothing\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Signals
	if s.Interval.D() != DefaultSignalsInterval || s.Window.D() != DefaultSignalsWindow || s.DeadlineWarnShare != DefaultDeadlineWarnShare {
		t.Errorf("defaults not applied: interval %s window %s share %g", s.Interval.D(), s.Window.D(), s.DeadlineWarnShare)
	}
	defaults := DefaultSignalLimits()
	if len(defaults) != len(store.SignalNames()) {
		t.Fatalf("DefaultSignalLimits has %d signals, want the nine", len(defaults))
	}
	for _, name := range store.SignalNames() {
		th, ok := s.Thresholds[name]
		if !ok || th.Warn == nil || th.Alert == nil || th.WarnAge == nil || th.AlertAge == nil {
			t.Errorf("%s: thresholds not filled in after load: %+v", name, th)
			continue
		}
		if got := s.Limits(name); got != defaults[name] {
			t.Errorf("%s: limits %+v, want the defaults %+v", name, got, defaults[name])
		}
	}
	if got := s.Limits(store.SignalRevisionLag); got.WarnAge != 5*time.Minute || got.AlertAge != 30*time.Minute || got.Warn != 0 {
		t.Errorf("revision_lag defaults = %+v", got)
	}
}

// A threshold block overrides only the fields it names; 0 turns a check off.
func TestSignalsThresholdOverrides(t *testing.T) {
	c, err := Parse("x.yaml", []byte(`signals:
  interval: 1m
  window: 2h
  deadline_warn_share: 0.5
  thresholds:
    dead_letters: {warn: 5, alert_age: 2h}
    reconciliation_mismatches: {alert: 0, warn: 1}
    revision_lag:
      warn_age: 0s
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Signals
	if s.Interval.D() != time.Minute || s.Window.D() != 2*time.Hour || s.DeadlineWarnShare != 0.5 {
		t.Errorf("got interval %s window %s share %g", s.Interval.D(), s.Window.D(), s.DeadlineWarnShare)
	}
	for name, want := range map[string]SignalLimits{
		store.SignalDeadLetters:              {Warn: 5, AlertAge: 2 * time.Hour},
		store.SignalReconciliationMismatches: {Warn: 1},
		store.SignalRevisionLag:              {AlertAge: 30 * time.Minute},
		store.SignalLoopBlocks:               {Warn: 1},
	} {
		if got := s.Limits(name); got != want {
			t.Errorf("%s: %+v, want %+v", name, got, want)
		}
	}
}

func TestSignalsErrorsNameFileAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		line       int
		want       string
	}{
		{"unknown signal", "signals:\n  thresholds:\n    dead_letter: {warn: 1}\n", 3, `unknown signal "dead_letter"`},
		{"unknown field", "signals:\n  thresholds:\n    dead_letters: {warn: 1, critical: 2}\n", 3, "unknown field"},
		{"unknown signals key", "signals:\n  intervall: 1m\n", 2, "unknown field"},
		{"negative warn", "signals:\n  thresholds:\n    loop_blocks:\n      warn: -1\n", 4, "loop_blocks.warn must not be negative"},
		{"negative alert_age", "signals:\n  thresholds:\n    dead_letters:\n      alert_age: -1h\n", 4, "alert_age must not be negative"},
		{"negative interval", "signals:\n  interval: -5s\n", 2, "signals.interval must be positive"},
		{"negative window", "signals:\n  window: -1h\n", 2, "signals.window must be positive"},
		{"share over one", "signals:\n  deadline_warn_share: 1.5\n", 2, "deadline_warn_share must be from 0 to 1"},
		{"negative share", "signals:\n  deadline_warn_share: -0.1\n", 2, "deadline_warn_share"},
		{"bad duration", "signals:\n  thresholds:\n    dead_letters: {warn_age: soon}\n", 3, "invalid duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("conf.yaml", []byte(tc.yaml), env(nil))
			if err == nil {
				t.Fatal("expected an error")
			}
			line := 0
			var ce *Error
			var ces Errors
			switch {
			case errors.As(err, &ces):
				line = ces[0].Line
			case errors.As(err, &ce):
				line = ce.Line
			}
			if line != tc.line || !strings.HasPrefix(err.Error(), "conf.yaml:") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %q (line %d), want conf.yaml line %d containing %q", err, line, tc.line, tc.want)
			}
		})
	}
}
