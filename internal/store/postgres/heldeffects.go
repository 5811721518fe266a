package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/hookledger/hookledger/internal/store"
)

// heldEffect is an InsertEffect waiting to be sent with the others of its
// group. Each effect insert was a statement of its own, the most costly
// one of a settle (a CTE over three tables and eleven index entries), and
// a group of sixty entities sent sixty of them.
type heldEffect struct {
	key, flow, entity, version, versionSort, effect, destination, request string
	eventPK                                                               int64
	causationID                                                           string
	hop, compensates                                                      int64
	at, deadline, warn                                                    time.Time
	onDeadline                                                            string
	out                                                                   *store.InsertOutcome
}

// insertEffect holds e. An insert whose episode key is already held goes
// after the held ones, in a statement of its own: one statement could not
// tell which of two rows with one key was inserted.
func (h *held) insertEffect(t *pipeTx, e heldEffect) {
	for _, o := range h.effects {
		if o.key == e.key {
			h.queueEffects(t)
			break
		}
	}
	h.effects = append(h.effects, e)
}

// touchEffects sends the held inserts before a statement on the effects of
// flow/entity, if one of them is that entity's: the statement must see
// them (a later event's supersede step reads the earlier one's effect).
func (h *held) touchEffects(t *pipeTx, flow, entity string) {
	for _, o := range h.effects {
		if o.flow == flow && o.entity == entity {
			h.queueEffects(t)
			return
		}
	}
}

// queueEffects queues the held inserts: the single-row statement for one,
// one statement from unnest for several.
func (h *held) queueEffects(t *pipeTx) {
	es := h.effects
	h.effects = nil
	switch len(es) {
	case 0:
		return
	case 1:
		e := es[0]
		t.later("insert effect", insertEffectSQL,
			[]any{e.key, e.flow, e.entity, e.version, e.versionSort, e.effect, e.destination, e.request,
				e.eventPK, e.causationID, e.hop, e.at, e.compensates, nullTime(e.deadline), nullTime(e.warn), e.onDeadline},
			func(rows pgx.Rows) error {
				if !rows.Next() {
					return errors.New("no insert result")
				}
				return scanInsertOutcome(t, rows, e)
			})
		return
	}
	n := len(es)
	keys, flows, entities, versions, sorts, names, dests, requests, causes, onDeadline := make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n)
	eventPKs, hops, comps := make([]int64, n), make([]int64, n), make([]int64, n)
	at := make([]time.Time, n)
	deadlines, warns := make([]pgtype.Timestamptz, n), make([]pgtype.Timestamptz, n)
	for i, e := range es {
		keys[i], flows[i], entities[i], versions[i], sorts[i], names[i], dests[i], requests[i] =
			e.key, e.flow, e.entity, e.version, e.versionSort, e.effect, e.destination, e.request
		eventPKs[i], causes[i], hops[i], at[i], comps[i], onDeadline[i] = e.eventPK, e.causationID, e.hop, e.at, e.compensates, e.onDeadline
		deadlines[i] = pgtype.Timestamptz{Time: e.deadline, Valid: !e.deadline.IsZero()}
		warns[i] = pgtype.Timestamptz{Time: e.warn, Valid: !e.warn.IsZero()}
	}
	t.later("insert effects", insertEffectsSQL,
		[]any{keys, flows, entities, versions, sorts, names, dests, requests, eventPKs, causes, hops, at, comps, deadlines, warns, onDeadline},
		func(rows pgx.Rows) error {
			i := 0
			for ; rows.Next(); i++ {
				if i >= n {
					return errors.New("more insert results than effects")
				}
				if err := scanInsertOutcome(t, rows, es[i]); err != nil {
					return err
				}
			}
			if rows.Err() == nil && i != n {
				return errors.New("fewer insert results than effects")
			}
			return nil
		})
}

// scanInsertOutcome reads one row of either insert statement into e.out:
// inserted, and the request already under the key. A conflicting row
// committed by another transaction after the statement's snapshot is read
// again on its own.
func scanInsertOutcome(t *pipeTx, rows pgx.Rows, e heldEffect) error {
	var existing *string
	if err := rows.Scan(&e.out.Inserted, &existing); err != nil {
		return err
	}
	if existing != nil {
		e.out.Existing = []byte(*existing)
	}
	if !e.out.Inserted && existing == nil {
		t.then = append(t.then, func(ctx context.Context) error { return readExisting(ctx, t, e.key, e.out) })
	}
	return nil
}

// insertEffectSQL inserts one effect and answers both questions in one
// statement: the CTE inserts, and the outer select reads the row that was
// there before (the statement's snapshot cannot see its own insert). A key
// held by a tombstone (a pruned effect) counts as existing: the insert's
// WHERE skips it and the tombstone's request is the one returned.
const insertEffectSQL = `WITH t AS (SELECT request::text AS request FROM effect_tombstones WHERE episode_key = $1),
	ins AS (INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination,
		state, request, source_event_pk, causation_id, hop, created_at, updated_at,
		compensates, deadline_at, deadline_warn_at, on_deadline)
		SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text, 'approved', $8::jsonb, $9::bigint,
			$10::text, $11::bigint, $12::timestamptz, $12::timestamptz, $13::bigint, $14::timestamptz, $15::timestamptz, $16::text
		WHERE NOT EXISTS (SELECT 1 FROM t)
		ON CONFLICT (episode_key) DO NOTHING RETURNING 1)
	SELECT EXISTS (SELECT 1 FROM ins),
		coalesce((SELECT request FROM t), (SELECT request::text FROM effects WHERE episode_key = $1))`

// insertEffectsSQL is insertEffectSQL for several effects with distinct
// keys (arrays $1-$16, one element per effect), answering in their order.
// The tombstone and the existing row are read by scalar subqueries, one
// index lookup per key: a join could be planned as a scan of either table.
const insertEffectsSQL = `WITH u AS MATERIALIZED (
		SELECT u.*, (SELECT request::text FROM effect_tombstones t WHERE t.episode_key = u.episode_key) AS tomb
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::jsonb[],
			$9::bigint[], $10::text[], $11::bigint[], $12::timestamptz[], $13::bigint[], $14::timestamptz[], $15::timestamptz[], $16::text[])
			WITH ORDINALITY AS u(episode_key, flow, entity, version, version_sort, effect, destination, request,
				source_event_pk, causation_id, hop, at, compensates, deadline_at, deadline_warn_at, on_deadline, n)),
	ins AS (INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination,
		state, request, source_event_pk, causation_id, hop, created_at, updated_at,
		compensates, deadline_at, deadline_warn_at, on_deadline)
		SELECT episode_key, flow, entity, version, version_sort, effect, destination, 'approved', request,
			source_event_pk, causation_id, hop, at, at, compensates, deadline_at, deadline_warn_at, on_deadline
		FROM u WHERE tomb IS NULL ORDER BY n
		ON CONFLICT (episode_key) DO NOTHING RETURNING episode_key)
	SELECT EXISTS (SELECT 1 FROM ins WHERE ins.episode_key = u.episode_key),
		coalesce(u.tomb, (SELECT request::text FROM effects f WHERE f.episode_key = u.episode_key))
	FROM u ORDER BY u.n`

// readExisting reads the request under key for an insert whose conflict
// was committed by another transaction after the insert's snapshot.
func readExisting(ctx context.Context, t *pipeTx, key string, out *store.InsertOutcome) error {
	found := false
	err := t.query(ctx, "read existing effect", `SELECT request::text FROM effects WHERE episode_key = $1
		UNION ALL SELECT request::text FROM effect_tombstones WHERE episode_key = $1 LIMIT 1`,
		[]any{key}, func(rows pgx.Rows) error {
			if !rows.Next() {
				return nil
			}
			var existing string
			if err := rows.Scan(&existing); err != nil {
				return err
			}
			found, out.Existing = true, []byte(existing)
			return nil
		})
	if err == nil && !found {
		err = errors.New("the conflicting effect is not readable")
	}
	if err != nil {
		return fmt.Errorf("insert effect %s: %w", key, err)
	}
	return nil
}
