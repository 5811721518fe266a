package signals_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/signals"
	"github.com/hookledger/hookledger/internal/store"
)

// parked is a test-only signal: the dead effects, from the dead letters'
// query, warning at 1 and alerting at 2.
func parked() store.SignalDef {
	return store.SignalDef{Name: "parked", Title: "Parked", Help: "Dead effects, counted again for a test.",
		Defaults: store.SignalLimits{Warn: 1, Alert: 2}, List: store.SignalList{Path: "/effects", Filters: []string{"state", "dead"}},
		Measure: func(m *store.SignalMeasure, read store.SignalRead) error {
			rows, err := read(store.SignalQueryDeadEffects)
			for _, r := range rows {
				m.Count(r.N, r.Oldest)
				m.Break("owner", r.Key, r.N)
			}
			return err
		}}
}

// A signal added to the registry, and nothing else, is measured, judged
// by its default thresholds, reported, exported as gauges and recorded in
// the history by the monitor.
func TestMonitorReadsTheRegistry(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	deadEffect(t, st)
	reg, err := store.NewSignalRegistry(append(store.BuiltinSignals().All(), parked())...)
	if err != nil {
		t.Fatal(err)
	}
	cfg := defaultSignals(t)
	cfg.Registry = reg
	clk := clock.NewFake(t0.Add(time.Minute))
	metrics := prometheus.NewRegistry()
	m := signals.NewMonitor(st, cfg, signals.Options{Clock: clk, Registerer: metrics})
	if _, err := m.Round(ctx); err != nil {
		t.Fatal(err)
	}
	r := m.Latest()
	var names []string
	for _, s := range r.Signals {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, reg.Names()) {
		t.Fatalf("reported %v, want %v", names, reg.Names())
	}
	p := r.Signals[len(r.Signals)-1]
	if p.Value != 1 || p.Status != signals.StatusWarn || p.OldestAgeSeconds == nil || *p.OldestAgeSeconds != 60 || p.Breakdown["owner"]["unassigned"] != 1 {
		t.Errorf("parked = %+v, want 1 warn aged 60 s", p)
	}
	if v, ok := gauge(t, metrics, "hookledger_signal_value", "signal", "parked"); !ok || v != 1 {
		t.Errorf("parked value gauge = %g (exported %v), want 1", v, ok)
	}
	if v, ok := gauge(t, metrics, "hookledger_signal_status", "signal", "parked"); !ok || v != 1 {
		t.Errorf("parked status gauge = %g (exported %v), want 1 (warn)", v, ok)
	}
	pts, err := st.SignalHistoryList(ctx, &store.SignalHistoryListParams{Name: "parked", Resolution: store.ResolutionMinute})
	if err != nil || len(pts) != 1 || pts[0].Value != 1 || pts[0].Status != signals.StatusWarn {
		t.Errorf("parked history %+v (%v), want one minute at 1 warn", pts, err)
	}

	// The config's thresholds apply to it like to any other.
	one := int64(1)
	cfg.Thresholds = map[string]config.SignalThreshold{"parked": {Alert: &one}}
	report, _, err := signals.Compute(ctx, st, &cfg, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if s := report.Signals[len(report.Signals)-1]; s.Name != "parked" || s.Status != signals.StatusAlert {
		t.Errorf("parked with alert 1 = %+v, want alert", s)
	}
}

// No signal takes the name of a trend series: they share the history.
func TestSignalNamesAreNotTrendNames(t *testing.T) {
	for _, name := range store.SignalNames() {
		if slices.Contains(signals.TrendNames(), name) {
			t.Errorf("signal %s is also a trend series", name)
		}
	}
}

// docs/signals.md documents every signal of the registry: a row of the
// table whose default thresholds are the registry's, and a section.
func TestSignalsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/signals.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	short := func(d time.Duration) string {
		if d%time.Hour == 0 {
			return fmt.Sprintf("%dh", d/time.Hour)
		}
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	for _, d := range store.BuiltinSignals().All() {
		row := regexp.MustCompile("(?m)^\\| `" + d.Name + "` \\|.*\\| ([^|]*) \\|$").FindStringSubmatch(doc)
		if row == nil {
			t.Errorf("docs/signals.md has no table row for %s", d.Name)
			continue
		}
		if !strings.Contains(doc, "\n### `"+d.Name+"`\n") {
			t.Errorf("docs/signals.md has no section for %s", d.Name)
		}
		for _, f := range []struct {
			field string
			set   bool
			value string
		}{
			{"warn", d.Defaults.Warn != 0, fmt.Sprint(d.Defaults.Warn)},
			{"alert", d.Defaults.Alert != 0, fmt.Sprint(d.Defaults.Alert)},
			{"warn_age", d.Defaults.WarnAge != 0, short(d.Defaults.WarnAge)},
			{"alert_age", d.Defaults.AlertAge != 0, short(d.Defaults.AlertAge)},
		} {
			has := regexp.MustCompile(`(^|[ ,])` + f.field + ` `).MatchString(row[1])
			if f.set && !strings.Contains(row[1], f.field+" "+f.value) || !f.set && has {
				t.Errorf("docs/signals.md: %s's default thresholds %q, want %s %s", d.Name, row[1], f.field, map[bool]string{true: f.value, false: "off"}[f.set])
			}
		}
	}
}
