package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// parkedStates are store.ParkedStates, as a statement names them.
var parkedStates = store.SQLList(store.ParkedStates())

// attemptRecentSQL reads the newest attempt rows by id first (the
// subquery walks the primary key backwards, Limit rows at most) and only
// then filters by time and joins the effect for its destination.
const attemptRecentSQL = `SELECT a.id, a.effect_id, a.started_at, a.duration_us, a.status, a.class, e.destination
	FROM (SELECT id, effect_id, started_at, duration_us, status, class FROM effect_attempts ORDER BY id DESC LIMIT ?) a
	JOIN effects e ON e.id = a.effect_id
	WHERE a.started_at >= ? ORDER BY a.id DESC`

// AttemptRecent returns the newest calls with their destinations.
func (s *Store) AttemptRecent(ctx context.Context, p *store.AttemptRecentParams) ([]*store.RecentAttempt, error) {
	rows, err := s.readQuery(ctx, attemptRecentSQL, store.ClampStatsLimit(p.Limit, 1000), p.Since.UnixMicro())
	if err != nil {
		return nil, fmt.Errorf("recent attempts: %w", err)
	}
	defer rows.Close()
	var out []*store.RecentAttempt
	for rows.Next() {
		a := &store.RecentAttempt{}
		var started, dur int64
		if err := rows.Scan(&a.ID, &a.EffectID, &started, &dur, &a.Status, &a.Class, &a.Destination); err != nil {
			return nil, fmt.Errorf("recent attempts: %w", err)
		}
		a.StartedAt = time.UnixMicro(started).UTC()
		a.Duration = time.Duration(dur) * time.Microsecond
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("recent attempts: %w", err)
	}
	return out, nil
}

// effectParkedSQL counts through effects_state, whose leading column is
// the state: the parked effects only are read, not the ledger.
var effectParkedSQL = `SELECT destination, state, owner, count(*) FROM effects
	WHERE state IN ` + parkedStates + `
	GROUP BY destination, state, owner ORDER BY destination, state, owner`

// EffectParked counts the parked effects.
func (s *Store) EffectParked(ctx context.Context) ([]*store.ParkedCount, error) {
	rows, err := s.readQuery(ctx, effectParkedSQL)
	if err != nil {
		return nil, fmt.Errorf("count parked effects: %w", err)
	}
	defer rows.Close()
	var out []*store.ParkedCount
	for rows.Next() {
		c := &store.ParkedCount{}
		if err := rows.Scan(&c.Destination, &c.State, &c.Owner, &c.Count); err != nil {
			return nil, fmt.Errorf("count parked effects: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count parked effects: %w", err)
	}
	return out, nil
}

// EventRecentCounts groups the newest events, read by the primary key
// backwards, in the database: a few rows come back, not Limit.
func (s *Store) EventRecentCounts(ctx context.Context, p *store.EventRecentParams) ([]*store.EventCount, error) {
	rows, err := s.readQuery(ctx, `SELECT source, disposition, count(*), max(pk)
		FROM (SELECT pk, source, disposition FROM events ORDER BY pk DESC LIMIT ?)
		GROUP BY source, disposition ORDER BY source, disposition`, store.ClampStatsLimit(p.Limit, 1000))
	if err != nil {
		return nil, fmt.Errorf("count recent events: %w", err)
	}
	defer rows.Close()
	var out []*store.EventCount
	for rows.Next() {
		c := &store.EventCount{}
		if err := rows.Scan(&c.Source, &c.Disposition, &c.Count, &c.NewestPK); err != nil {
			return nil, fmt.Errorf("count recent events: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count recent events: %w", err)
	}
	return out, nil
}

// EventRecent returns the newest events: by the primary key backwards, or
// by events_source (whose entries end with the rowid) for one source.
func (s *Store) EventRecent(ctx context.Context, p *store.EventRecentParams) ([]*store.Event, error) {
	q, args := store.EventRecentQuery(sqliteDialect, p)
	rows, err := s.readQuery(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("recent events: %w", err)
	}
	defer rows.Close()
	var out []*store.Event
	for rows.Next() {
		e := &store.Event{}
		var occ sql.NullInt64
		var rec int64
		if err := rows.Scan(&e.PK, &e.Source, &e.EventID, &e.Type, &e.Entity, &e.Account, &occ, &rec,
			&e.Deliveries, &e.Disposition); err != nil {
			return nil, fmt.Errorf("recent events: %w", err)
		}
		e.OccurredAt = fromMicros(occ)
		e.ReceivedAt = time.UnixMicro(rec).UTC()
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("recent events: %w", err)
	}
	return out, nil
}
