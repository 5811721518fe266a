package config

import (
	"errors"
	"fmt"
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
	if s.Interval.D() != DefaultSignalsInterval || s.Window.D() != DefaultSignalsWindow || s.DeadlineWarnShare != defaultDeadlineWarnShare {
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

// The signals are the registry's: a config given another registry fills
// in, accepts and judges its names with its defaults, and no file can
// name a registry.
func TestSignalsFollowTheRegistry(t *testing.T) {
	s := Signals{}
	if got := s.SignalSet().Names(); strings.Join(got, " ") != strings.Join(store.SignalNames(), " ") {
		t.Errorf("no registry: %v, want the built-in signals", got)
	}
	builtin, _ := store.BuiltinSignals().Lookup(store.SignalDeadLetters)
	reg, err := store.NewSignalRegistry(builtin, store.SignalDef{Name: "parked", Title: "Parked", Help: "A test signal.",
		Defaults: store.SignalLimits{Warn: 3, AlertAge: time.Hour}, List: store.SignalList{Path: "/effects"},
		Measure: func(*store.SignalMeasure, store.SignalRead) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	two := int64(2)
	c := &Config{Signals: Signals{Registry: reg, Thresholds: map[string]SignalThreshold{"parked": {Alert: &two}}}}
	c.setSignalDefaults()
	if got := c.Signals.Limits("parked"); got != (SignalLimits{Warn: 3, Alert: 2, AlertAge: time.Hour}) {
		t.Errorf("parked limits %+v, want its defaults with alert 2 from the file", got)
	}
	if _, ok := c.Signals.Thresholds["parked"]; !ok || len(c.Signals.Thresholds) != 2 {
		t.Errorf("thresholds filled in: %v, want dead_letters and parked", c.Signals.Thresholds)
	}
	var msgs []string
	c.Signals.Thresholds[store.SignalLoopBlocks] = SignalThreshold{}
	c.validateSignals(func(path, format string, args ...any) { msgs = append(msgs, path+": "+fmt.Sprintf(format, args...)) })
	if len(msgs) != 1 || !strings.Contains(msgs[0], `$.signals.thresholds.loop_blocks: signals.thresholds: unknown signal "loop_blocks" (one of dead_letters, parked)`) {
		t.Errorf("a name the registry lacks: %v", msgs)
	}

	_, err = Parse("conf.yaml", []byte("signals:\n  registry: {}\n"), env(nil))
	if err == nil || !strings.Contains(err.Error(), "conf.yaml:2") || !strings.Contains(err.Error(), "unknown field") {
		t.Errorf("a registry in the file: %v, want an unknown field at line 2", err)
	}
}
