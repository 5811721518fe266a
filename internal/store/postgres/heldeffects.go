package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	claim                                                                 *store.InsertClaim
	out                                                                   *store.InsertOutcome
}

// heldSupersede is a SupersedeOlder waiting to be sent with the others of
// its group: an UPDATE that finds nothing to supersede (the common case)
// still opens every index of effects, and cost as much as an insert.
type heldSupersede struct {
	flow, entity, effect, versionSort string
	ordered                           bool
	at                                time.Time
	out                               *[]store.SupersededEffect
}

// supersedeOlder holds s. What is held goes first if it holds an insert
// or a supersede step of the same entity and effect name: s must see the
// insert (an earlier event's effect in the same page), and one statement
// could not tell two steps on the same rows apart. Other entities' and
// names' rows are not the ones s reads.
func (h *held) supersedeOlder(t *pipeTx, s heldSupersede) {
	same := func(flow, entity, effect string) bool {
		return flow == s.flow && entity == s.entity && effect == s.effect
	}
	for _, o := range h.effects {
		if same(o.flow, o.entity, o.effect) {
			h.queueEffects(t)
			break
		}
	}
	for _, o := range h.supersedes {
		if same(o.flow, o.entity, o.effect) {
			h.queueEffects(t)
			break
		}
	}
	h.supersedes = append(h.supersedes, s)
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

// queueEffects queues the held supersede steps, then the held inserts:
// each kind as its single-row statement for one, one statement from
// unnest for several. Supersedes go first: a page's supersede step runs
// before its own inserts, and one of another entity touches other rows.
func (h *held) queueEffects(t *pipeTx) {
	h.queueSupersedes(t)
	es := h.effects
	h.effects = nil
	switch {
	case len(es) == 0:
		return
	case slices.ContainsFunc(es, func(e heldEffect) bool { return e.claim != nil }):
		queueClaimedEffects(t, es)
		return
	case len(es) == 1:
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
	t.later("insert effects", insertEffectsSQL, effectArrays(es),
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

// effectArrays is the arguments $1-$16 of insertEffectsSQL for es: one
// array per column, one element per effect.
func effectArrays(es []heldEffect) []any {
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
	return []any{keys, flows, entities, versions, sorts, names, dests, requests, eventPKs, causes, hops, at, comps, deadlines, warns, onDeadline}
}

// queueSupersedes queues the held supersede steps.
func (h *held) queueSupersedes(t *pipeTx) {
	ss := h.supersedes
	h.supersedes = nil
	switch len(ss) {
	case 0:
		return
	case 1:
		s := ss[0]
		t.later("supersede "+s.effect, supersedeOlderSQL(s.ordered), []any{s.at, s.flow, s.entity, s.effect, s.versionSort},
			func(rows pgx.Rows) error {
				for rows.Next() {
					var e store.SupersededEffect
					if err := rows.Scan(&e.EpisodeKey, &e.Version); err != nil {
						return err
					}
					*s.out = append(*s.out, e)
				}
				return nil
			})
		return
	}
	n := len(ss)
	flows, entities, names, sorts := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	ordered, at, nums := make([]bool, n), make([]time.Time, n), make([]int32, n)
	for i, s := range ss {
		flows[i], entities[i], names[i], sorts[i], ordered[i], at[i], nums[i] = s.flow, s.entity, s.effect, s.versionSort, s.ordered, s.at, int32(i)
	}
	t.later("supersede older effects", supersedeOlderManySQL,
		[]any{flows, entities, names, sorts, ordered, at, nums},
		func(rows pgx.Rows) error {
			for rows.Next() {
				var i int32
				var e store.SupersededEffect
				if err := rows.Scan(&i, &e.EpisodeKey, &e.Version); err != nil {
					return err
				}
				if i < 0 || int(i) >= n {
					return fmt.Errorf("supersede result for step %d of %d", i, n)
				}
				*ss[i].out = append(*ss[i].out, e)
			}
			return nil
		})
}

// supersedeOlderManySQL is supersedeOlderSQL for several steps (arrays
// $1-$7, one element per step, each with its own entity and effect name).
// A row names the step that superseded it. Each step's candidates are
// found by a lateral lookup on effects_open's key, kept a subquery of its
// own (OFFSET 0) so the planner cannot fold it into a join that reads
// every open effect of the flow; the update then finds them by primary
// key. It checks the state again on the row it locks: an effect a
// delivery worker claimed meanwhile is left alone. That check is wrapped
// in a CASE so that it does not match effects_open's predicate: the
// planner, knowing nothing of the tables, would otherwise walk all of
// that index instead of looking the ids up. Usually a group has nothing
// to supersede (each entity's first effect), and EXISTS then skips the
// update's scan altogether (a one-time filter): a plan made while the
// table was small reads it whole to find no ids, and PostgreSQL keeps
// that plan until the statistics change, scanning a table ten times that
// size for every group meanwhile.
const supersedeOlderManySQL = `WITH s AS MATERIALIZED (
		SELECT u.n, o.id, u.at FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bool[], $6::timestamptz[], $7::int[])
			AS u(flow, entity, effect, version_sort, ordered, at, n)
		CROSS JOIN LATERAL (SELECT f.id FROM effects f
			WHERE f.flow = u.flow AND f.entity = u.entity AND f.effect = u.effect
				AND f.state IN ('approved', 'retry_wait') AND f.compensates = 0
				AND CASE WHEN u.ordered THEN f.version_sort < u.version_sort COLLATE "C"
					ELSE f.version_sort <> u.version_sort COLLATE "C" END
			OFFSET 0) o)
	UPDATE effects f SET state = 'superseded', updated_at = (SELECT at FROM s WHERE s.id = f.id)
	WHERE f.id = ANY(ARRAY(SELECT id FROM s)) AND EXISTS (SELECT FROM s)
		AND CASE WHEN f.state IN ('approved', 'retry_wait') AND f.compensates = 0 THEN true ELSE false END
	RETURNING (SELECT n FROM s WHERE s.id = f.id), f.episode_key, f.version`

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
// The existing row is looked up only for a key the insert skipped.
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
	SELECT ins.episode_key IS NOT NULL,
		coalesce(u.tomb, CASE WHEN ins.episode_key IS NULL
			THEN (SELECT request::text FROM effects f WHERE f.episode_key = u.episode_key) END)
	FROM u LEFT JOIN ins ON ins.episode_key = u.episode_key ORDER BY u.n`

// queueClaimedEffects queues es, some of them with a claim, as one
// insertClaimedEffectsSQL.
func queueClaimedEffects(t *pipeTx, es []heldEffect) {
	n := len(es)
	tokens, redrives := make([]string, n), make([]int64, n)
	claimAt, until := make([]time.Time, n), make([]time.Time, n)
	for i, e := range es {
		claimAt[i], until[i] = e.at, e.at
		if c := e.claim; c != nil {
			tokens[i], claimAt[i], until[i], redrives[i] = c.Token, c.Now, c.Until, int64(c.MaxRedrives)
		}
	}
	t.later("insert effects", insertClaimedEffectsSQL, append(effectArrays(es), tokens, claimAt, until, redrives),
		func(rows pgx.Rows) error {
			i := 0
			for ; rows.Next(); i++ {
				if i >= n {
					return errors.New("more insert results than effects")
				}
				e := es[i]
				var request *string
				var id *int64
				if err := rows.Scan(&e.out.Inserted, &e.out.Existing, &e.out.Claimed, &id, &request, &e.out.TraceContext); err != nil {
					return err
				}
				if e.out.Claimed {
					e.out.ID, e.out.Request = *id, []byte(*request)
				}
				if !e.out.Inserted && e.out.Existing == nil {
					t.then = append(t.then, func(ctx context.Context) error { return readExisting(ctx, t, e.key, e.out) })
				}
			}
			if rows.Err() == nil && i != n {
				return errors.New("fewer insert results than effects")
			}
			return nil
		})
}

// insertClaimedEffectsSQL is insertEffectsSQL where some effects come with
// a claim (a token in $17, empty for none, its time $18, the lease's end
// $19 and the re-drive limit $20): such an effect goes in claimed
// (store.InsertClaim) when the claim would take no other effect at its
// destination at $18 and none of its flow, entity and name is in flight.
// Both conditions read the rows stored before the statement, so several
// new effects at one destination are claimed together, as one claim would
// take them. It answers, in the effects' order, inserted, the request
// already under the key, claimed, and a claimed effect's id, stored
// request and source event's trace context.
var insertClaimedEffectsSQL = `WITH u AS MATERIALIZED (
		SELECT u.*, (SELECT request::text FROM effect_tombstones t WHERE t.episode_key = u.episode_key) AS tomb,
			u.token <> '' AND ` + firstClaimableSQL("u.destination", "u.claim_at", "u.redrives") + ` IS NULL
				AND ` + store.NoneInFlightSQL("u", "") + ` AS claimed
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::jsonb[],
			$9::bigint[], $10::text[], $11::bigint[], $12::timestamptz[], $13::bigint[], $14::timestamptz[], $15::timestamptz[], $16::text[],
			$17::text[], $18::timestamptz[], $19::timestamptz[], $20::bigint[])
			WITH ORDINALITY AS u(episode_key, flow, entity, version, version_sort, effect, destination, request,
				source_event_pk, causation_id, hop, at, compensates, deadline_at, deadline_warn_at, on_deadline,
				token, claim_at, until, redrives, n)),
	ins AS (INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination,
		state, request, source_event_pk, causation_id, hop, created_at, updated_at,
		compensates, deadline_at, deadline_warn_at, on_deadline, lease_token, lease_until, next_attempt_at, claimed_at)
		SELECT episode_key, flow, entity, version, version_sort, effect, destination,
			CASE WHEN claimed THEN 'submitting' ELSE 'approved' END, request, source_event_pk, causation_id, hop, at,
			CASE WHEN claimed THEN claim_at ELSE at END, compensates, deadline_at, deadline_warn_at, on_deadline,
			CASE WHEN claimed THEN token ELSE '' END,
			CASE WHEN claimed THEN until ELSE '-infinity' END, CASE WHEN claimed THEN until ELSE '-infinity' END,
			CASE WHEN claimed THEN claim_at ELSE '-infinity' END
		FROM u WHERE tomb IS NULL ORDER BY n
		ON CONFLICT (episode_key) DO NOTHING RETURNING episode_key, id, state = 'submitting' AS claimed, request::text)
	SELECT ins.episode_key IS NOT NULL,
		coalesce(u.tomb, CASE WHEN ins.episode_key IS NULL
			THEN (SELECT request::text FROM effects f WHERE f.episode_key = u.episode_key) END),
		coalesce(ins.claimed, false), ins.id, ins.request,
		coalesce(CASE WHEN ins.claimed THEN (SELECT trace_context FROM events e WHERE e.pk = u.source_event_pk) END, '')
	FROM u LEFT JOIN ins ON ins.episode_key = u.episode_key ORDER BY u.n`

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
