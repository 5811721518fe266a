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

// signalQueries are the snapshot's reads, each returning (dimension key,
// sub-key, count, oldest) rows that measureRows folds into a measure.
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
	sqlDeadline = `SELECT destination, CASE WHEN deadline_at <= ? THEN 'passed' ELSE 'near' END, count(*),
		min(CASE WHEN deadline_at <= ? THEN deadline_at END) FROM effects INDEXED BY effects_deadline
		WHERE deadline_at IS NOT NULL AND state IN ` + pendingEffectStates + `
		AND (deadline_at <= ? OR deadline_warn_at <= ?) GROUP BY 1, 2`
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
	sqlWindowStart = `SELECT min(id) FROM audit INDEXED BY audit_at WHERE at = (
		SELECT min(at) FROM audit INDEXED BY audit_at WHERE at >= ?)`
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

// signalRow is one grouped row of a signal query.
type signalRow struct {
	key, sub string
	n        int64
	oldest   time.Time
}

// SignalSnapshot measures the nine signals in one read transaction on the
// reader pool: one WAL snapshot, so the nine agree with one another, and
// never the writer, so ingest is not held up.
func (s *Store) SignalSnapshot(ctx context.Context, p *store.SignalSnapshotParams) (*store.SignalSnapshot, error) {
	tx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("signal snapshot: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read only
	snap, err := signalSnapshot(ctx, tx, p)
	if err != nil {
		return nil, fmt.Errorf("signal snapshot: %w", err)
	}
	return snap, nil
}

func signalSnapshot(ctx context.Context, tx *sql.Tx, p *store.SignalSnapshotParams) (*store.SignalSnapshot, error) {
	now := p.Now.UnixMicro()
	q := func(query string, args ...any) ([]signalRow, error) {
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []signalRow
		for rows.Next() {
			var r signalRow
			var n sql.NullInt64
			var oldest sql.NullInt64
			if err := rows.Scan(&r.key, &r.sub, &n, &oldest); err != nil {
				return nil, err
			}
			r.n, r.oldest = n.Int64, fromMicros(oldest)
			out = append(out, r)
		}
		return out, rows.Err()
	}
	ms := map[string]*store.SignalMeasure{}
	for _, name := range store.SignalNames() {
		ms[name] = store.NewSignalMeasure(name)
	}

	lag := ms[store.SignalRevisionLag]
	rows, err := q(sqlLagByFlow)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", store.SignalRevisionLag, err)
	}
	for _, r := range rows {
		lag.Count(r.n, r.oldest)
		lag.Break("flow", r.key, r.n)
	}
	if lag.Value > 0 {
		if rows, err = q(sqlLagLargest); err != nil {
			return nil, fmt.Errorf("%s: largest gap: %w", store.SignalRevisionLag, err)
		}
		for _, r := range rows {
			lag.Break("largest_gap", r.key, r.n)
		}
	}

	unf := ms[store.SignalUnfinishedEvents]
	if rows, err = q(sqlUnfinished); err != nil {
		return nil, fmt.Errorf("%s: %w", store.SignalUnfinishedEvents, err)
	}
	for _, r := range rows {
		unf.Count(r.n, r.oldest)
		unf.Break("source", r.key, r.n)
	}

	dl := ms[store.SignalDeadlineRisk]
	if rows, err = q(sqlDeadline, now, now, now, now); err != nil {
		return nil, fmt.Errorf("%s: %w", store.SignalDeadlineRisk, err)
	}
	for _, r := range rows {
		dl.Count(r.n, r.oldest)
		dl.Break("state", r.sub, r.n)
		dl.Break("destination", r.key, r.n)
		if r.sub == "passed" {
			dl.Passed += r.n
		} else {
			dl.Near += r.n
		}
	}

	unk := ms[store.SignalUnknownOutcomes]
	if rows, err = q(sqlUnknown, now); err != nil {
		return nil, fmt.Errorf("%s: %w", store.SignalUnknownOutcomes, err)
	}
	for _, r := range rows {
		unk.Count(r.n, r.oldest)
		unk.Break("destination", r.key, r.n)
	}

	since := p.Now.Add(-p.Window).UnixMicro()
	var first sql.NullInt64 // NULL: no audit row in the window
	if err := tx.QueryRowContext(ctx, sqlWindowStart, since).Scan(&first); err != nil {
		return nil, fmt.Errorf("signal window: %w", err)
	}
	if first.Valid {
		if rows, err = q(sqlWindowed, first.Int64, since); err != nil {
			return nil, fmt.Errorf("signal window: %w", err)
		}
		for _, r := range rows {
			m := ms[store.SignalLoopBlocks]
			if r.key == "key_conflict" {
				m = ms[store.SignalKeyConflicts]
			}
			m.Count(r.n, r.oldest)
			m.Break("kind", r.sub, r.n)
		}
	}

	dead := ms[store.SignalDeadLetters]
	if rows, err = q(sqlDeadEffects); err != nil {
		return nil, fmt.Errorf("%s: %w", store.SignalDeadLetters, err)
	}
	for _, r := range rows {
		dead.Count(r.n, r.oldest)
		dead.Break("owner", r.key, r.n)
		dead.Break("kind", "effects", r.n)
	}
	if rows, err = q(sqlDeadEvents); err != nil {
		return nil, fmt.Errorf("%s: %w", store.SignalDeadLetters, err)
	}
	for _, r := range rows {
		dead.Count(r.n, r.oldest)
		dead.Break("kind", "events", r.n)
	}

	for _, sig := range []struct{ name, query string }{
		{store.SignalReconciliationMismatches, sqlMismatch},
		{store.SignalCompensationOutstanding, sqlCompensation},
	} {
		if rows, err = q(sig.query); err != nil {
			return nil, fmt.Errorf("%s: %w", sig.name, err)
		}
		for _, r := range rows {
			ms[sig.name].Count(r.n, r.oldest)
			ms[sig.name].Break("destination", r.key, r.n)
		}
	}

	snap := &store.SignalSnapshot{At: p.Now.UTC()}
	for _, name := range store.SignalNames() {
		ms[name].TrimBreakdown(p.BreakdownLimit)
		snap.Measures = append(snap.Measures, ms[name])
	}
	return snap, nil
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
