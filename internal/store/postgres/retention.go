package postgres

import (
	"context"
	"errors"
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

// The statements of the pruning pass (store.RetentionTx).
const (
	// Each question is a LATERAL subquery with LIMIT 1, which PostgreSQL
	// runs once per scanned event as an index probe. Written as NOT EXISTS
	// in the select list it was planned as a hashed subplan: a scan of the
	// whole effects and entities tables for every batch, a cost that grew
	// with the store instead of with the batch. $1 latest, $2 after, $3
	// limit, $4 the dispositions.
	pruneEventScan = `SELECT e.pk, e.source, e.received_at,
		e.received_at < $1 AND e.routed AND e.disposition = ANY($4::text[])
			AND wk.x IS NULL AND fx.x IS NULL AND nx.x IS NULL
		FROM (SELECT pk, source, received_at, routed, disposition FROM events
			WHERE pk > $2 ORDER BY pk LIMIT $3) e
		LEFT JOIN LATERAL (SELECT 1 AS x FROM work w WHERE w.event_pk = e.pk
			AND (w.done_at IS NULL OR w.disposition = 'dead_lettered') LIMIT 1) wk ON true
		LEFT JOIN LATERAL (SELECT 1 AS x FROM effects f WHERE f.source_event_pk = e.pk LIMIT 1) fx ON true
		LEFT JOIN LATERAL (SELECT 1 AS x FROM entities n WHERE n.applied_event_pk = e.pk LIMIT 1) nx ON true
		ORDER BY e.pk`
	// $1 latest, $2 after, $3 limit, $4 the dispositions, $5 the states.
	pruneAuditScan = `SELECT a.id, a.source, a.at,
		a.at < $1 AND NOT EXISTS (SELECT 1 FROM events e
			WHERE e.source = a.source AND e.event_id = a.event_id AND a.event_id <> ''
			AND (NOT e.routed OR e.disposition <> ALL($4::text[])
				OR EXISTS (SELECT 1 FROM work w WHERE w.event_pk = e.pk
					AND (w.done_at IS NULL OR w.disposition = 'dead_lettered'))
				OR EXISTS (SELECT 1 FROM effects f WHERE f.source_event_pk = e.pk
					AND f.state <> ALL($5::text[]))))
		FROM audit a WHERE a.id > $2 ORDER BY a.id LIMIT $3`
	// The compensation probe reads effects_compensates (a LATERAL probe,
	// as for events). $1 latest, $2 after, $3 limit, $4 the states.
	pruneEffectScan = `SELECT f.id, e.source, f.flow, f.entity, f.created_at, f.updated_at,
			f.updated_at < $1 AND f.state = ANY($4::text[]) AND cx.x IS NULL
		FROM (SELECT id, flow, entity, state, source_event_pk, created_at, updated_at FROM effects
			WHERE id > $2 ORDER BY id LIMIT $3) f
		JOIN events e ON e.pk = f.source_event_pk
		LEFT JOIN LATERAL (SELECT 1 AS x FROM effects c WHERE c.compensates = f.id AND c.compensates <> 0
			AND c.state <> ALL($4::text[]) LIMIT 1) cx ON true
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
	// change them after it. $3 the states.
	pruneRecheckEffects = `SELECT f.id FROM effects f
		JOIN unnest($1::bigint[], $2::timestamptz[]) AS c(id, cut) ON c.id = f.id
		WHERE f.state = ANY($3::text[]) AND f.updated_at < c.cut
			AND NOT EXISTS (SELECT 1 FROM effects x WHERE x.compensates = f.id AND x.compensates <> 0
				AND x.state <> ALL($3::text[]))
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

// PruneLock tries pruneLockKey.
func (a txn) PruneLock(ctx context.Context) (bool, error) {
	var ok bool
	err := a.t.query(ctx, "pruning lock", `SELECT pg_try_advisory_xact_lock($1)`, []any{pruneLockKey}, func(rows pgx.Rows) error {
		if !rows.Next() {
			return errors.New("no answer")
		}
		return rows.Scan(&ok)
	})
	return ok, err
}

// textList is a list of states or dispositions as the statements above
// take it.
func textList[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// pruneScan runs one of the scans above: its rows are (id, source, the
// time, deletable), an effect's (id, source, flow, entity, creation, last
// change, deletable).
func (a txn) pruneScan(ctx context.Context, q string, p *store.PruneScanParams, effects bool, lists ...any) ([]store.PruneRow, error) {
	var out []store.PruneRow
	err := a.each(ctx, "scan", q, append([]any{p.Latest, p.After, p.Limit}, lists...), func(row pgx.Row) error {
		var r store.PruneRow
		var err error
		if effects {
			err = row.Scan(&r.ID, &r.Source, &r.Flow, &r.Entity, &r.At, &r.CutAt, &r.Deletable)
		} else {
			err = row.Scan(&r.ID, &r.Source, &r.At, &r.Deletable)
			r.CutAt = r.At
		}
		out = append(out, r)
		return err
	})
	return out, err
}

func (a txn) PruneEffectScan(ctx context.Context, p *store.PruneScanParams) ([]store.PruneRow, error) {
	return a.pruneScan(ctx, pruneEffectScan, p, true, textList(p.States))
}

func (a txn) PruneEventScan(ctx context.Context, p *store.PruneScanParams) ([]store.PruneRow, error) {
	return a.pruneScan(ctx, pruneEventScan, p, false, textList(p.Dispositions))
}

func (a txn) PruneAuditScan(ctx context.Context, p *store.PruneScanParams) ([]store.PruneRow, error) {
	return a.pruneScan(ctx, pruneAuditScan, p, false, textList(p.Dispositions), textList(p.States))
}

// PruneEffectsHold locks the candidates' entities and rows and asks
// again, closing this race: an apply's insert reads its snapshot (the
// effect is there, no tombstone), pruning then deletes the effect and
// commits, and the insert's ON CONFLICT, which waited for the deleting
// transaction, finds the key free and inserts a second effect under it.
// Every effect a flow inserts carries its (flow, entity) in the episode
// key and is inserted by an apply of that entity, and an apply holds the
// entity's row lock from its first statement (ReadGroup's fencing lock)
// to its commit. Pruning takes the same row lock before it deletes:
// either the apply committed first (pruning then deletes the row the
// apply found existing) or pruning did (the apply's fence waited, and its
// insert's snapshot, taken later, sees the tombstone). Published
// messages' effects have no entity row and no apply that inserts them:
// their keys hold a fresh message id.
func (a txn) PruneEffectsHold(ctx context.Context, p *store.PruneHoldParams) ([]int64, error) {
	var flows, entities []string
	for _, c := range p.Candidates {
		if c.Flow != p.NoEntityFlow {
			flows, entities = append(flows, c.Flow), append(entities, c.Entity)
		}
	}
	locked := map[[2]string]bool{}
	if len(flows) > 0 {
		err := a.each(ctx, "lock entities", pruneLockEntities, []any{flows, entities}, func(row pgx.Row) error {
			var k [2]string
			err := row.Scan(&k[0], &k[1])
			locked[k] = true
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	ids := make([]int64, 0, len(p.Candidates))
	cuts := map[int64]time.Time{}
	for _, c := range p.Candidates {
		if c.Flow == p.NoEntityFlow || locked[[2]string{c.Flow, c.Entity}] {
			ids = append(ids, c.ID)
			cuts[c.ID] = c.Cut
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	var lockedIDs []int64
	if err := a.each(ctx, "lock effects", pruneLockEffects, []any{ids}, func(row pgx.Row) error {
		var id int64
		err := row.Scan(&id)
		lockedIDs = append(lockedIDs, id)
		return err
	}); err != nil || len(lockedIDs) == 0 {
		return nil, err
	}
	lockedCuts := make([]time.Time, len(lockedIDs))
	for i, id := range lockedIDs {
		lockedCuts[i] = cuts[id]
	}
	var del []int64
	err := a.each(ctx, "recheck effects", pruneRecheckEffects, []any{lockedIDs, lockedCuts, textList(p.States)}, func(row pgx.Row) error {
		var id int64
		err := row.Scan(&id)
		del = append(del, id)
		return err
	})
	return del, err
}

// deleted queues a delete and fills n with the rows it deleted when it is
// sent.
func (a txn) deleted(label, q string, n *int64, args ...any) {
	a.t.execCount(label, q, n, args...)
}

func (a txn) PruneEffects(ctx context.Context, ids []int64, now time.Time) (attempts, effects int64, err error) {
	a.deleted("prune attempts", pruneAttempts, &attempts, ids)
	a.t.exec("write tombstones", pruneTombstones, ids, now)
	a.deleted("prune effects", pruneEffects, &effects, ids)
	return attempts, effects, dbErrors.Classify(a.t.flush(ctx))
}

func (a txn) PruneEvents(ctx context.Context, pks []int64) (*store.PrunedEvents, error) {
	n := &store.PrunedEvents{}
	a.deleted("prune deliveries", pruneDeliveries, &n.Deliveries, pks)
	a.deleted("prune work", pruneWork, &n.Work, pks)
	a.deleted("prune loop visits", pruneLoopVisits, &n.LoopVisits, pks)
	a.deleted("prune events", pruneEvents, &n.Events, pks)
	if err := a.t.flush(ctx); err != nil {
		return nil, dbErrors.Classify(err)
	}
	return n, nil
}

func (a txn) PruneAudit(ctx context.Context, ids []int64) (int64, error) {
	var n int64
	a.deleted("prune audit", pruneAudit, &n, ids)
	return n, dbErrors.Classify(a.t.flush(ctx))
}

// EffectTombstoneGet reads the tombstone of an episode key.
func (s *Store) EffectTombstoneGet(ctx context.Context, episodeKey string) (*store.EffectTombstone, error) {
	var t store.EffectTombstone
	var request string
	err := s.pool.QueryRow(ctx, `SELECT episode_key, flow, entity, effect, destination, state, request::text, created_at, deleted_at
		FROM effect_tombstones WHERE episode_key = $1`, episodeKey).
		Scan(&t.EpisodeKey, &t.Flow, &t.Entity, &t.Effect, &t.Destination, &t.State, &request, &t.CreatedAt, &t.DeletedAt)
	if err != nil {
		return store.NoRow[store.EffectTombstone](err, pgx.ErrNoRows, "get tombstone %s", episodeKey)
	}
	t.Request = []byte(request)
	t.CreatedAt, t.DeletedAt = t.CreatedAt.UTC(), t.DeletedAt.UTC()
	return &t, nil
}
