package store

import (
	"cmp"
	"slices"
	"time"
)

// Helpers the drivers share to assemble a SignalMeasure from grouped
// counts, so that both fold and trim breakdowns the same way.

// NewSignalMeasure returns an empty measure of one signal.
func NewSignalMeasure(name string) *SignalMeasure {
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

// StatusRank orders history statuses: ok < warn < alert; -1 for anything
// else.
func StatusRank(status string) int {
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
