package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/store"
)

// parkedStates are store.ParkedStates, as a statement names them.
var parkedStates = store.SQLList(store.ParkedStates())

// attemptRecentSQL reads the newest attempt rows by id first (a backward
// walk of the primary key, Limit rows at most) and only then filters by
// time and joins the effect for its destination.
const attemptRecentSQL = `SELECT a.id, a.effect_id, a.started_at, a.duration_us, a.status, a.class, e.destination
	FROM (SELECT id, effect_id, started_at, duration_us, status, class FROM effect_attempts ORDER BY id DESC LIMIT $1) a
	JOIN effects e ON e.id = a.effect_id
	WHERE a.started_at >= $2 ORDER BY a.id DESC`

// AttemptRecent returns the newest calls with their destinations.
func (s *Store) AttemptRecent(ctx context.Context, p *store.AttemptRecentParams) ([]*store.RecentAttempt, error) {
	rows, err := s.pool.Query(ctx, attemptRecentSQL, store.ClampStatsLimit(p.Limit, 1000), p.Since)
	if err != nil {
		return nil, fmt.Errorf("recent attempts: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.RecentAttempt, error) {
		a := &store.RecentAttempt{}
		var dur int64
		if err := r.Scan(&a.ID, &a.EffectID, &a.StartedAt, &dur, &a.Status, &a.Class, &a.Destination); err != nil {
			return nil, err
		}
		a.StartedAt = a.StartedAt.UTC()
		a.Duration = time.Duration(dur) * time.Microsecond
		return a, nil
	})
	if err != nil {
		return nil, fmt.Errorf("recent attempts: %w", err)
	}
	return out, nil
}

// EffectParked counts the parked effects through effects_due, whose
// predicate covers the three parked states.
func (s *Store) EffectParked(ctx context.Context) ([]*store.ParkedCount, error) {
	rows, err := s.pool.Query(ctx, `SELECT destination, state, owner, count(*) FROM effects
		WHERE state IN `+parkedStates+`
		GROUP BY destination, state, owner ORDER BY destination, state, owner`)
	if err != nil {
		return nil, fmt.Errorf("count parked effects: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.ParkedCount, error) {
		c := &store.ParkedCount{}
		return c, r.Scan(&c.Destination, &c.State, &c.Owner, &c.Count)
	})
	if err != nil {
		return nil, fmt.Errorf("count parked effects: %w", err)
	}
	return out, nil
}

// EventRecentCounts groups the newest events, read by the primary key
// backwards, in the database: a few rows come back, not Limit.
func (s *Store) EventRecentCounts(ctx context.Context, p *store.EventRecentParams) ([]*store.EventCount, error) {
	rows, err := s.pool.Query(ctx, `SELECT source, disposition, count(*), max(pk)
		FROM (SELECT pk, source, disposition FROM events ORDER BY pk DESC LIMIT $1) r
		GROUP BY source, disposition ORDER BY source, disposition`, store.ClampStatsLimit(p.Limit, 1000))
	if err != nil {
		return nil, fmt.Errorf("count recent events: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.EventCount, error) {
		c := &store.EventCount{}
		return c, r.Scan(&c.Source, &c.Disposition, &c.Count, &c.NewestPK)
	})
	if err != nil {
		return nil, fmt.Errorf("count recent events: %w", err)
	}
	return out, nil
}

// EventRecent returns the newest events by the primary key backwards.
func (s *Store) EventRecent(ctx context.Context, p *store.EventRecentParams) ([]*store.Event, error) {
	q, args := store.EventRecentQuery(postgresDialect, p)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("recent events: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.Event, error) {
		e := &store.Event{}
		var occ *time.Time
		if err := r.Scan(&e.PK, &e.Source, &e.EventID, &e.Type, &e.Entity, &e.Account, &occ, &e.ReceivedAt,
			&e.Deliveries, &e.Disposition); err != nil {
			return nil, err
		}
		e.OccurredAt = fromNull(occ)
		e.ReceivedAt = e.ReceivedAt.UTC()
		return e, nil
	})
	if err != nil {
		return nil, fmt.Errorf("recent events: %w", err)
	}
	return out, nil
}
