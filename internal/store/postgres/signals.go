package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/hookledger/hookledger/internal/store"
)

// The outcome signals read partial indexes and maintained columns only, so
// that their cost follows the size of what they report (the lagging
// entities, the pending backlog, the exception queue, the window's audit
// rows), never the size of the store. Each query repeats its partial
// index's predicate (or implies it), which is what lets the planner use
// that index; TestSignalPlans pins the plans on a store large enough for
// the planner to care.

// The SQL of each store.SignalQuery, returning (key, sub-key, count,
// oldest) rows; what the rows mean is written on the query.
const (
	// Lagging entities per flow: entities_behind holds the lagging
	// entities only.
	sqlLagByFlow = `SELECT flow, '', count(*), min(behind_since) FROM entities
		WHERE newest_key > settled_key GROUP BY flow`
	// The lagging entity with the most routed events ahead of its settled
	// key: for each lagging entity (entities_behind) its pending items
	// (work_pending: flow, entity, order_key) and its dead letters
	// (work_dead), each a range of its own index from the settled key on.
	// Only the 100 entities that have lagged longest (the front of
	// entities_behind) are measured: two probes per entity are nothing
	// for a handful, but an incident that leaves thousands of entities
	// behind would make every measurement pay for all of them (0.4 s
	// for 2,000 on PostgreSQL). The entity stuck longest is the one an
	// operator looks at first anyway.
	sqlLagLargest = `SELECT en.flow || '/' || en.entity, '', (SELECT count(*) FROM (
			SELECT w.event_pk FROM work w
				WHERE w.flow = en.flow AND w.entity = en.entity AND w.done_at IS NULL AND w.order_key > en.settled_key
			UNION
			SELECT w.event_pk FROM work w
				WHERE w.flow = en.flow AND w.entity = en.entity AND w.disposition = 'dead_lettered' AND w.order_key > en.settled_key) ahead) AS gap,
		NULL::timestamptz FROM (SELECT flow, entity, settled_key FROM entities
			WHERE newest_key > settled_key ORDER BY behind_since LIMIT 100) en
		ORDER BY gap DESC, en.flow, en.entity LIMIT 1`
	// Accepted events per source: events_accepted holds exactly the
	// events without a terminal disposition.
	sqlUnfinished = `SELECT source, '', count(*), min(received_at) FROM events
		WHERE disposition = 'accepted' GROUP BY source`
	// Pending effects with a deadline that warns or has passed:
	// effects_deadline holds pending effects with a deadline only.
	sqlDeadline = `SELECT destination, CASE WHEN deadline_at <= $1 THEN 'passed' ELSE 'near' END, count(*),
		min(CASE WHEN deadline_at <= $1 THEN deadline_at END) FROM effects
		WHERE deadline_at IS NOT NULL AND state IN ('approved', 'submitting', 'acknowledged', 'retry_wait', 'needs_reconciliation')
		AND (deadline_at <= $1 OR deadline_warn_at <= $1) GROUP BY 1, 2`
	// Unknown outcomes: two equality ranges of effects_state (state,
	// next_attempt_at): needs_reconciliation, and submitting (the calls in
	// flight, as many as the workers make at once).
	sqlUnknown = `SELECT destination, '', count(*), min(updated_at) FROM (
		SELECT destination, updated_at FROM effects WHERE state = 'needs_reconciliation' AND mismatch_at IS NULL
		UNION ALL
		SELECT destination, updated_at FROM effects WHERE state = 'submitting' AND lease_until <= $1) unknown
		GROUP BY destination`
	// The window starts at the first audit row at or after its start,
	// found in audit_at (the earliest time, then the lowest id of the few
	// rows at that instant); the rows counted are then ranges of audit_action
	// (action, id) from that id on, re-checked on at because audit times
	// come from the callers and need not follow ids exactly.
	sqlWindowStart = `SELECT '', '', first, NULL::timestamptz FROM (
		SELECT min(id) AS first FROM audit WHERE at = (SELECT min(at) FROM audit WHERE at >= $1)) w WHERE first IS NOT NULL`
	sqlWindowed = `SELECT action, CASE WHEN action <> 'key_conflict' THEN action
			WHEN detail LIKE 'version %' THEN 'version' ELSE 'episode_key' END, count(*), min(at)
		FROM audit WHERE action IN ('key_conflict', 'loop_blocked', 'loop_hop_limit') AND id >= $1 AND at >= $2 GROUP BY 1, 2`
	// Dead effects: a range of effects_state; dead-lettered events: a range
	// of events_disposition.
	sqlDeadEffects = `SELECT CASE WHEN owner = '' THEN 'unassigned' ELSE owner END, '', count(*), min(updated_at)
		FROM effects WHERE state = 'dead' GROUP BY 1`
	sqlDeadEvents = `SELECT 'events', '', count(*), min(received_at) FROM events
		WHERE disposition = 'dead_lettered'`
	// Marked effects: effects_mismatch holds them only.
	sqlMismatch = `SELECT destination, '', count(*), min(mismatch_at) FROM effects
		WHERE mismatch_at IS NOT NULL GROUP BY destination`
	// Outstanding compensations: effects_compensation holds compensations
	// only, by state; the finished states are left out of the range.
	sqlCompensation = `SELECT destination, '', count(*), min(created_at) FROM effects
		WHERE compensates <> 0 AND state IN ('approved', 'submitting', 'acknowledged', 'needs_reconciliation', 'retry_wait', 'dead')
		GROUP BY destination`
)

// SignalSnapshot measures the signals in one REPEATABLE READ, READ ONLY
// transaction: one snapshot, so that the signals agree with one another,
// and no locks, so ingest is never held up.
func (s *Store) SignalSnapshot(ctx context.Context, p *store.SignalSnapshotParams) (*store.SignalSnapshot, error) {
	var snap *store.SignalSnapshot
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		snap, err = store.MeasureSignals(ctx, signalReader{tx}, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("signal snapshot: %w", err)
	}
	return snap, nil
}

// signalReader runs the signal queries in the snapshot's transaction.
type signalReader struct{ tx pgx.Tx }

// signalSQL is the statement of each signal query.
var signalSQL = map[store.SignalQuery]string{
	store.SignalQueryLagByFlow: sqlLagByFlow, store.SignalQueryLagLargest: sqlLagLargest,
	store.SignalQueryUnfinished: sqlUnfinished, store.SignalQueryDeadline: sqlDeadline,
	store.SignalQueryUnknown: sqlUnknown, store.SignalQueryWindowStart: sqlWindowStart,
	store.SignalQueryWindowAudit: sqlWindowed, store.SignalQueryDeadEffects: sqlDeadEffects,
	store.SignalQueryDeadEvents: sqlDeadEvents, store.SignalQueryMismatch: sqlMismatch,
	store.SignalQueryCompensation: sqlCompensation,
}

// SignalRows runs one signal query (store.SignalReader).
func (r signalReader) SignalRows(ctx context.Context, q store.SignalQuery, args ...any) ([]store.SignalRow, error) {
	query, ok := signalSQL[q]
	if !ok {
		return nil, store.ErrUnknownSignalQuery
	}
	return r.rows(ctx, query, args...)
}

// rows reads (key, sub-key, count, oldest) rows.
func (r signalReader) rows(ctx context.Context, query string, args ...any) ([]store.SignalRow, error) {
	rows, err := r.tx.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.SignalRow, error) {
		var out store.SignalRow
		var oldest pgtype.Timestamptz
		if err := row.Scan(&out.Key, &out.Sub, &out.N, &oldest); err != nil {
			return out, err
		}
		if oldest.Valid && oldest.InfinityModifier == pgtype.Finite {
			out.Oldest = oldest.Time.UTC()
		}
		return out, nil
	})
}

// statusRankSQL is store.StatusRank in SQL.
func statusRankSQL(col string) string {
	return `CASE ` + col + ` WHEN 'alert' THEN 2 WHEN 'warn' THEN 1 ELSE 0 END`
}

// SignalHistoryRecord folds one computation into the minute and hour
// buckets and prunes the expired ones, in one transaction. The upsert
// keeps the larger value and the worse status, so concurrent recorders
// (several serve processes) agree whatever their order. The pruning
// deletes by (name, resolution, bucket) ranges of the primary key.
func (s *Store) SignalHistoryRecord(ctx context.Context, p *store.SignalHistoryRecordParams) error {
	for _, pt := range p.Points {
		if store.StatusRank(pt.Status) < 0 {
			return fmt.Errorf("record signal history: %s: %w: status %q", pt.Name, store.ErrInvalidArgument, pt.Status)
		}
	}
	minute, hour := p.Now.UTC().Truncate(time.Minute), p.Now.UTC().Truncate(time.Hour)
	minuteCut, hourCut := p.Now.Add(-24*time.Hour), p.Now.Add(-30*24*time.Hour)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, pt := range p.Points {
			for _, b := range []struct {
				res         string
				bucket, cut time.Time
			}{{store.ResolutionMinute, minute, minuteCut}, {store.ResolutionHour, hour, hourCut}} {
				if _, err := tx.Exec(ctx, `INSERT INTO signal_history AS h (name, resolution, bucket, value, status)
					VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name, resolution, bucket) DO UPDATE SET
					value = GREATEST(h.value, excluded.value),
					status = CASE WHEN `+statusRankSQL("excluded.status")+` > `+statusRankSQL("h.status")+`
						THEN excluded.status ELSE h.status END`,
					pt.Name, b.res, b.bucket, pt.Value, pt.Status); err != nil {
					return fmt.Errorf("%s %s: %w", pt.Name, b.res, err)
				}
				if _, err := tx.Exec(ctx, `DELETE FROM signal_history WHERE name = $1 AND resolution = $2 AND bucket < $3`,
					pt.Name, b.res, b.cut); err != nil {
					return fmt.Errorf("prune %s %s: %w", pt.Name, b.res, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record signal history: %w", err)
	}
	return nil
}

// SignalHistoryList returns one signal's buckets in [From, To); a zero
// bound is open.
func (s *Store) SignalHistoryList(ctx context.Context, p *store.SignalHistoryListParams) ([]*store.SignalPoint, error) {
	if p.Resolution != store.ResolutionMinute && p.Resolution != store.ResolutionHour {
		return nil, fmt.Errorf("list signal history: %w: resolution %q", store.ErrInvalidArgument, p.Resolution)
	}
	rows, err := s.pool.Query(ctx, `SELECT bucket, value, status FROM signal_history
		WHERE name = $1 AND resolution = $2 AND ($3::timestamptz IS NULL OR bucket >= $3)
		AND ($4::timestamptz IS NULL OR bucket < $4) ORDER BY bucket`, p.Name, p.Resolution, nullTime(p.From), nullTime(p.To))
	if err != nil {
		return nil, fmt.Errorf("list signal history: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.SignalPoint, error) {
		pt := &store.SignalPoint{}
		err := r.Scan(&pt.Bucket, &pt.Value, &pt.Status)
		pt.Bucket = pt.Bucket.UTC()
		return pt, err
	})
	if err != nil {
		return nil, fmt.Errorf("list signal history: %w", err)
	}
	return out, nil
}
