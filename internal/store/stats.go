package store

import (
	"context"
	"time"
)

// Stats is the part of the contract the console's destinations and
// sources page reads: recent activity, each read bounded by a row count
// rather than by the size of the tables, so that the page costs the same
// on a store of a million events as on a new one. Both drivers implement
// it; it is kept apart from Store so that a program that never shows the
// page does not depend on it.
type Stats interface {
	// AttemptRecent returns calls to destinations, newest first (by id),
	// each with its effect's destination and only what a summary needs:
	// among the newest Limit attempt rows (default 1000, at most
	// MaxStatsRows), those started at or after Since.
	AttemptRecent(ctx context.Context, p *AttemptRecentParams) ([]*RecentAttempt, error)
	// EffectParked counts the effects parked in retry_wait, dead and
	// needs_reconciliation, by destination, state and owner ("" for
	// none), ordered by those three.
	EffectParked(ctx context.Context) ([]*ParkedCount, error)
	// EventRecentCounts counts the newest Limit events (by pk; default
	// 1000, at most MaxStatsRows) by source and disposition, ordered by
	// those two, with the newest event's pk of each group.
	EventRecentCounts(ctx context.Context, p *EventRecentParams) ([]*EventCount, error)
	// EventRecent returns the newest events (by pk, newest first), of
	// Source when set: at most Limit (default 100, at most MaxStatsRows).
	// Routes are not filled.
	EventRecent(ctx context.Context, p *EventRecentParams) ([]*Event, error)
}

// ParkedStates are the states EffectParked counts: the effects parked for
// a retry or for a person.
func ParkedStates() []EffectState {
	return []EffectState{EffectRetryWait, EffectDead, EffectNeedsReconciliation}
}

// maxStatsRows caps the rows one Stats read returns.
const maxStatsRows = 10_000

// ClampStatsLimit applies a Stats read's default and cap.
func ClampStatsLimit(n, def int) int {
	switch {
	case n <= 0:
		return def
	case n > maxStatsRows:
		return maxStatsRows
	}
	return n
}

// AttemptRecentParams bounds AttemptRecent.
type AttemptRecentParams struct {
	Since time.Time
	Limit int
}

// RecentAttempt is one call with the destination it went to.
type RecentAttempt struct {
	ID          int64
	EffectID    int64
	Destination string
	StartedAt   time.Time
	Duration    time.Duration
	Status      int
	Class       ErrorClass
}

// EventCount is how many of the newest events share a source and a
// disposition.
type EventCount struct {
	Source      string
	Disposition Disposition
	Count       int64
	NewestPK    int64
}

// ParkedCount is how many parked effects share a destination, a state
// and an owner.
type ParkedCount struct {
	Destination string
	State       EffectState
	Owner       string
	Count       int64
}

// EventRecentParams bounds EventRecent and EventRecentCounts (which
// ignores Source).
type EventRecentParams struct {
	Source string
	Limit  int
}
