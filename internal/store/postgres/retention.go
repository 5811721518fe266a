package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/store"
)

// pruneLockKey is the advisory lock that lets one process at a time run a
// pruning batch ("hookprun" as a 64-bit number). It is a transaction-level
// lock taken with pg_try_advisory_xact_lock: it never outlives the
// batch's transaction, so it works through PgBouncer in transaction mode
// (a session-level lock would stay on whichever server connection the
// pooler handed out, and could be released on another).
const pruneLockKey int64 = 0x686f6f6b7072756e

// The questions the pruning pass asks of an event past its cutoff
// (store.PruneKept); the SQLite driver asks the same.
const (
	// Each question is a LATERAL subquery with LIMIT 1, which PostgreSQL
	// runs once per scanned event as an index probe. Written as NOT EXISTS
	// in the select list it was planned as a hashed subplan: a scan of the
	// whole effects and entities tables for every batch, a cost that grew
	// with the store instead of with the batch.
	pruneEventScan = `SELECT e.pk, e.source, e.received_at,
		e.received_at < $1 AND e.routed
			AND e.disposition IN ('applied', 'duplicate', 'stale', 'superseded', 'unrouted', 'resolved')
			AND wk.x IS NULL AND fx.x IS NULL AND nx.x IS NULL
		FROM (SELECT pk, source, received_at, routed, disposition FROM events
			WHERE pk > $2 ORDER BY pk LIMIT $3) e
		LEFT JOIN LATERAL (SELECT 1 AS x FROM work w WHERE w.event_pk = e.pk
			AND (w.done_at IS NULL OR w.disposition = 'dead_lettered') LIMIT 1) wk ON true
		LEFT JOIN LATERAL (SELECT 1 AS x FROM effects f WHERE f.source_event_pk = e.pk LIMIT 1) fx ON true
		LEFT JOIN LATERAL (SELECT 1 AS x FROM entities n WHERE n.applied_event_pk = e.pk LIMIT 1) nx ON true
		ORDER BY e.pk`
	pruneAuditScan = `SELECT a.id, a.source, a.at,
		a.at < $1 AND NOT EXISTS (SELECT 1 FROM events e
			WHERE e.source = a.source AND e.event_id = a.event_id AND a.event_id <> ''
			AND (NOT e.routed OR e.disposition IN ('accepted', 'dead_lettered')
				OR EXISTS (SELECT 1 FROM work w WHERE w.event_pk = e.pk
					AND (w.done_at IS NULL OR w.disposition = 'dead_lettered'))
				OR EXISTS (SELECT 1 FROM effects f WHERE f.source_event_pk = e.pk
					AND f.state NOT IN ('done', 'superseded', 'resolved'))))
		FROM audit a WHERE a.id > $2 ORDER BY a.id LIMIT $3`
	// Work is deleted only when settled. Under READ COMMITTED a replay or
	// a resend committed between the scan and the delete adds a row that
	// references the event: the event's delete then fails its foreign key,
	// the batch rolls back whole, and the next pass sees the new row.
	pruneDeliveries = `DELETE FROM deliveries WHERE event_pk = ANY($1)`
	pruneWork       = `DELETE FROM work WHERE event_pk = ANY($1) AND done_at IS NOT NULL`
	pruneLoopVisits = `DELETE FROM loop_visits WHERE event_pk = ANY($1)`
	pruneEvents     = `DELETE FROM events WHERE pk = ANY($1)`
	pruneAudit      = `DELETE FROM audit WHERE id = ANY($1)`
)

// RetentionPrune runs one batch of the pruning pass: the events in one
// transaction, the audit rows in another, each under the pruning lock.
// A batch that finds the lock taken reports Busy: another process is
// pruning, and two passes would only contend for the same rows.
func (s *Store) RetentionPrune(ctx context.Context, p *store.RetentionPruneParams) (*store.RetentionPruneResult, error) {
	res := &store.RetentionPruneResult{NextEventPK: p.AfterEventPK, NextAuditID: p.AfterAuditID}
	latest := p.LatestCutoff()
	if latest.IsZero() {
		res.EventsDone, res.AuditDone = true, true
		return res, nil
	}
	limit := p.Batch()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if ok, err := pruneLock(ctx, tx); err != nil || !ok {
			res.Busy = !ok
			return err
		}
		scan, err := pruneScan(ctx, tx, pruneEventScan, p, latest, p.AfterEventPK, limit)
		if err != nil {
			return fmt.Errorf("scan events: %w", err)
		}
		res.NextEventPK, res.EventsDone = scan.next, scan.done
		if len(scan.ids) == 0 {
			return nil
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
			tag, err := tx.Exec(ctx, d.q, scan.ids)
			if err != nil {
				return wrapErr("prune", err)
			}
			*d.n = tag.RowsAffected()
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("prune events: %w", err)
	}
	if res.Busy {
		return res, nil
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if ok, err := pruneLock(ctx, tx); err != nil || !ok {
			res.Busy = !ok
			return err
		}
		scan, err := pruneScan(ctx, tx, pruneAuditScan, p, latest, p.AfterAuditID, limit)
		if err != nil {
			return fmt.Errorf("scan audit: %w", err)
		}
		res.NextAuditID, res.AuditDone = scan.next, scan.done
		if len(scan.ids) == 0 {
			return nil
		}
		tag, err := tx.Exec(ctx, pruneAudit, scan.ids)
		if err != nil {
			return wrapErr("prune", err)
		}
		res.Audit = tag.RowsAffected()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("prune audit: %w", err)
	}
	return res, nil
}

func pruneLock(ctx context.Context, tx pgx.Tx) (bool, error) {
	var ok bool
	if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, pruneLockKey).Scan(&ok); err != nil {
		return false, fmt.Errorf("pruning lock: %w", err)
	}
	return ok, nil
}

type scanResult struct {
	ids  []int64
	next int64
	done bool
}

// pruneScan reads one window of rows after the cursor and picks those past
// their source's cutoff that nothing needs; see the SQLite driver's.
func pruneScan(ctx context.Context, tx pgx.Tx, q string, p *store.RetentionPruneParams, latest time.Time, after int64, limit int) (*scanResult, error) {
	rows, err := tx.Query(ctx, q, latest, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := &scanResult{next: after}
	n, old := 0, false
	for rows.Next() {
		var (
			id        int64
			source    string
			at        time.Time
			deletable bool
		)
		if err := rows.Scan(&id, &source, &at, &deletable); err != nil {
			return nil, err
		}
		n++
		out.next = id
		if !at.Before(latest) {
			continue
		}
		old = true
		if cut := p.CutoffOf(source); deletable && !cut.IsZero() && at.Before(cut) {
			out.ids = append(out.ids, id)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out.done = n < limit || !old
	return out, nil
}
