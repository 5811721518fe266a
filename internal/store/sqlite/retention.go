package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// The questions the pruning pass asks of an event past its cutoff
// (store.PruneKept). Each NOT EXISTS is one probe of an index from
// 0008_retention.sql or earlier; rows inside every retention skip them.
const (
	pruneEventScan = `SELECT e.pk, e.source, e.received_at,
		CASE WHEN e.received_at < ?
			AND e.routed = 1
			AND e.disposition IN ('applied', 'duplicate', 'stale', 'superseded', 'unrouted', 'resolved')
			AND NOT EXISTS (SELECT 1 FROM work w WHERE w.event_pk = e.pk
				AND (w.done_at IS NULL OR w.disposition = 'dead_lettered'))
			AND NOT EXISTS (SELECT 1 FROM effects f WHERE f.source_event_pk = e.pk)
			AND NOT EXISTS (SELECT 1 FROM entities n WHERE n.applied_event_pk = e.pk)
		THEN 1 ELSE 0 END
		FROM events e WHERE e.pk > ? ORDER BY e.pk LIMIT ?`
	// An audit row is kept past its cutoff while it concerns an event that
	// is unfinished or has an effect not yet in a terminal state: the
	// console and the exception queue show that trail to the person who
	// has to act on it.
	pruneAuditScan = `SELECT a.id, a.source, a.at,
		CASE WHEN a.at < ? AND NOT EXISTS (SELECT 1 FROM events e
			WHERE e.source = a.source AND e.event_id = a.event_id AND a.event_id <> ''
			AND (e.routed = 0 OR e.disposition IN ('accepted', 'dead_lettered')
				OR EXISTS (SELECT 1 FROM work w WHERE w.event_pk = e.pk
					AND (w.done_at IS NULL OR w.disposition = 'dead_lettered'))
				OR EXISTS (SELECT 1 FROM effects f WHERE f.source_event_pk = e.pk
					AND f.state NOT IN ('done', 'superseded', 'resolved'))))
		THEN 1 ELSE 0 END
		FROM audit a WHERE a.id > ? ORDER BY a.id LIMIT ?`
	// The pks to delete travel as one JSON array, so each statement has
	// one text whatever the batch holds (the writer caches statements by
	// text). Work is deleted only when settled: a replay enqueued between
	// the scan and the delete cannot happen (one writer), but the guard
	// keeps the statement right on its own.
	pruneDeliveries = `DELETE FROM deliveries WHERE event_pk IN (SELECT value FROM json_each(?))`
	pruneWork       = `DELETE FROM work WHERE event_pk IN (SELECT value FROM json_each(?)) AND done_at IS NOT NULL`
	pruneLoopVisits = `DELETE FROM loop_visits WHERE event_pk IN (SELECT value FROM json_each(?))`
	pruneEvents     = `DELETE FROM events WHERE pk IN (SELECT value FROM json_each(?))`
	pruneAudit      = `DELETE FROM audit WHERE id IN (SELECT value FROM json_each(?))`
)

// RetentionPrune runs one batch of the pruning pass: the events in one
// write transaction, the audit rows in another. Each goes through the
// shared writer like any other write, so ingest waits for at most one
// batch, never for the pass.
func (s *Store) RetentionPrune(ctx context.Context, p *store.RetentionPruneParams) (*store.RetentionPruneResult, error) {
	res := &store.RetentionPruneResult{NextEventPK: p.AfterEventPK, NextAuditID: p.AfterAuditID}
	latest := p.LatestCutoff()
	if latest.IsZero() {
		res.EventsDone, res.AuditDone = true, true
		return res, nil
	}
	limit := p.Batch()
	err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		scan, err := pruneScan(ctx, tx, pruneEventScan, p, latest, p.AfterEventPK, limit)
		if err != nil {
			return fmt.Errorf("scan events: %w", err)
		}
		res.NextEventPK, res.EventsDone = scan.next, scan.done
		if len(scan.ids) == 0 {
			return nil
		}
		ids, err := json.Marshal(scan.ids)
		if err != nil {
			return err
		}
		for _, d := range []struct {
			q string
			n *int64
		}{
			{pruneDeliveries, &res.Deliveries},
			{pruneWork, &res.Work},
			{pruneLoopVisits, &res.LoopVisits},
			{pruneEvents, &res.Events},
		} {
			r, err := tx.ExecContext(ctx, d.q, string(ids))
			if err != nil {
				return wrapErr("prune", err)
			}
			if *d.n, err = r.RowsAffected(); err != nil {
				return wrapErr("prune", err)
			}
		}
		return nil
	})
	if err != nil {
		*res = store.RetentionPruneResult{NextEventPK: p.AfterEventPK, NextAuditID: p.AfterAuditID}
		return nil, fmt.Errorf("prune events: %w", err)
	}
	err = s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		scan, err := pruneScan(ctx, tx, pruneAuditScan, p, latest, p.AfterAuditID, limit)
		if err != nil {
			return fmt.Errorf("scan audit: %w", err)
		}
		res.NextAuditID, res.AuditDone = scan.next, scan.done
		if len(scan.ids) == 0 {
			return nil
		}
		ids, err := json.Marshal(scan.ids)
		if err != nil {
			return err
		}
		r, err := tx.ExecContext(ctx, pruneAudit, string(ids))
		if err != nil {
			return wrapErr("prune", err)
		}
		res.Audit, err = r.RowsAffected()
		return wrapErr("prune", err)
	})
	if err != nil {
		return nil, fmt.Errorf("prune audit: %w", err)
	}
	return res, nil
}

type scanResult struct {
	ids  []int64
	next int64
	done bool
}

// pruneScan reads one window of rows after the cursor and picks those past
// their source's cutoff that nothing needs. The window is done when it
// came back short or held no row older than the latest cutoff: keys grow
// with time, so what follows is inside every retention.
func pruneScan(ctx context.Context, tx *wtx, q string, p *store.RetentionPruneParams, latest time.Time, after int64, limit int) (*scanResult, error) {
	rows, err := tx.QueryContext(ctx, q, latest.UnixMicro(), after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := &scanResult{next: after}
	n, old := 0, false
	for rows.Next() {
		var (
			id, at    int64
			source    string
			deletable bool
		)
		if err := rows.Scan(&id, &source, &at, &deletable); err != nil {
			return nil, err
		}
		n++
		out.next = id
		if at >= latest.UnixMicro() {
			continue
		}
		old = true
		cut := p.CutoffOf(source)
		if deletable && !cut.IsZero() && at < cut.UnixMicro() {
			out.ids = append(out.ids, id)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out.done = n < limit || !old
	return out, nil
}
