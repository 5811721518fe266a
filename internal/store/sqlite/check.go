package sqlite

import (
	"context"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// The statements of hookledger check (store.CheckTx). They run in one
// read transaction of a reader connection: WAL gives it a snapshot of the
// last commit, and it never takes the write lock.

// each runs q and hands every row to scan.
func (a txn) each(ctx context.Context, q string, args []any, scan func(sc scanner) error) error {
	rows, err := a.tx.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func fromUnix(us int64) time.Time { return time.UnixMicro(us).UTC() }

func (a txn) CheckEventsStuck(ctx context.Context, visit func(*store.StuckEvent) error) error {
	return a.each(ctx, `SELECT e.source, e.event_id, e.received_at, (SELECT count(*) FROM work w WHERE w.event_pk = e.pk)
		FROM events e WHERE e.disposition = 'accepted' AND e.routed <> 0
		AND NOT EXISTS (SELECT 1 FROM work w WHERE w.event_pk = e.pk AND w.done_at IS NULL) ORDER BY e.pk`, nil,
		func(sc scanner) error {
			var e store.StuckEvent
			var received int64
			if err := sc.Scan(&e.Source, &e.EventID, &received, &e.Work); err != nil {
				return err
			}
			e.ReceivedAt = fromUnix(received)
			return visit(&e)
		})
}

func (a txn) CheckKeysShared(ctx context.Context, visit func(*store.SharedKey) error) error {
	return a.each(ctx, `SELECT episode_key, count(*), group_concat(id, ', ') FROM (SELECT episode_key, id FROM effects ORDER BY episode_key, id)
		GROUP BY episode_key HAVING count(*) > 1 ORDER BY min(id)`, nil, func(sc scanner) error {
		var k store.SharedKey
		if err := sc.Scan(&k.Key, &k.Effects, &k.IDs); err != nil {
			return err
		}
		return visit(&k)
	})
}

func (a txn) CheckKeysTombstoned(ctx context.Context, visit func(*store.TombstonedKey) error) error {
	return a.each(ctx, `SELECT f.episode_key, f.id, t.deleted_at FROM effects f JOIN effect_tombstones t ON t.episode_key = f.episode_key
		ORDER BY f.id`, nil, func(sc scanner) error {
		var k store.TombstonedKey
		var pruned int64
		if err := sc.Scan(&k.Key, &k.EffectID, &pruned); err != nil {
			return err
		}
		k.PrunedAt = fromUnix(pruned)
		return visit(&k)
	})
}

// doneEvidenceSQL is CheckDoneUnproven's query: action ?1, mark ?2. The
// audit rows are reached through audit_e (entity, ...).
const doneEvidenceSQL = `SELECT f.id, f.episode_key, f.updated_at, f.attempts, (SELECT count(*) FROM effect_attempts a WHERE a.effect_id = f.id)
	FROM effects f WHERE f.state = 'done'
	AND NOT EXISTS (SELECT 1 FROM effect_attempts a WHERE a.effect_id = f.id AND a.class = '')
	AND NOT EXISTS (SELECT 1 FROM audit au JOIN events ev ON ev.pk = f.source_event_pk
		WHERE au.entity = f.entity AND au.action = ?1 AND au.source = ev.source AND au.event_id = ev.event_id
		AND substr(au.detail, 1, length(f.episode_key) + 2) = f.episode_key || ': ' AND instr(au.detail, ?2) > 0)
	ORDER BY f.id`

func (a txn) CheckDoneUnproven(ctx context.Context, p *store.DoneEvidenceParams, visit func(*store.UnprovenDone) error) error {
	return a.each(ctx, doneEvidenceSQL, []any{p.Action, p.Mark}, func(sc scanner) error {
		var f store.UnprovenDone
		var updated int64
		if err := sc.Scan(&f.ID, &f.Key, &updated, &f.Attempts, &f.Rows); err != nil {
			return err
		}
		f.UpdatedAt = fromUnix(updated)
		return visit(&f)
	})
}

func (a txn) CheckProjections(ctx context.Context, visit func(*store.ProjectionCheck) error) error {
	return a.each(ctx, `SELECT flow, entity, version, sort, ev, coalesce(top, ''), recorded, matched FROM (
			SELECT en.flow, en.entity, en.version, en.version_sort AS sort, coalesce(en.applied_event_pk, 0) AS ev,
				(SELECT max(w.version_sort) FROM work w WHERE w.entity = en.entity AND w.flow = en.flow
					AND w.disposition = 'applied' AND w.version_sort <> '') AS top,
				EXISTS (SELECT 1 FROM work w WHERE w.entity = en.entity AND w.flow = en.flow AND w.event_pk = en.applied_event_pk
					AND w.disposition = 'applied' AND w.version_sort <> '') AS recorded,
				EXISTS (SELECT 1 FROM work w WHERE w.entity = en.entity AND w.flow = en.flow AND w.event_pk = en.applied_event_pk
					AND w.disposition = 'applied' AND w.version_sort = en.version_sort) AS matched,
				(length(en.version_sort) = 64 AND en.version_sort NOT GLOB '*[^0-9a-f]*') AS hashed
			FROM entities en) x
			WHERE (recorded AND NOT matched) OR (NOT hashed AND top > sort) ORDER BY flow, entity`, nil,
		func(sc scanner) error {
			var pr store.ProjectionCheck
			if err := sc.Scan(&pr.Flow, &pr.Entity, &pr.Version, &pr.Sort, &pr.EventPK, &pr.Top, &pr.Recorded, &pr.Matched); err != nil {
				return err
			}
			return visit(&pr)
		})
}

func (a txn) CheckEffectsOrphaned(ctx context.Context, visit func(*store.OrphanEffect) error) error {
	return a.each(ctx, `SELECT f.id, f.episode_key, f.source_event_pk FROM effects f
		WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.pk = f.source_event_pk) ORDER BY f.id`, nil,
		func(sc scanner) error {
			var f store.OrphanEffect
			if err := sc.Scan(&f.ID, &f.Key, &f.EventPK); err != nil {
				return err
			}
			return visit(&f)
		})
}

func (a txn) CheckEffectStates(ctx context.Context, states []store.EffectState, visit func(*store.StrayState) error) error {
	return a.each(ctx, `SELECT id, episode_key, state FROM effects WHERE state NOT IN (?`+strings.Repeat(", ?", len(states)-1)+`)
		ORDER BY id`, effectStates(states), func(sc scanner) error {
		var f store.StrayState
		if err := sc.Scan(&f.ID, &f.Key, &f.State); err != nil {
			return err
		}
		return visit(&f)
	})
}
