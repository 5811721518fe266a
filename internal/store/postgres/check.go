package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/store"
)

// The statements of hookledger check (store.CheckTx). They run in one
// REPEATABLE READ READ ONLY transaction: every query sees the same
// snapshot, and the check takes no row lock, so writers never wait for
// it.

// each runs q and hands every row to scan.
func (a txn) each(ctx context.Context, label, q string, args []any, scan func(row pgx.Row) error) error {
	return a.t.query(ctx, label, q, args, func(rows pgx.Rows) error {
		for rows.Next() {
			if err := scan(rows); err != nil {
				return err
			}
		}
		return nil
	})
}

// CheckEventsStuck: an event waits for the router queued or, as an
// earlier version left it, with routed = false.
func (a txn) CheckEventsStuck(ctx context.Context, visit func(*store.StuckEvent) error) error {
	return a.each(ctx, "stuck events", `SELECT e.source, e.event_id, e.received_at, (SELECT count(*) FROM work w WHERE w.event_pk = e.pk)
		FROM events e WHERE e.disposition = 'accepted' AND e.routed
		AND NOT EXISTS (SELECT 1 FROM route_queue q WHERE q.pk = e.pk)
		AND NOT EXISTS (SELECT 1 FROM work w WHERE w.event_pk = e.pk AND w.done_at IS NULL) ORDER BY e.pk`, nil,
		func(row pgx.Row) error {
			var e store.StuckEvent
			if err := row.Scan(&e.Source, &e.EventID, &e.ReceivedAt, &e.Work); err != nil {
				return err
			}
			return visit(&e)
		})
}

func (a txn) CheckKeysShared(ctx context.Context, visit func(*store.SharedKey) error) error {
	return a.each(ctx, "shared keys", `SELECT episode_key, count(*), string_agg(id::text, ', ' ORDER BY id) FROM effects
		GROUP BY episode_key HAVING count(*) > 1 ORDER BY min(id)`, nil, func(row pgx.Row) error {
		var k store.SharedKey
		if err := row.Scan(&k.Key, &k.Effects, &k.IDs); err != nil {
			return err
		}
		return visit(&k)
	})
}

func (a txn) CheckKeysTombstoned(ctx context.Context, visit func(*store.TombstonedKey) error) error {
	return a.each(ctx, "tombstoned keys", `SELECT f.episode_key, f.id, t.deleted_at
		FROM effect_tombstones t JOIN effects f USING (episode_key) ORDER BY f.id`, nil, func(row pgx.Row) error {
		var k store.TombstonedKey
		if err := row.Scan(&k.Key, &k.EffectID, &k.PrunedAt); err != nil {
			return err
		}
		return visit(&k)
	})
}

// CheckDoneUnproven: action $1, mark $2.
func (a txn) CheckDoneUnproven(ctx context.Context, p *store.DoneEvidenceParams, visit func(*store.UnprovenDone) error) error {
	return a.each(ctx, "unproven done", `SELECT f.id, f.episode_key, f.updated_at, f.attempts,
			(SELECT count(*) FROM effect_attempts a WHERE a.effect_id = f.id)
		FROM effects f WHERE f.state = 'done'
		AND NOT EXISTS (SELECT 1 FROM effect_attempts a WHERE a.effect_id = f.id AND a.class = '')
		AND NOT EXISTS (SELECT 1 FROM audit au JOIN events ev ON ev.pk = f.source_event_pk
			WHERE au.entity = f.entity AND au.action = $1 AND au.source = ev.source AND au.event_id = ev.event_id
			AND left(au.detail, length(f.episode_key) + 2) = f.episode_key || ': ' AND strpos(au.detail, $2) > 0)
		ORDER BY f.id`, []any{p.Action, p.Mark}, func(row pgx.Row) error {
		var f store.UnprovenDone
		if err := row.Scan(&f.ID, &f.Key, &f.UpdatedAt, &f.Attempts, &f.Rows); err != nil {
			return err
		}
		return visit(&f)
	})
}

// CheckProjections reads each entity's applied work items once, in a
// LATERAL aggregate (through work_entity), for the three questions.
func (a txn) CheckProjections(ctx context.Context, visit func(*store.ProjectionCheck) error) error {
	return a.each(ctx, "projections", `SELECT en.flow, en.entity, en.version, en.version_sort, coalesce(en.applied_event_pk, 0),
			coalesce(w.top, ''), w.recorded, w.matched
		FROM entities en CROSS JOIN LATERAL (
			SELECT max(version_sort) FILTER (WHERE version_sort <> '') AS top,
				coalesce(bool_or(event_pk = en.applied_event_pk AND version_sort <> ''), false) AS recorded,
				coalesce(bool_or(event_pk = en.applied_event_pk AND version_sort = en.version_sort), false) AS matched
			FROM work WHERE entity = en.entity AND flow = en.flow AND disposition = 'applied') w
		WHERE (w.recorded AND NOT w.matched) OR (en.version_sort !~ '^[0-9a-f]{64}$' AND w.top > en.version_sort)
		ORDER BY en.flow, en.entity`, nil, func(row pgx.Row) error {
		var pr store.ProjectionCheck
		if err := row.Scan(&pr.Flow, &pr.Entity, &pr.Version, &pr.Sort, &pr.EventPK, &pr.Top, &pr.Recorded, &pr.Matched); err != nil {
			return err
		}
		return visit(&pr)
	})
}

func (a txn) CheckEffectsOrphaned(ctx context.Context, visit func(*store.OrphanEffect) error) error {
	return a.each(ctx, "orphaned effects", `SELECT f.id, f.episode_key, f.source_event_pk FROM effects f
		LEFT JOIN events e ON e.pk = f.source_event_pk WHERE e.pk IS NULL ORDER BY f.id`, nil, func(row pgx.Row) error {
		var f store.OrphanEffect
		if err := row.Scan(&f.ID, &f.Key, &f.EventPK); err != nil {
			return err
		}
		return visit(&f)
	})
}

func (a txn) CheckEffectStates(ctx context.Context, states []store.EffectState, visit func(*store.StrayState) error) error {
	names := make([]string, len(states))
	for i, st := range states {
		names[i] = string(st)
	}
	return a.each(ctx, "effect states", `SELECT id, episode_key, state FROM effects WHERE state <> ALL($1::text[]) ORDER BY id`,
		[]any{names}, func(row pgx.Row) error {
			var f store.StrayState
			if err := row.Scan(&f.ID, &f.Key, &f.State); err != nil {
				return err
			}
			return visit(&f)
		})
}
