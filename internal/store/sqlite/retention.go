package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// The questions the pruning pass asks of an event past its cutoff
// (store.PruneKept). Each NOT EXISTS is one probe of an index from
// 0008_retention.sql or earlier; rows inside every retention skip them.
const (
	pruneEventScan = `SELECT e.pk, e.source, e.received_at, e.received_at,
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
	pruneAuditScan = `SELECT a.id, a.source, a.at, a.at,
		CASE WHEN a.at < ? AND NOT EXISTS (SELECT 1 FROM events e
			WHERE e.source = a.source AND e.event_id = a.event_id AND a.event_id <> ''
			AND (e.routed = 0 OR e.disposition IN ('accepted', 'dead_lettered')
				OR EXISTS (SELECT 1 FROM work w WHERE w.event_pk = e.pk
					AND (w.done_at IS NULL OR w.disposition = 'dead_lettered'))
				OR EXISTS (SELECT 1 FROM effects f WHERE f.source_event_pk = e.pk
					AND f.state NOT IN ('done', 'superseded', 'resolved'))))
		THEN 1 ELSE 0 END
		FROM audit a WHERE a.id > ? ORDER BY a.id LIMIT ?`
	// An effect past its source's cutoff that nothing needs
	// (store.PruneEffectKept). The scan walks effects in id order; the
	// time that ends the scan is created_at, which grows with the id (an
	// effect is changed after it is created, never before), and the
	// cutoff applies to updated_at. The compensation probe reads
	// effects_compensates.
	pruneEffectScan = `SELECT f.id, e.source, f.created_at, f.updated_at,
		CASE WHEN f.updated_at < ?
			AND f.state IN ('done', 'superseded', 'resolved')
			AND NOT EXISTS (SELECT 1 FROM effects c WHERE c.compensates = f.id AND c.compensates <> 0
				AND c.state NOT IN ('done', 'superseded', 'resolved'))
		THEN 1 ELSE 0 END
		FROM effects f JOIN events e ON e.pk = f.source_event_pk
		WHERE f.id > ? ORDER BY f.id LIMIT ?`
	// The tombstone is written before the row goes, in the same
	// transaction. A tombstone already there (which the ledger's inserts
	// make impossible) is kept: either one holds the key.
	pruneAttempts   = `DELETE FROM effect_attempts WHERE effect_id IN (SELECT value FROM json_each(?))`
	pruneTombstones = `INSERT INTO effect_tombstones (episode_key, flow, entity, effect, destination, state, request, created_at, deleted_at)
		SELECT episode_key, flow, entity, effect, destination, state, request, created_at, ?2
		FROM effects WHERE id IN (SELECT value FROM json_each(?1)) ORDER BY id
		ON CONFLICT (episode_key) DO NOTHING`
	pruneEffects = `DELETE FROM effects WHERE id IN (SELECT value FROM json_each(?))`
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
	res := &store.RetentionPruneResult{NextEffectID: p.AfterEffectID, NextEventPK: p.AfterEventPK, NextAuditID: p.AfterAuditID}
	latest := p.LatestCutoff()
	if latest.IsZero() {
		res.EffectsDone, res.EventsDone, res.AuditDone = true, true, true
		return res, nil
	}
	limit := p.Batch()
	// Effects first: an event whose last effect goes in this batch can go
	// in the events transaction right after it, when the event scan has
	// not passed it yet.
	err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		scan, err := pruneScan(ctx, tx, pruneEffectScan, p, latest, p.AfterEffectID, limit)
		if err != nil {
			return fmt.Errorf("scan effects: %w", err)
		}
		res.NextEffectID, res.EffectsDone = scan.next, scan.done
		if len(scan.ids) == 0 {
			return nil
		}
		ids, err := json.Marshal(scan.ids)
		if err != nil {
			return err
		}
		r, err := tx.ExecContext(ctx, pruneAttempts, string(ids))
		if err != nil {
			return wrapErr("prune attempts", err)
		}
		if res.Attempts, err = r.RowsAffected(); err != nil {
			return wrapErr("prune attempts", err)
		}
		if _, err := tx.ExecContext(ctx, pruneTombstones, string(ids), p.Now.UnixMicro()); err != nil {
			return wrapErr("write tombstones", err)
		}
		if r, err = tx.ExecContext(ctx, pruneEffects, string(ids)); err != nil {
			return wrapErr("prune effects", err)
		}
		res.Effects, err = r.RowsAffected()
		return wrapErr("prune effects", err)
	})
	if err != nil {
		return nil, fmt.Errorf("prune effects: %w", err)
	}
	err = s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
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
// their source's cutoff that nothing needs. Each row is (id, source, the
// time its window is judged by, the time its cutoff is judged by,
// deletable): an event's or audit row's one time twice; an effect's
// creation (keys and creation grow together) and its last change. The
// window is done when it came back short or held no row older than the
// latest cutoff: keys grow with time, so what follows is inside every
// retention.
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
			id, at, cutAt int64
			source        string
			deletable     bool
		)
		if err := rows.Scan(&id, &source, &at, &cutAt, &deletable); err != nil {
			return nil, err
		}
		n++
		out.next = id
		if at >= latest.UnixMicro() {
			continue
		}
		old = true
		cut := p.CutoffOf(source)
		if deletable && !cut.IsZero() && cutAt < cut.UnixMicro() {
			out.ids = append(out.ids, id)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out.done = n < limit || !old
	return out, nil
}

// EffectTombstoneGet reads the tombstone of an episode key.
func (s *Store) EffectTombstoneGet(ctx context.Context, episodeKey string) (*store.EffectTombstone, error) {
	var (
		t                  store.EffectTombstone
		request            string
		created, deletedAt int64
	)
	err := s.readQueryRow(ctx, `SELECT episode_key, flow, entity, effect, destination, state, request, created_at, deleted_at
		FROM effect_tombstones WHERE episode_key = ?`, episodeKey).
		Scan(&t.EpisodeKey, &t.Flow, &t.Entity, &t.Effect, &t.Destination, &t.State, &request, &created, &deletedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get tombstone %s: %w", episodeKey, err)
	}
	t.Request = []byte(request)
	t.CreatedAt, t.DeletedAt = time.UnixMicro(created).UTC(), time.UnixMicro(deletedAt).UTC()
	return &t, nil
}
