package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/store"
)

// InvariantCheck audits the store in one REPEATABLE READ READ ONLY
// transaction: every query sees the same snapshot, and the check takes no
// row lock, so writers never wait for it.
func (s *Store) InvariantCheck(ctx context.Context, p *store.InvariantCheckParams) (*store.InvariantCheckResult, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("check invariants: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read only
	limit := store.ClampLimit(p.Limit)
	res := &store.InvariantCheckResult{Counts: map[string]int64{}}
	for _, c := range invariantChecks() {
		rows, err := tx.Query(ctx, c.query, c.args...)
		if err != nil {
			return nil, fmt.Errorf("check %s: %w", c.name, err)
		}
		var n int64
		for rows.Next() {
			n++
			if n > int64(limit) {
				continue
			}
			subject, detail, err := c.finding(rows)
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("check %s: %w", c.name, err)
			}
			res.Findings = append(res.Findings, &store.Finding{Invariant: c.name, Subject: subject, Detail: detail})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("check %s: %w", c.name, err)
		}
		res.Counts[c.name] += n
	}
	return res, nil
}

// invariantCheck is one invariant's query: every row is one violation.
type invariantCheck struct {
	name    string
	query   string
	args    []any
	finding func(row pgx.Row) (subject, detail string, err error)
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// reconciledDone matches the audit row of a settle to done that a
// reconciliation decided: the detail starts with the effect's episode key
// and carries the settle's reason, "reconciled: ...".
const reconciledDone = `SELECT 1 FROM audit au JOIN events ev ON ev.pk = f.source_event_pk
	WHERE au.entity = f.entity AND au.action = 'effect_done' AND au.source = ev.source AND au.event_id = ev.event_id
	AND left(au.detail, length(f.episode_key) + 2) = f.episode_key || ': ' AND strpos(au.detail, ': reconciled') > 0`

func invariantChecks() []invariantCheck {
	var states []string
	for _, st := range store.EffectStates() {
		states = append(states, string(st))
	}
	return []invariantCheck{{
		// Visibly pending: not routed yet (queued or, as an earlier
		// version left it, routed = false: the router will take it), or
		// with a work item still pending. Routing and settling the last
		// work item decide the disposition in the transaction that does
		// them, so an accepted event with neither is stuck for good.
		name: store.InvariantEventPending,
		query: `SELECT e.source, e.event_id, e.received_at, (SELECT count(*) FROM work w WHERE w.event_pk = e.pk)
			FROM events e WHERE e.disposition = 'accepted' AND e.routed
			AND NOT EXISTS (SELECT 1 FROM route_queue q WHERE q.pk = e.pk)
			AND NOT EXISTS (SELECT 1 FROM work w WHERE w.event_pk = e.pk AND w.done_at IS NULL) ORDER BY e.pk`,
		finding: func(row pgx.Row) (string, string, error) {
			var src, id string
			var received time.Time
			var work int64
			if err := row.Scan(&src, &id, &received, &work); err != nil {
				return "", "", err
			}
			return "event " + src + "/" + id, fmt.Sprintf("accepted (received %s) and routed, but none of its %d work items is pending: no process will settle it",
				stamp(received), work), nil
		},
	}, {
		name: store.InvariantEpisodeKeyOnce,
		query: `SELECT episode_key, count(*), string_agg(id::text, ', ' ORDER BY id) FROM effects
			GROUP BY episode_key HAVING count(*) > 1 ORDER BY min(id)`,
		finding: func(row pgx.Row) (string, string, error) {
			var key, ids string
			var n int64
			if err := row.Scan(&key, &n, &ids); err != nil {
				return "", "", err
			}
			return "episode key " + key, fmt.Sprintf("held by %d effects (ids %s): the effect can happen more than once", n, ids), nil
		},
	}, {
		// A pruned effect's tombstone holds its key; a live effect beside
		// it was made after the prune, which the ledger's insert forbids.
		name: store.InvariantEpisodeKeyOnce,
		query: `SELECT f.episode_key, f.id, t.deleted_at FROM effects f JOIN effect_tombstones t ON t.episode_key = f.episode_key
			ORDER BY f.id`,
		finding: func(row pgx.Row) (string, string, error) {
			var key string
			var id int64
			var pruned time.Time
			if err := row.Scan(&key, &id, &pruned); err != nil {
				return "", "", err
			}
			return "episode key " + key, fmt.Sprintf("held by effect %d and by the tombstone of an effect pruned %s: the effect can happen more than once", id, stamp(pruned)), nil
		},
	}, {
		// Evidence that a done effect was done: an attempts row of class
		// "" is a call the worker classified as success (a 2xx, or an
		// answer a classification rule calls success) or a lookup that got
		// an answer (reconcile); the worker settles done on nothing else.
		// One legitimate path leaves no such row: a lookup made in the
		// claim of the call whose unknown outcome it settles is not
		// recorded as a row of its own (the call's row, class
		// unknown_outcome, is), and a reconciliation decided from stored
		// evidence records no attempt at all. Their evidence is the settle's
		// audit row, effect_done with the reason "reconciled: ...".
		name: store.InvariantDoneEvidence,
		query: `SELECT f.id, f.episode_key, f.updated_at, f.attempts, (SELECT count(*) FROM effect_attempts a WHERE a.effect_id = f.id)
			FROM effects f WHERE f.state = 'done'
			AND NOT EXISTS (SELECT 1 FROM effect_attempts a WHERE a.effect_id = f.id AND a.class = '')
			AND NOT EXISTS (` + reconciledDone + `) ORDER BY f.id`,
		finding: func(row pgx.Row) (string, string, error) {
			var id, attempts, rows int64
			var key string
			var updated time.Time
			if err := row.Scan(&id, &key, &updated, &attempts, &rows); err != nil {
				return "", "", err
			}
			return fmt.Sprintf("effect %d", id), fmt.Sprintf("%s: done since %s, but none of its %d attempts rows succeeded and no reconciliation settled it (attempts counted: %d)",
				key, stamp(updated), rows, attempts), nil
		},
	}, {
		// A projection holds the version its applied event's work item
		// applied, and, when versions are ordered, no work item of the
		// entity applied a newer one. Hash versions (64 hex digits, from
		// refetch with version.hash) are compared for equality only: the
		// newest of them is the last applied, which the applied event
		// names. Work items from before migration 0007 record no version
		// and are left out.
		name: store.InvariantProjectionVersion,
		query: `SELECT flow, entity, version, sort, ev, coalesce(top, ''), recorded, matched FROM (
			SELECT en.flow, en.entity, en.version, en.version_sort AS sort, coalesce(en.applied_event_pk, 0) AS ev,
				(SELECT max(w.version_sort) FROM work w WHERE w.entity = en.entity AND w.flow = en.flow
					AND w.disposition = 'applied' AND w.version_sort <> '') AS top,
				EXISTS (SELECT 1 FROM work w WHERE w.entity = en.entity AND w.flow = en.flow AND w.event_pk = en.applied_event_pk
					AND w.disposition = 'applied' AND w.version_sort <> '') AS recorded,
				EXISTS (SELECT 1 FROM work w WHERE w.entity = en.entity AND w.flow = en.flow AND w.event_pk = en.applied_event_pk
					AND w.disposition = 'applied' AND w.version_sort = en.version_sort) AS matched,
				(en.version_sort ~ '^[0-9a-f]{64}$') AS hashed
			FROM entities en) x
			WHERE (recorded AND NOT matched) OR (NOT hashed AND top > sort) ORDER BY flow, entity`,
		finding: func(row pgx.Row) (string, string, error) {
			var flow, entity, version, sort, top string
			var ev int64
			var recorded, matched bool
			if err := row.Scan(&flow, &entity, &version, &sort, &ev, &top, &recorded, &matched); err != nil {
				return "", "", err
			}
			if recorded && !matched {
				return "entity " + flow + "/" + entity, fmt.Sprintf("projection at version %q (sort %q), but the work item that applied its event (pk %d) applied sort %q",
					version, sort, ev, top), nil
			}
			return "entity " + flow + "/" + entity, fmt.Sprintf("projection at version %q (sort %q), but a newer version was applied to it: applied sort %q",
				version, sort, top), nil
		},
	}, {
		name: store.InvariantEffectEvent,
		query: `SELECT f.id, f.episode_key, f.source_event_pk FROM effects f
			WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.pk = f.source_event_pk) ORDER BY f.id`,
		finding: func(row pgx.Row) (string, string, error) {
			var id, pk int64
			var key string
			if err := row.Scan(&id, &key, &pk); err != nil {
				return "", "", err
			}
			return fmt.Sprintf("effect %d", id), fmt.Sprintf("%s: its source event (pk %d) does not exist", key, pk), nil
		},
	}, {
		name:  store.InvariantEffectState,
		query: `SELECT id, episode_key, state FROM effects WHERE state <> ALL($1::text[]) ORDER BY id`,
		args:  []any{states},
		finding: func(row pgx.Row) (string, string, error) {
			var id int64
			var key, state string
			if err := row.Scan(&id, &key, &state); err != nil {
				return "", "", err
			}
			return fmt.Sprintf("effect %d", id), fmt.Sprintf("%s: state %q is not one of the effect states", key, state), nil
		},
	}}
}
