package signals

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
)

var now = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func TestStatusOf(t *testing.T) {
	lim := func(warn, alert int64, warnAge, alertAge time.Duration) config.SignalLimits {
		return config.SignalLimits{Warn: warn, Alert: alert, WarnAge: warnAge, AlertAge: alertAge}
	}
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	for _, tc := range []struct {
		name string
		m    store.SignalMeasure
		l    config.SignalLimits
		want string
	}{
		{"nothing counts", store.SignalMeasure{Name: "dead_letters"}, lim(1, 1, time.Minute, time.Minute), StatusOK},
		{"below warn", store.SignalMeasure{Name: "dead_letters", Value: 2, Oldest: ago(time.Second)}, lim(3, 10, 0, 0), StatusOK},
		{"at warn", store.SignalMeasure{Name: "dead_letters", Value: 3, Oldest: ago(time.Second)}, lim(3, 10, 0, 0), StatusWarn},
		{"at alert", store.SignalMeasure{Name: "dead_letters", Value: 10, Oldest: ago(time.Second)}, lim(3, 10, 0, 0), StatusAlert},
		{"alert without warn", store.SignalMeasure{Name: "reconciliation_mismatches", Value: 1, Oldest: ago(time.Second)}, lim(0, 1, 0, 0), StatusAlert},
		{"zero thresholds are off", store.SignalMeasure{Name: "loop_blocks", Value: 1000, Oldest: ago(1000 * time.Hour)}, lim(0, 0, 0, 0), StatusOK},
		{"young", store.SignalMeasure{Name: "revision_lag", Value: 50, Oldest: ago(4 * time.Minute)}, lim(0, 0, 5*time.Minute, 30*time.Minute), StatusOK},
		{"warn age reached", store.SignalMeasure{Name: "revision_lag", Value: 1, Oldest: ago(5 * time.Minute)}, lim(0, 0, 5*time.Minute, 30*time.Minute), StatusWarn},
		{"alert age reached", store.SignalMeasure{Name: "revision_lag", Value: 1, Oldest: ago(30 * time.Minute)}, lim(0, 0, 5*time.Minute, 30*time.Minute), StatusAlert},
		{"age alerts although value only warns", store.SignalMeasure{Name: "dead_letters", Value: 1, Oldest: ago(25 * time.Hour)}, lim(1, 0, 0, 24*time.Hour), StatusAlert},
		{"no age without an oldest", store.SignalMeasure{Name: "revision_lag", Value: 3}, lim(0, 0, time.Nanosecond, 0), StatusOK},
		{"oldest in the future is age 0", store.SignalMeasure{Name: "revision_lag", Value: 3, Oldest: now.Add(time.Hour)}, lim(0, 0, time.Second, 0), StatusOK},
		{"stale oldest with value 0 is ignored", store.SignalMeasure{Name: "revision_lag", Oldest: ago(time.Hour)}, lim(0, 0, time.Second, 0), StatusOK},
		{"deadline near warns", store.SignalMeasure{Name: "deadline_risk", Value: 2, Near: 2}, lim(1, 1, 0, 0), StatusWarn},
		{"deadline passed alerts", store.SignalMeasure{Name: "deadline_risk", Value: 3, Near: 2, Passed: 1, Oldest: ago(time.Minute)}, lim(1, 1, 0, 0), StatusAlert},
		{"deadline value is not compared whole", store.SignalMeasure{Name: "deadline_risk", Value: 3, Near: 3}, lim(5, 3, 0, 0), StatusOK},
		{"deadline passed below alert still warns by near", store.SignalMeasure{Name: "deadline_risk", Value: 2, Near: 1, Passed: 1}, lim(1, 2, 0, 0), StatusWarn},
		{"deadline passed long ago alerts by age", store.SignalMeasure{Name: "deadline_risk", Value: 1, Passed: 1, Oldest: ago(2 * time.Hour)}, lim(0, 0, 0, time.Hour), StatusAlert},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := statusOf(&tc.m, tc.l, now); got != tc.want {
				t.Errorf("status = %s, want %s", got, tc.want)
			}
		})
	}
}

// The built-in thresholds do what docs/signals.md says they do.
func TestDefaultThresholds(t *testing.T) {
	d := signalLimits(config.DefaultSignalLimits())
	for _, tc := range []struct {
		m    store.SignalMeasure
		want string
	}{
		{store.SignalMeasure{Name: store.SignalRevisionLag, Value: 100, Oldest: now.Add(-time.Minute)}, StatusOK},
		{store.SignalMeasure{Name: store.SignalUnfinishedEvents, Value: 1, Oldest: now.Add(-10 * time.Minute)}, StatusWarn},
		{store.SignalMeasure{Name: store.SignalUnfinishedEvents, Value: 1, Oldest: now.Add(-31 * time.Minute)}, StatusAlert},
		{store.SignalMeasure{Name: store.SignalDeadlineRisk, Value: 1, Near: 1}, StatusWarn},
		{store.SignalMeasure{Name: store.SignalDeadlineRisk, Value: 1, Passed: 1, Oldest: now}, StatusAlert},
		{store.SignalMeasure{Name: store.SignalUnknownOutcomes, Value: 1, Oldest: now.Add(-time.Minute)}, StatusWarn},
		{store.SignalMeasure{Name: store.SignalUnknownOutcomes, Value: 1, Oldest: now.Add(-time.Hour)}, StatusAlert},
		{store.SignalMeasure{Name: store.SignalKeyConflicts, Value: 50, Oldest: now.Add(-20 * time.Hour)}, StatusWarn},
		{store.SignalMeasure{Name: store.SignalDeadLetters, Value: 1, Oldest: now.Add(-time.Hour)}, StatusWarn},
		{store.SignalMeasure{Name: store.SignalDeadLetters, Value: 1, Oldest: now.Add(-24 * time.Hour)}, StatusAlert},
		{store.SignalMeasure{Name: store.SignalReconciliationMismatches, Value: 1, Oldest: now}, StatusAlert},
		{store.SignalMeasure{Name: store.SignalCompensationOutstanding, Value: 1, Oldest: now.Add(-time.Minute)}, StatusWarn},
		{store.SignalMeasure{Name: store.SignalCompensationOutstanding, Value: 1, Oldest: now.Add(-2 * time.Hour)}, StatusAlert},
		{store.SignalMeasure{Name: store.SignalLoopBlocks, Value: 1, Oldest: now.Add(-23 * time.Hour)}, StatusWarn},
	} {
		if got := statusOf(&tc.m, d[tc.m.Name], now); got != tc.want {
			t.Errorf("%s value %d oldest %s ago: %s, want %s", tc.m.Name, tc.m.Value, now.Sub(tc.m.Oldest), got, tc.want)
		}
	}
}

func TestEvaluateRendersThePinnedShape(t *testing.T) {
	snap := &store.SignalSnapshot{At: now, Measures: []*store.SignalMeasure{
		// Out of order and missing some: the report still has all nine in
		// the pinned order.
		{Name: store.SignalDeadLetters, Value: 3, Oldest: now.Add(-90*time.Second - 500*time.Millisecond),
			Breakdown: map[string]map[string]int64{"owner": {"unassigned": 2, "billing": 1}, "kind": {"effects": 3}, "empty": {}}},
		{Name: store.SignalRevisionLag},
	}}
	r := evaluate(snap, signalLimits(config.DefaultSignalLimits()))
	if r.At != "2026-12-01T10:00:00Z" {
		t.Errorf("at = %q", r.At)
	}
	if len(r.Signals) != 9 {
		t.Fatalf("%d signals, want 9", len(r.Signals))
	}
	for i, name := range store.SignalNames() {
		if r.Signals[i].Name != name {
			t.Errorf("signal %d is %q, want %q", i, r.Signals[i].Name, name)
		}
	}
	dl := r.Signals[5]
	if dl.Value != 3 || dl.Status != StatusWarn || dl.OldestAgeSeconds == nil || *dl.OldestAgeSeconds != 90 {
		t.Errorf("dead_letters = %+v", dl)
	}
	if dl.Breakdown["owner"]["unassigned"] != 2 || dl.Breakdown["kind"]["effects"] != 3 {
		t.Errorf("breakdown = %v", dl.Breakdown)
	}
	if _, ok := dl.Breakdown["empty"]; ok {
		t.Errorf("an empty dimension is kept: %v", dl.Breakdown)
	}
	if r.Worst() != StatusWarn {
		t.Errorf("worst = %s", r.Worst())
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing counts: age null, breakdown {} (never null).
	want := `{"name":"revision_lag","value":0,"oldest_age_seconds":null,"status":"ok","breakdown":{}}`
	if !strings.Contains(string(b), want) {
		t.Errorf("JSON %s lacks %s", b, want)
	}
	var generic map[string]any
	if err := json.Unmarshal(b, &generic); err != nil {
		t.Fatal(err)
	}
	if len(generic) != 2 || generic["at"] == nil || generic["signals"] == nil {
		t.Errorf("top level keys = %v, want signals and at", generic)
	}
}

func TestLevelAndWorst(t *testing.T) {
	for s, want := range map[string]int{StatusOK: 0, StatusWarn: 1, StatusAlert: 2, "bogus": 2} {
		if got := level(s); got != want {
			t.Errorf("Level(%q) = %d, want %d", s, got, want)
		}
	}
	r := &Report{Signals: []Signal{{Status: StatusWarn}, {Status: StatusAlert}, {Status: StatusOK}}}
	if r.Worst() != StatusAlert {
		t.Errorf("worst = %s", r.Worst())
	}
	if (&Report{}).Worst() != StatusOK {
		t.Error("empty report is not ok")
	}
}

func TestLimitsFromConfig(t *testing.T) {
	c, err := config.Parse("x.yaml", []byte("signals:\n  thresholds:\n    loop_blocks: {warn: 0, alert: 3}\n"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	l := limitsFrom(&c.Signals)
	if len(l) != 9 || l[store.SignalLoopBlocks] != (config.SignalLimits{Alert: 3}) {
		t.Errorf("limits = %+v", l)
	}
	m := &store.SignalMeasure{Name: store.SignalLoopBlocks, Value: 2, Oldest: now}
	if got := statusOf(m, l[m.Name], now); got != StatusOK {
		t.Errorf("loop_blocks 2 with warn off, alert 3: %s", got)
	}
}
