package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// The outcome signals read partial indexes and maintained columns only, so
// that their cost follows the size of what they report (the lagging
// entities, the pending backlog, the exception queue, the window's audit
// rows), never the size of the store. Each query names its index with
// INDEXED BY: without statistics SQLite might otherwise prefer a full
// index that also yields the GROUP BY order (the entities' primary key
// for a GROUP BY flow, say), which reads every row. The plans are pinned
// by TestSignalPlans.

// pendingEffectStates repeats effects_deadline's predicate.
const pendingEffectStates = `('approved', 'submitting', 'acknowledged', 'retry_wait', 'needs_reconciliation')`

// The SQL of each store.SignalQuery, returning (key, sub-key, count,
// oldest) rows; what the rows mean is written on the query.
const (
	// Lagging entities per flow: a scan of entities_behind, which holds
	// the lagging entities only; behind_since comes from the index.
	sqlLagByFlow = `SELECT flow, '', count(*), min(behind_since) FROM entities INDEXED BY entities_behind
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
			SELECT w.event_pk FROM work w INDEXED BY work_pending
				WHERE w.flow = en.flow AND w.entity = en.entity AND w.done_at IS NULL AND w.order_key > en.settled_key
			UNION
			SELECT w.event_pk FROM work w INDEXED BY work_dead
				WHERE w.flow = en.flow AND w.entity = en.entity AND w.disposition = 'dead_lettered' AND w.order_key > en.settled_key)) AS gap,
		NULL FROM (SELECT flow, entity, settled_key FROM entities INDEXED BY entities_behind
			WHERE newest_key > settled_key ORDER BY behind_since LIMIT 100) en
		ORDER BY gap DESC, en.flow, en.entity LIMIT 1`
	// Accepted events per source: events_accepted holds exactly the
	// events without a terminal disposition.
	sqlUnfinished = `SELECT source, '', count(*), min(received_at) FROM events INDEXED BY events_accepted
		WHERE disposition = 'accepted' GROUP BY source`
	// Pending effects with a deadline that warns or has passed:
	// effects_deadline holds pending effects with a deadline only; the
	// passed ones are its range deadline_at <= now.
	sqlDeadline = `SELECT destination, CASE WHEN deadline_at <= ?1 THEN 'passed' ELSE 'near' END, count(*),
		min(CASE WHEN deadline_at <= ?1 THEN deadline_at END) FROM effects INDEXED BY effects_deadline
		WHERE deadline_at IS NOT NULL AND state IN ` + pendingEffectStates + `
		AND (deadline_at <= ?1 OR deadline_warn_at <= ?1) GROUP BY 1, 2`
	// Unknown outcomes: two equality ranges of effects_state (state,
	// next_attempt_at): needs_reconciliation, and submitting (the
	// calls in flight, as many as the workers make at once).
	sqlUnknown = `SELECT destination, '', count(*), min(updated_at) FROM (
		SELECT destination, updated_at FROM effects INDEXED BY effects_state
			WHERE state = 'needs_reconciliation' AND mismatch_at IS NULL
		UNION ALL
		SELECT destination, updated_at FROM effects INDEXED BY effects_state
			WHERE state = 'submitting' AND lease_until <= ?) GROUP BY destination`
	// The window starts at the first audit row at or after its start,
	// found in audit_at (the earliest time, then the lowest id of the few
	// rows at that instant); the rows counted are then ranges of audit_action
	// (action, id) from that id on, re-checked on at because audit times
	// come from the callers and need not follow ids exactly.
	sqlWindowStart = `SELECT '', '', first, NULL FROM (SELECT min(id) AS first FROM audit INDEXED BY audit_at WHERE at = (
		SELECT min(at) FROM audit INDEXED BY audit_at WHERE at >= ?)) WHERE first IS NOT NULL`
	sqlWindowed = `SELECT action, CASE WHEN action <> 'key_conflict' THEN action
			WHEN detail LIKE 'version %' THEN 'version' ELSE 'episode_key' END, count(*), min(at)
		FROM audit INDEXED BY audit_action
		WHERE action IN ('key_conflict', 'loop_blocked', 'loop_hop_limit') AND id >= ? AND at >= ? GROUP BY 1, 2`
	// Dead effects: a range of effects_state; dead-lettered events: a range
	// of events_disposition (its predicate repeated so it applies).
	sqlDeadEffects = `SELECT CASE WHEN owner = '' THEN 'unassigned' ELSE owner END, '', count(*), min(updated_at)
		FROM effects INDEXED BY effects_state WHERE state = 'dead' GROUP BY 1`
	sqlDeadEvents = `SELECT 'events', '', count(*), min(received_at) FROM events INDEXED BY events_disposition
		WHERE disposition = 'dead_lettered' AND disposition NOT IN ('accepted', 'applied')`
	// Marked effects: effects_mismatch holds them only.
	sqlMismatch = `SELECT destination, '', count(*), min(mismatch_at) FROM effects INDEXED BY effects_mismatch
		WHERE mismatch_at IS NOT NULL GROUP BY destination`
	// Outstanding compensations: effects_compensation holds compensations
	// only, by state; the finished states are left out of the range.
	sqlCompensation = `SELECT destination, '', count(*), min(created_at) FROM effects INDEXED BY effects_compensation
		WHERE compensates <> 0 AND state IN ('approved', 'submitting', 'acknowledged', 'needs_reconciliation', 'retry_wait', 'dead')
		GROUP BY destination`
)

// SignalSnapshot measures the signals in one read transaction on the
// reader pool: one WAL snapshot, so that the signals agree with one
// another, and never the writer, so ingest is not held up.
func (s *Store) SignalSnapshot(ctx context.Context, p *store.SignalSnapshotParams) (*store.SignalSnapshot, error) {
	tx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("signal snapshot: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read only
	snap, err := store.MeasureSignals(ctx, signalReader{tx}, p)
	if err != nil {
		return nil, fmt.Errorf("signal snapshot: %w", err)
	}
	return snap, nil
}

// signalReader runs the signal queries in the snapshot's transaction.
type signalReader struct{ tx *sql.Tx }

// signalSQL is the statement of each signal query.
var signalSQL = map[store.SignalQuery]string{
	store.SignalQueryLagByFlow: sqlLagByFlow, store.SignalQueryLagLargest: sqlLagLargest,
	store.SignalQueryUnfinished: sqlUnfinished, store.SignalQueryDeadline: sqlDeadline,
	store.SignalQueryUnknown: sqlUnknown, store.SignalQueryWindowStart: sqlWindowStart,
	store.SignalQueryWindowAudit: sqlWindowed, store.SignalQueryDeadEffects: sqlDeadEffects,
	store.SignalQueryDeadEvents: sqlDeadEvents, store.SignalQueryMismatch: sqlMismatch,
	store.SignalQueryCompensation: sqlCompensation,
}

// SignalRows runs one signal query (store.SignalReader); a time is
// stored as microseconds.
func (r signalReader) SignalRows(ctx context.Context, q store.SignalQuery, args ...any) ([]store.SignalRow, error) {
	query, ok := signalSQL[q]
	if !ok {
		return nil, store.ErrUnknownSignalQuery
	}
	for i, a := range args {
		if t, ok := a.(time.Time); ok {
			args[i] = t.UnixMicro()
		}
	}
	return r.rows(ctx, query, args...)
}

// rows reads (key, sub-key, count, oldest) rows.
func (r signalReader) rows(ctx context.Context, query string, args ...any) ([]store.SignalRow, error) {
	rows, err := r.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.SignalRow
	for rows.Next() {
		var row store.SignalRow
		var n, oldest sql.NullInt64
		if err := rows.Scan(&row.Key, &row.Sub, &n, &oldest); err != nil {
			return nil, err
		}
		row.N, row.Oldest = n.Int64, fromMicros(oldest)
		out = append(out, row)
	}
	return out, rows.Err()
}

// SignalHistoryRecord folds one computation into the minute and hour
// buckets and prunes the expired ones, in one write transaction. The
// pruning deletes by (name, resolution, bucket) ranges of the primary key.
func (s *Store) SignalHistoryRecord(ctx context.Context, p *store.SignalHistoryRecordParams) error {
	for _, pt := range p.Points {
		if store.StatusRank(pt.Status) < 0 {
			return fmt.Errorf("record signal history: %s: %w: status %q", pt.Name, store.ErrInvalidArgument, pt.Status)
		}
	}
	minute, hour := p.Now.UTC().Truncate(time.Minute), p.Now.UTC().Truncate(time.Hour)
	minuteCut, hourCut := p.Now.Add(-24*time.Hour).UnixMicro(), p.Now.Add(-30*24*time.Hour).UnixMicro()
	err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		for _, pt := range p.Points {
			for _, b := range []struct {
				res    string
				bucket time.Time
				cut    int64
			}{{store.ResolutionMinute, minute, minuteCut}, {store.ResolutionHour, hour, hourCut}} {
				if _, err := tx.ExecContext(ctx, `INSERT INTO signal_history (name, resolution, bucket, value, status)
					VALUES (?, ?, ?, ?, ?) ON CONFLICT (name, resolution, bucket) DO UPDATE SET
					value = max(value, excluded.value),
					status = CASE WHEN `+statusRankSQL("excluded.status")+` > `+statusRankSQL("status")+`
						THEN excluded.status ELSE status END`,
					pt.Name, b.res, b.bucket.UnixMicro(), pt.Value, pt.Status); err != nil {
					return fmt.Errorf("%s %s: %w", pt.Name, b.res, err)
				}
				if _, err := tx.ExecContext(ctx, `DELETE FROM signal_history WHERE name = ? AND resolution = ? AND bucket < ?`,
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

// statusRankSQL is store.StatusRank in SQL.
func statusRankSQL(col string) string {
	return `CASE ` + col + ` WHEN 'alert' THEN 2 WHEN 'warn' THEN 1 ELSE 0 END`
}

// SignalHistoryList returns one signal's buckets in [From, To); a zero
// bound is open.
func (s *Store) SignalHistoryList(ctx context.Context, p *store.SignalHistoryListParams) ([]*store.SignalPoint, error) {
	if p.Resolution != store.ResolutionMinute && p.Resolution != store.ResolutionHour {
		return nil, fmt.Errorf("list signal history: %w: resolution %q", store.ErrInvalidArgument, p.Resolution)
	}
	to := int64(1<<63 - 1)
	if !p.To.IsZero() {
		to = p.To.UnixMicro()
	}
	from := int64(-1 << 63)
	if !p.From.IsZero() {
		from = p.From.UnixMicro()
	}
	rows, err := s.readQuery(ctx, `SELECT bucket, value, status FROM signal_history
		WHERE name = ? AND resolution = ? AND bucket >= ? AND bucket < ? ORDER BY bucket`, p.Name, p.Resolution, from, to)
	if err != nil {
		return nil, fmt.Errorf("list signal history: %w", err)
	}
	defer rows.Close()
	var out []*store.SignalPoint
	for rows.Next() {
		pt := &store.SignalPoint{}
		var bucket int64
		if err := rows.Scan(&bucket, &pt.Value, &pt.Status); err != nil {
			return nil, fmt.Errorf("list signal history: %w", err)
		}
		pt.Bucket = time.UnixMicro(bucket).UTC()
		out = append(out, pt)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list signal history: %w", err)
	}
	return out, nil
}
