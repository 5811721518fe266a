package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// The signals are assembled here, for both drivers: a driver's
// SignalSnapshot opens its read snapshot and hands MeasureSignals a
// SignalReader bound to it, which runs the driver's SQL for each
// SignalQuery and returns the rows; which rows feed which signal is
// decided once, by each registry entry's Measure (signalregistry.go).

// SignalReader is a driver's read snapshot of the store, for
// MeasureSignals: every call reads the same snapshot, so that the signals
// agree with one another.
type SignalReader interface {
	// SignalRows runs the driver's statement for q with args, numbered in
	// the order given (a time as a time.Time), and returns its rows, as
	// SignalQuery describes them. A query the driver does not have is
	// ErrUnknownSignalQuery. Which arguments a query takes is the rules'
	// (signalRows); a driver only holds the SQL.
	SignalRows(ctx context.Context, q SignalQuery, args ...any) ([]SignalRow, error)
}

// signalRows runs one query at p.Now, with the arguments it takes: the
// window of SignalQueryWindowAudit starts p.Window before p.Now, at the
// first audit row SignalQueryWindowStart finds there.
func signalRows(ctx context.Context, r SignalReader, q SignalQuery, p *SignalSnapshotParams) ([]SignalRow, error) {
	switch q {
	case SignalQueryDeadline, SignalQueryUnknown:
		return r.SignalRows(ctx, q, p.Now)
	case SignalQueryWindowStart:
		return r.SignalRows(ctx, q, p.Now.Add(-p.Window))
	case SignalQueryWindowAudit:
		since := p.Now.Add(-p.Window)
		first, err := r.SignalRows(ctx, SignalQueryWindowStart, since)
		if err != nil || len(first) == 0 {
			return nil, err
		}
		return r.SignalRows(ctx, q, first[0].N, since)
	}
	return r.SignalRows(ctx, q)
}

// MeasureSignals measures every signal of p.Signals (BuiltinSignals when
// nil), in its order, from the rows r returns. Each query runs at most
// once, however many signals read it.
func MeasureSignals(ctx context.Context, r SignalReader, p *SignalSnapshotParams) (*SignalSnapshot, error) {
	reg := p.Signals
	if reg == nil {
		reg = measuredBuiltins()
	}
	ran := map[SignalQuery][]SignalRow{}
	read := func(q SignalQuery) ([]SignalRow, error) {
		if rows, ok := ran[q]; ok {
			return rows, nil
		}
		rows, err := signalRows(ctx, r, q, p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
		ran[q] = rows
		return rows, nil
	}
	snap := &SignalSnapshot{At: p.Now.UTC(), Measures: make([]*SignalMeasure, 0, len(reg.defs))}
	for _, d := range reg.defs {
		m := newSignalMeasure(d.Name)
		m.flowOwners = p.FlowOwners
		if err := d.Measure(m, read); err != nil {
			return nil, fmt.Errorf("%s: %w", d.Name, err)
		}
		m.TrimBreakdown(p.BreakdownLimit)
		snap.Measures = append(snap.Measures, m)
	}
	return snap, nil
}

// measuredBuiltins is the built-in registry MeasureSignals measures when
// given none, built once: a measurement reads its names and Measures only
// and hands no entry out, so sharing it is safe, and a snapshot (every
// round, every API call) does not pay for building the registry again.
var measuredBuiltins = sync.OnceValue(BuiltinSignals)

// The helpers a signal's Measure folds rows with, so that every signal
// counts, breaks down and trims alike.

// newSignalMeasure returns an empty measure of one signal.
func newSignalMeasure(name string) *SignalMeasure {
	return &SignalMeasure{Name: name, Breakdown: map[string]map[string]int64{}}
}

// Count adds n counted items, the oldest of which started to count at
// oldest (ignored when n is 0 or oldest is zero).
func (m *SignalMeasure) Count(n int64, oldest time.Time) {
	if n == 0 {
		return
	}
	m.Value += n
	if !oldest.IsZero() && (m.Oldest.IsZero() || oldest.Before(m.Oldest)) {
		m.Oldest = oldest
	}
}

// flowOwner is the configured owner of a flow, or "unassigned".
func (m *SignalMeasure) flowOwner(flow string) string {
	if o := m.flowOwners[flow]; o != "" {
		return o
	}
	return "unassigned"
}

// Break adds n to one key of one breakdown dimension.
func (m *SignalMeasure) Break(dim, key string, n int64) {
	if n == 0 {
		return
	}
	if m.Breakdown[dim] == nil {
		m.Breakdown[dim] = map[string]int64{}
	}
	m.Breakdown[dim][key] += n
}

// TrimBreakdown keeps the limit largest keys of each dimension (ties by
// key, so the result does not depend on map order); limit 0 means 20.
func (m *SignalMeasure) TrimBreakdown(limit int) {
	if limit <= 0 {
		limit = 20
	}
	for dim, keys := range m.Breakdown {
		if len(keys) <= limit {
			continue
		}
		type kv struct {
			k string
			n int64
		}
		all := make([]kv, 0, len(keys))
		for k, n := range keys {
			all = append(all, kv{k, n})
		}
		slices.SortFunc(all, func(a, b kv) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.k, b.k)) })
		kept := make(map[string]int64, limit)
		for _, e := range all[:limit] {
			kept[e.k] = e.n
		}
		m.Breakdown[dim] = kept
	}
}

// statusRank orders history statuses: ok < warn < alert; -1 for anything
// else.
func statusRank(status string) int {
	switch status {
	case "ok":
		return 0
	case "warn":
		return 1
	case "alert":
		return 2
	}
	return -1
}
