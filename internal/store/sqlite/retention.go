package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// The statements of the pruning pass (store.RetentionTx). The states and
// dispositions a row may be deleted in travel as JSON arrays (the ids to
// delete likewise), so each statement has one text whatever they hold:
// the writer caches statements by text. Each NOT EXISTS is one probe of
// an index from 0008_retention.sql or earlier; rows inside every
// retention skip them.
const (
	// ?1 latest, ?2 after, ?3 limit, ?4 the dispositions.
	pruneEventScan = `SELECT e.pk, e.source, e.received_at,
		CASE WHEN e.received_at < ?1
			AND e.routed = 1
			AND e.disposition IN (SELECT value FROM json_each(?4))
			AND NOT EXISTS (SELECT 1 FROM work w WHERE w.event_pk = e.pk
				AND (w.done_at IS NULL OR w.disposition = 'dead_lettered'))
			AND NOT EXISTS (SELECT 1 FROM effects f WHERE f.source_event_pk = e.pk)
			AND NOT EXISTS (SELECT 1 FROM entities n WHERE n.applied_event_pk = e.pk)
		THEN 1 ELSE 0 END
		FROM events e WHERE e.pk > ?2 ORDER BY e.pk LIMIT ?3`
	// ?1 latest, ?2 after, ?3 limit, ?4 the dispositions, ?5 the states.
	pruneAuditScan = `SELECT a.id, a.source, a.at,
		CASE WHEN a.at < ?1 AND NOT EXISTS (SELECT 1 FROM events e
			WHERE e.source = a.source AND e.event_id = a.event_id AND a.event_id <> ''
			AND (e.routed = 0 OR e.disposition NOT IN (SELECT value FROM json_each(?4))
				OR EXISTS (SELECT 1 FROM work w WHERE w.event_pk = e.pk
					AND (w.done_at IS NULL OR w.disposition = 'dead_lettered'))
				OR EXISTS (SELECT 1 FROM effects f WHERE f.source_event_pk = e.pk
					AND f.state NOT IN (SELECT value FROM json_each(?5)))))
		THEN 1 ELSE 0 END
		FROM audit a WHERE a.id > ?2 ORDER BY a.id LIMIT ?3`
	// ?1 latest, ?2 after, ?3 limit, ?4 the states. The compensation
	// probe reads effects_compensates.
	pruneEffectScan = `SELECT f.id, e.source, f.flow, f.entity, f.created_at, f.updated_at,
		CASE WHEN f.updated_at < ?1
			AND f.state IN (SELECT value FROM json_each(?4))
			AND NOT EXISTS (SELECT 1 FROM effects c WHERE c.compensates = f.id AND c.compensates <> 0
				AND c.state NOT IN (SELECT value FROM json_each(?4)))
		THEN 1 ELSE 0 END
		FROM effects f JOIN events e ON e.pk = f.source_event_pk
		WHERE f.id > ?2 ORDER BY f.id LIMIT ?3`
	// The tombstone is written before the row goes, in the same
	// transaction. A tombstone already there (which the ledger's inserts
	// make impossible) is kept: either one holds the key.
	pruneAttempts   = `DELETE FROM effect_attempts WHERE effect_id IN (SELECT value FROM json_each(?))`
	pruneTombstones = `INSERT INTO effect_tombstones (episode_key, flow, entity, effect, destination, state, request, created_at, deleted_at)
		SELECT episode_key, flow, entity, effect, destination, state, request, created_at, ?2
		FROM effects WHERE id IN (SELECT value FROM json_each(?1)) ORDER BY id
		ON CONFLICT (episode_key) DO NOTHING`
	pruneEffects = `DELETE FROM effects WHERE id IN (SELECT value FROM json_each(?))`
	// Work is deleted only when settled: a replay enqueued between the
	// scan and the delete cannot happen (one writer), but the guard keeps
	// the statement right on its own.
	pruneDeliveries = `DELETE FROM deliveries WHERE event_pk IN (SELECT value FROM json_each(?))`
	pruneWork       = `DELETE FROM work WHERE event_pk IN (SELECT value FROM json_each(?)) AND done_at IS NOT NULL`
	pruneLoopVisits = `DELETE FROM loop_visits WHERE event_pk IN (SELECT value FROM json_each(?))`
	pruneEvents     = `DELETE FROM events WHERE pk IN (SELECT value FROM json_each(?))`
	pruneAudit      = `DELETE FROM audit WHERE id IN (SELECT value FROM json_each(?))`
)

// jsonList is a list as the statements above take it.
func jsonList(vs any) (string, error) {
	b, err := json.Marshal(vs)
	return string(b), err
}

// PruneLock: one process prunes a SQLite file, and its writes take turns.
func (txn) PruneLock(context.Context) (bool, error) { return true, nil }

// pruneScan runs one of the scans above with its lists: its rows are
// (id, source, the time, deletable), an effect's (id, source, flow,
// entity, creation, last change, deletable).
func (a txn) pruneScan(ctx context.Context, q string, p *store.PruneScanParams, effects bool, lists ...any) ([]store.PruneRow, error) {
	args := []any{p.Latest.UnixMicro(), p.After, p.Limit}
	for _, l := range lists {
		list, err := jsonList(l)
		if err != nil {
			return nil, err
		}
		args = append(args, list)
	}
	var out []store.PruneRow
	err := a.each(ctx, q, args, func(sc scanner) error {
		var r store.PruneRow
		var at, cutAt int64
		var err error
		if effects {
			err = sc.Scan(&r.ID, &r.Source, &r.Flow, &r.Entity, &at, &cutAt, &r.Deletable)
		} else {
			err = sc.Scan(&r.ID, &r.Source, &at, &r.Deletable)
			cutAt = at
		}
		if err != nil {
			return err
		}
		r.At, r.CutAt = fromUnix(at), fromUnix(cutAt)
		out = append(out, r)
		return nil
	})
	return out, err
}

func (a txn) PruneEffectScan(ctx context.Context, p *store.PruneScanParams) ([]store.PruneRow, error) {
	return a.pruneScan(ctx, pruneEffectScan, p, true, p.States)
}

func (a txn) PruneEventScan(ctx context.Context, p *store.PruneScanParams) ([]store.PruneRow, error) {
	return a.pruneScan(ctx, pruneEventScan, p, false, p.Dispositions)
}

func (a txn) PruneAuditScan(ctx context.Context, p *store.PruneScanParams) ([]store.PruneRow, error) {
	return a.pruneScan(ctx, pruneAuditScan, p, false, p.Dispositions, p.States)
}

// PruneEffectsHold holds every candidate: the transaction has the only
// write lock, so no apply can insert a key between the scan and the
// delete.
func (txn) PruneEffectsHold(_ context.Context, p *store.PruneHoldParams) ([]int64, error) {
	ids := make([]int64, len(p.Candidates))
	for i, c := range p.Candidates {
		ids[i] = c.ID
	}
	return ids, nil
}

// deleted runs a delete of the ids and returns the rows it deleted.
func (a txn) deleted(ctx context.Context, what, q string, args ...any) (int64, error) {
	r, err := a.tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, dbErrors.Wrap(what, err)
	}
	n, err := r.RowsAffected()
	return n, dbErrors.Wrap(what, err)
}

func (a txn) PruneEffects(ctx context.Context, ids []int64, now time.Time) (attempts, effects int64, err error) {
	list, err := jsonList(ids)
	if err != nil {
		return 0, 0, err
	}
	if attempts, err = a.deleted(ctx, "prune attempts", pruneAttempts, list); err != nil {
		return 0, 0, err
	}
	if _, err := a.tx.ExecContext(ctx, pruneTombstones, list, now.UnixMicro()); err != nil {
		return 0, 0, dbErrors.Wrap("write tombstones", err)
	}
	effects, err = a.deleted(ctx, "prune effects", pruneEffects, list)
	return attempts, effects, err
}

func (a txn) PruneEvents(ctx context.Context, pks []int64) (*store.PrunedEvents, error) {
	list, err := jsonList(pks)
	if err != nil {
		return nil, err
	}
	n := &store.PrunedEvents{}
	for _, d := range []struct {
		q string
		n *int64
	}{{pruneDeliveries, &n.Deliveries}, {pruneWork, &n.Work}, {pruneLoopVisits, &n.LoopVisits}, {pruneEvents, &n.Events}} {
		if *d.n, err = a.deleted(ctx, "prune", d.q, list); err != nil {
			return nil, err
		}
	}
	return n, nil
}

func (a txn) PruneAudit(ctx context.Context, ids []int64) (int64, error) {
	list, err := jsonList(ids)
	if err != nil {
		return 0, err
	}
	return a.deleted(ctx, "prune", pruneAudit, list)
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
	if err != nil {
		return store.NoRow[store.EffectTombstone](err, sql.ErrNoRows, "get tombstone %s", episodeKey)
	}
	t.Request = []byte(request)
	t.CreatedAt, t.DeletedAt = time.UnixMicro(created).UTC(), time.UnixMicro(deletedAt).UTC()
	return &t, nil
}
