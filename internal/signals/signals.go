// Package signals turns the store's measurement of the outcome signals
// (store.SignalSnapshot) into what operators read: a value, the age of the
// oldest counted item, a breakdown and a status of ok, warn or alert from
// the thresholds of the config's signals section. Which signals there are,
// in which order and with which default thresholds is the store's signal
// registry (store.BuiltinSignals, or the config's SignalSet); nothing here
// names one signal. The same Report is
// answered by GET /api/v1/signals, printed by hookledger status and
// exported as Prometheus gauges by the Monitor, the background loop that
// also records the history and escalates missed business deadlines.
//
// docs/signals.md says what each signal means, its default thresholds and
// the repair for each.
package signals

import (
	"context"
	"fmt"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
)

// The statuses, from best to worst.
const (
	StatusOK    = "ok"
	StatusWarn  = "warn"
	StatusAlert = "alert"
)

// level is a status as a number for a gauge: 0 ok, 1 warn, 2 alert (an
// unknown status counts as alert, the safe side for a monitor).
func level(status string) int {
	switch status {
	case StatusOK:
		return 0
	case StatusWarn:
		return 1
	}
	return 2
}

// Signal is one signal as the API answers it (the pinned shape).
type Signal struct {
	Name  string `json:"name"`
	Value int64  `json:"value"`
	// OldestAgeSeconds is the age of the oldest counted item in whole
	// seconds, and null when nothing counts: 0 would read as "something
	// just started", which an empty signal is not.
	OldestAgeSeconds *int64 `json:"oldest_age_seconds"`
	Status           string `json:"status"`
	// Breakdown is dimension → key → count; {} when nothing counts, never
	// null, so clients can index it without a check.
	Breakdown map[string]map[string]int64 `json:"breakdown"`
}

// Report is every signal of the registry at one time (the pinned shape of
// GET /api/v1/signals).
type Report struct {
	Signals []Signal `json:"signals"`
	// At is when the store measured them (RFC 3339, UTC).
	At string `json:"at"`
}

// Worst returns the worst status of the report (ok for an empty one).
func (r *Report) Worst() string {
	worst := StatusOK
	for _, s := range r.Signals {
		if level(s.Status) > level(worst) {
			worst = s.Status
		}
	}
	return worst
}

// signalLimits are the effective thresholds by signal name.
type signalLimits map[string]config.SignalLimits

// limitsFrom reads the thresholds of a loaded config (defaults applied)
// for every signal of its registry.
func limitsFrom(c *config.Signals) signalLimits { return c.AllLimits() }

// statusOf applies one signal's thresholds to its measurement at now. A
// threshold of 0 is off. A measure whose Near and Passed split its value
// (deadline_risk's) compares the near count with warn and the passed
// count with alert, because a near deadline still leaves time to act and
// a passed one does not.
func statusOf(m *store.SignalMeasure, l config.SignalLimits, now time.Time) string {
	warnValue, alertValue := m.Value, m.Value
	if m.Near != 0 || m.Passed != 0 {
		warnValue, alertValue = m.Near, m.Passed
	}
	var age time.Duration
	hasAge := m.Value > 0 && !m.Oldest.IsZero()
	if hasAge {
		age = max(now.Sub(m.Oldest), 0)
	}
	reached := func(limit, v int64, ageLimit time.Duration) bool {
		return (limit > 0 && v >= limit) || (ageLimit > 0 && hasAge && age >= ageLimit)
	}
	switch {
	case reached(l.Alert, alertValue, l.AlertAge):
		return StatusAlert
	case reached(l.Warn, warnValue, l.WarnAge):
		return StatusWarn
	}
	return StatusOK
}

// evaluate renders a snapshot of the built-in signals as the report
// (EvaluateSet).
func evaluate(snap *store.SignalSnapshot, limits signalLimits) *Report {
	return evaluateSet(snap, store.BuiltinSignals(), limits)
}

// evaluateSet renders a snapshot as the report, with every signal of reg
// in its order (a signal the snapshot lacks reads 0 and ok). Ages are
// measured from the snapshot's own time, so a report read later still
// says what was true when it was measured.
func evaluateSet(snap *store.SignalSnapshot, reg *store.SignalRegistry, limits signalLimits) *Report {
	byName := map[string]*store.SignalMeasure{}
	for _, m := range snap.Measures {
		if m != nil {
			byName[m.Name] = m
		}
	}
	names := reg.Names()
	r := &Report{At: snap.At.UTC().Format(time.RFC3339), Signals: make([]Signal, 0, len(names))}
	for _, name := range names {
		m := byName[name]
		if m == nil {
			m = &store.SignalMeasure{Name: name}
		}
		s := Signal{Name: name, Value: m.Value, Status: statusOf(m, limits[name], snap.At), Breakdown: map[string]map[string]int64{}}
		if m.Value > 0 && !m.Oldest.IsZero() {
			secs := int64(max(snap.At.Sub(m.Oldest), 0) / time.Second)
			s.OldestAgeSeconds = &secs
		}
		for dim, keys := range m.Breakdown {
			if len(keys) == 0 {
				continue
			}
			s.Breakdown[dim] = make(map[string]int64, len(keys))
			for k, v := range keys {
				s.Breakdown[dim][k] = v
			}
		}
		r.Signals = append(r.Signals, s)
	}
	return r
}

// Store is what computing the signals reads.
type Store interface {
	SignalSnapshot(ctx context.Context, p *store.SignalSnapshotParams) (*store.SignalSnapshot, error)
}

// Compute measures the signals at now and evaluates them with the
// config's thresholds. It only reads, so hookledger status may call it on
// the store of a running server.
func Compute(ctx context.Context, st Store, c *config.Signals, now time.Time) (*Report, *store.SignalSnapshot, error) {
	reg := c.SignalSet()
	// c.Registry, not reg: nil lets the store measure the built-in
	// signals without building their registry again.
	snap, err := st.SignalSnapshot(ctx, &store.SignalSnapshotParams{Now: now, Window: c.Window.D(), Signals: c.Registry,
		FlowOwners: c.FlowOwners})
	if err != nil {
		return nil, nil, fmt.Errorf("measure signals: %w", err)
	}
	if snap.At.IsZero() {
		snap.At = now
	}
	return evaluateSet(snap, reg, limitsFrom(c)), snap, nil
}
