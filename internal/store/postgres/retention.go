package postgres

import (
	"context"
	"errors"
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
	// An effect past its source's cutoff that nothing needs
	// (store.PruneEffectKept). The scan walks effects in id order; the
	// time that ends the scan is created_at, which grows with the id, and
	// the cutoff applies to updated_at. The compensation probe reads
	// effects_compensates (a LATERAL probe, as for events).
	pruneEffectScan = `SELECT f.id, f.flow, f.entity, e.source, f.created_at, f.updated_at,
			f.updated_at < $1 AND f.state IN ('done', 'superseded', 'resolved') AND cx.x IS NULL
		FROM (SELECT id, flow, entity, state, source_event_pk, created_at, updated_at FROM effects
			WHERE id > $2 ORDER BY id LIMIT $3) f
		JOIN events e ON e.pk = f.source_event_pk
		LEFT JOIN LATERAL (SELECT 1 AS x FROM effects c WHERE c.compensates = f.id AND c.compensates <> 0
			AND c.state NOT IN ('done', 'superseded', 'resolved') LIMIT 1) cx ON true
		ORDER BY f.id`
	// The row lock every flow apply holds on its entity from ReadGroup to
	// its commit (the fence is a FOR NO KEY UPDATE lock, which
	// conflicts with this one). SKIP LOCKED: an entity being applied is
	// left for the next pass instead of making pruning wait.
	pruneLockEntities = `SELECT n.flow, n.entity FROM entities n
		JOIN unnest($1::text[], $2::text[]) AS k(flow, entity) ON n.flow = k.flow AND n.entity = k.entity
		ORDER BY n.flow, n.entity FOR NO KEY UPDATE OF n SKIP LOCKED`
	// The effect rows themselves: a delivery settle, an operator's
	// action, a compensation (which locks its original) or a
	// verification holding one is left for the next pass.
	pruneLockEffects = `SELECT id FROM effects WHERE id = ANY($1) ORDER BY id FOR UPDATE SKIP LOCKED`
	// Asked again once the rows are locked, in a statement whose snapshot
	// is taken after the locks: what changed them before the lock
	// (a compensation inserted, a state changed) is seen, and nothing can
	// change them after it.
	pruneRecheckEffects = `SELECT f.id FROM effects f
		JOIN unnest($1::bigint[], $2::timestamptz[]) AS c(id, cut) ON c.id = f.id
		WHERE f.state IN ('done', 'superseded', 'resolved') AND f.updated_at < c.cut
			AND NOT EXISTS (SELECT 1 FROM effects x WHERE x.compensates = f.id AND x.compensates <> 0
				AND x.state NOT IN ('done', 'superseded', 'resolved'))
		ORDER BY f.id`
	pruneAttempts   = `DELETE FROM effect_attempts WHERE effect_id = ANY($1)`
	pruneTombstones = `INSERT INTO effect_tombstones (episode_key, flow, entity, effect, destination, state, request, created_at, deleted_at)
		SELECT episode_key, flow, entity, effect, destination, state, request, created_at, $2
		FROM effects WHERE id = ANY($1) ORDER BY id
		ON CONFLICT (episode_key) DO NOTHING`
	pruneEffects = `DELETE FROM effects WHERE id = ANY($1)`
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
	res := &store.RetentionPruneResult{NextEffectID: p.AfterEffectID, NextEventPK: p.AfterEventPK, NextAuditID: p.AfterAuditID}
	latest := p.LatestCutoff()
	if latest.IsZero() {
		res.EffectsDone, res.EventsDone, res.AuditDone = true, true, true
		return res, nil
	}
	limit := p.Batch()
	// Effects first: an event whose last effect goes in this batch can go
	// in the events transaction right after it.
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if ok, err := pruneLock(ctx, tx); err != nil || !ok {
			res.Busy = !ok
			return err
		}
		return pruneEffectBatch(ctx, tx, p, latest, limit, res)
	})
	if err != nil {
		return nil, fmt.Errorf("prune effects: %w", err)
	}
	if res.Busy {
		return res, nil
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
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

type effectCandidate struct {
	id           int64
	flow, entity string
	cut          time.Time
}

// pruneEffectBatch deletes, leaving tombstones, the effects of one window
// that nothing needs, under the locks that keep a concurrent flow apply
// from inserting the same episode key again.
//
// The race it closes: an apply's insert reads its snapshot (the effect is
// there, no tombstone), pruning then deletes the effect and commits, and
// the insert's ON CONFLICT, which waited for the deleting transaction,
// finds the key free and inserts a second effect under it. Every effect a
// flow inserts carries its (flow, entity) in the episode key and is
// inserted by an apply of that entity, and an apply holds the entity's row
// lock from its first statement (ReadGroup's fencing lock) to its
// commit. Pruning takes the same row lock before it deletes: either the
// apply committed first (pruning then deletes the row the apply found
// existing) or pruning did (the apply's fence waited, and its
// insert's snapshot, taken later, sees the tombstone). Published messages'
// effects (flow publish) have no entity row and no apply that inserts
// them: their keys hold a fresh message id.
func pruneEffectBatch(ctx context.Context, tx pgx.Tx, p *store.RetentionPruneParams, latest time.Time, limit int, res *store.RetentionPruneResult) error {
	cands, next, done, err := pruneEffectsScan(ctx, tx, p, latest, p.AfterEffectID, limit)
	if err != nil {
		return fmt.Errorf("scan effects: %w", err)
	}
	res.NextEffectID, res.EffectsDone = next, done
	if len(cands) == 0 {
		return nil
	}
	var flows, entities []string
	for _, c := range cands {
		if c.flow != store.PublishFlow {
			flows, entities = append(flows, c.flow), append(entities, c.entity)
		}
	}
	locked := map[[2]string]bool{}
	if len(flows) > 0 {
		rows, err := tx.Query(ctx, pruneLockEntities, flows, entities)
		if err != nil {
			return fmt.Errorf("lock entities: %w", err)
		}
		for rows.Next() {
			var k [2]string
			if err := rows.Scan(&k[0], &k[1]); err != nil {
				rows.Close()
				return fmt.Errorf("lock entities: %w", err)
			}
			locked[k] = true
		}
		if rows.Close(); rows.Err() != nil {
			return fmt.Errorf("lock entities: %w", rows.Err())
		}
	}
	ids := make([]int64, 0, len(cands))
	cuts := map[int64]time.Time{}
	for _, c := range cands {
		if c.flow == store.PublishFlow || locked[[2]string{c.flow, c.entity}] {
			ids = append(ids, c.id)
			cuts[c.id] = c.cut
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, pruneLockEffects, ids)
	if err != nil {
		return fmt.Errorf("lock effects: %w", err)
	}
	lockedIDs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("lock effects: %w", err)
	}
	if len(lockedIDs) == 0 {
		return nil
	}
	lockedCuts := make([]time.Time, len(lockedIDs))
	for i, id := range lockedIDs {
		lockedCuts[i] = cuts[id]
	}
	rows, err = tx.Query(ctx, pruneRecheckEffects, lockedIDs, lockedCuts)
	if err != nil {
		return fmt.Errorf("recheck effects: %w", err)
	}
	del, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("recheck effects: %w", err)
	}
	if len(del) == 0 {
		return nil
	}
	tag, err := tx.Exec(ctx, pruneAttempts, del)
	if err != nil {
		return wrapErr("prune attempts", err)
	}
	res.Attempts = tag.RowsAffected()
	if _, err := tx.Exec(ctx, pruneTombstones, del, p.Now); err != nil {
		return wrapErr("write tombstones", err)
	}
	if tag, err = tx.Exec(ctx, pruneEffects, del); err != nil {
		return wrapErr("prune effects", err)
	}
	res.Effects = tag.RowsAffected()
	return nil
}

// pruneEffectsScan reads one window of effects after the cursor and picks
// those past their source's cutoff that nothing needs; the window is done
// as pruneScan's is, by creation time.
func pruneEffectsScan(ctx context.Context, tx pgx.Tx, p *store.RetentionPruneParams, latest time.Time, after int64, limit int) ([]effectCandidate, int64, bool, error) {
	rows, err := tx.Query(ctx, pruneEffectScan, latest, after, limit)
	if err != nil {
		return nil, 0, false, err
	}
	defer rows.Close()
	var out []effectCandidate
	next, n, old := after, 0, false
	for rows.Next() {
		var (
			c                effectCandidate
			source           string
			created, updated time.Time
			deletable        bool
		)
		if err := rows.Scan(&c.id, &c.flow, &c.entity, &source, &created, &updated, &deletable); err != nil {
			return nil, 0, false, err
		}
		n++
		next = c.id
		if !created.Before(latest) {
			continue
		}
		old = true
		if c.cut = p.CutoffOf(source); deletable && !c.cut.IsZero() && updated.Before(c.cut) {
			out = append(out, c)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, 0, false, err
	}
	return out, next, n < limit || !old, nil
}

// EffectTombstoneGet reads the tombstone of an episode key.
func (s *Store) EffectTombstoneGet(ctx context.Context, episodeKey string) (*store.EffectTombstone, error) {
	var t store.EffectTombstone
	var request string
	err := s.pool.QueryRow(ctx, `SELECT episode_key, flow, entity, effect, destination, state, request::text, created_at, deleted_at
		FROM effect_tombstones WHERE episode_key = $1`, episodeKey).
		Scan(&t.EpisodeKey, &t.Flow, &t.Entity, &t.Effect, &t.Destination, &t.State, &request, &t.CreatedAt, &t.DeletedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get tombstone %s: %w", episodeKey, err)
	}
	t.Request = []byte(request)
	t.CreatedAt, t.DeletedAt = t.CreatedAt.UTC(), t.DeletedAt.UTC()
	return &t, nil
}
