package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// Every pipeline write goes through the single writer connection in an
// immediate transaction, so the writer lock already serialises routers,
// claimers and appliers: no statement here needs row locks, and a
// read-then-write inside one transaction cannot race another process.

// leaseFree is the lease_until of an entity nobody holds (the column's
// default): any now is past it.
const leaseFree = 0

// routableColumns selects a RoutableEvent from events e joined to its first
// delivery d (the lowest delivery id): the body, causation and hop the
// processor sees are those of the first receipt, whatever the retries sent.
// The kept headers are a JSON object; only the Content-Type is read.
const routableColumns = `e.pk, e.source, e.event_id, e.type, e.entity, e.account, e.occurred_at, e.received_at,
	d.causation_id, d.hop, d.body, coalesce(json_extract(d.headers, '$."Content-Type"'), ''), e.trace_context`

const firstDeliveryJoin = `JOIN deliveries d ON d.id = (SELECT min(id) FROM deliveries WHERE event_pk = e.pk)`

type scanner interface {
	Scan(dest ...any) error
}

func scanRoutable(sc scanner, e *store.RoutableEvent, extra ...any) error {
	var occ sql.NullInt64
	var rec int64
	dest := append([]any{&e.PK, &e.Source, &e.EventID, &e.Type, &e.Entity, &e.Account, &occ, &rec,
		&e.CausationID, &e.Hop, &e.Body, &e.ContentType, &e.TraceContext}, extra...)
	if err := sc.Scan(dest...); err != nil {
		return err
	}
	e.OccurredAt = fromMicros(occ)
	e.ReceivedAt = time.UnixMicro(rec).UTC()
	return nil
}

// EventListUnrouted returns accepted events not yet routed, in pk order.
func (s *Store) EventListUnrouted(ctx context.Context, p *store.EventListUnroutedParams) ([]*store.RoutableEvent, error) {
	rows, err := s.readQuery(ctx, `SELECT `+routableColumns+` FROM events e `+firstDeliveryJoin+`
		WHERE e.routed = 0 AND e.disposition = 'accepted' ORDER BY e.pk LIMIT ?`, store.ClampLimit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list unrouted events: %w", err)
	}
	defer rows.Close()
	var out []*store.RoutableEvent
	for rows.Next() {
		e := &store.RoutableEvent{}
		if err := scanRoutable(rows, e); err != nil {
			return nil, fmt.Errorf("list unrouted events: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list unrouted events: %w", err)
	}
	return out, nil
}

// Shared: one process owns a SQLite file.
func (s *Store) Shared() bool { return false }

// EventsClaim claims by the routed flag: the writer lock makes the check
// and the mark one step.
func (a txn) EventsClaim(ctx context.Context, pks []int64) ([]store.RouteEvent, error) {
	var out []store.RouteEvent
	for _, pk := range pks {
		ev := store.RouteEvent{PK: pk}
		err := a.tx.QueryRowContext(ctx, `UPDATE events SET routed = 1 WHERE pk = ? AND routed = 0
		RETURNING source, event_id, type, entity, disposition`, pk).
			Scan(&ev.Source, &ev.EventID, &ev.Type, &ev.Entity, &ev.Disposition)
		if errors.Is(err, sql.ErrNoRows) {
			continue // already routed, or no such event
		}
		if err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	return out, nil
}

// EventsTake: routing takes a SQLite store's pages under the process's
// lock (store.Rules.EventRouteNext).
func (txn) EventsTake(context.Context, int) ([]*store.RoutableEvent, []store.RouteEvent, error) {
	return nil, nil, store.ErrNotShared
}

// EventsStoredBy finds each key's event by its unique (source,
// event_id), in the writer's transaction: the inbox's rows of the same
// transaction are seen.
func (a txn) EventsStoredBy(ctx context.Context, keys []store.DeliveryKey) ([]*store.RoutableEvent, error) {
	out := make([]*store.RoutableEvent, len(keys))
	for i, k := range keys {
		ev := &store.RoutableEvent{}
		err := scanRoutable(a.tx.QueryRowContext(ctx, `SELECT `+routableColumns+` FROM events e
			JOIN deliveries d ON d.event_pk = e.pk AND d.request_id = ? AND d.batch_index = ?
			WHERE e.source = ? AND e.event_id = ? AND e.deliveries = 1`, k.RequestID, k.BatchIndex, k.Source, k.EventID), ev)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[i] = ev
	}
	return out, nil
}

func (a txn) EventsWaiting(ctx context.Context, upTo int64, limit int) ([]int64, error) {
	var out []int64
	err := a.each(ctx, `SELECT pk FROM events WHERE routed = 0 AND disposition = 'accepted' AND pk <= ? ORDER BY pk LIMIT ?`,
		[]any{upTo, store.ClampLimit(limit)}, func(sc scanner) error {
			var pk int64
			err := sc.Scan(&pk)
			out = append(out, pk)
			return err
		})
	return out, err
}

func (a txn) EventsWithoutPending(ctx context.Context, pks []int64) ([]int64, error) {
	list, err := jsonList(pks)
	if err != nil {
		return nil, err
	}
	var out []int64
	err = a.each(ctx, `SELECT value FROM json_each(?)
		WHERE NOT EXISTS (SELECT 1 FROM work WHERE event_pk = value AND done_at IS NULL) ORDER BY value`, []any{list},
		func(sc scanner) error {
			var pk int64
			err := sc.Scan(&pk)
			out = append(out, pk)
			return err
		})
	return out, err
}

// enqueue creates the work rows of one event's routes for one pass and
// returns how many pending rows it inserted. Failed routes are inserted
// already settled as dead letters.
func enqueue(ctx context.Context, tx *wtx, now time.Time, ev store.RouteEvent, routes []store.Route, replayID int64, actor string) (int, error) {
	at := now.UnixMicro()
	inserted := 0
	for _, r := range routes {
		// A route that failed is settled at once as a dead letter: still
		// the entity's newest news (revision_lag), but not pending work.
		disposition, done, pending := "", any(nil), 1
		if r.Failed != "" {
			disposition, done, pending = "dead_lettered", at, 0
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO work (flow, entity, event_pk, replay_id, order_key, created_at, done_at, disposition, reason)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (flow, event_pk, replay_id) DO NOTHING`,
			r.Flow, r.Entity, ev.PK, replayID, r.OrderKey, at, done, disposition, r.Failed)
		if err != nil {
			return 0, fmt.Errorf("insert work for %s: %w", r.Flow, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return 0, fmt.Errorf("insert work for %s: %w", r.Flow, err)
		} else if n == 0 {
			// The item exists, and so does its entity: its first insert
			// made the row, and entities are never deleted.
			continue
		}
		if _, err := tx.ExecContext(ctx, entityEnqueueSQL, r.Flow, r.Entity, at, pending, r.OrderKey); err != nil {
			return 0, fmt.Errorf("count pending %s/%s: %w", r.Flow, r.Entity, err)
		}
		if r.Failed != "" {
			if _, err := insertAudit(ctx, tx, &store.AuditInsertParams{At: now, Actor: actor, Action: store.ActionDeadLettered,
				Source: ev.Source, EventID: ev.EventID, Entity: r.Entity,
				Detail: store.RouteFailedDetail(r.Flow, r.Entity, r.Failed)}); err != nil {
				return 0, err
			}
			continue
		}
		inserted++
	}
	return inserted, nil
}

// entityEnqueueSQL makes or updates the entity of a work row just
// inserted (?1 flow, ?2 entity, ?3 now, ?4 pending: 1, or 0 for a route
// that failed, ?5 the order key), in one statement where an insert and an
// update were two. Its pending count rises by ?4; an entity that becomes
// ready joins the back of the claim order (not_before, then keys): claims
// are first come, first served, so an entity whose key sorts late is not
// starved by newer ones, and a retry's later not_before is kept. Its
// newest routed key advances for revision_lag, with behind_since stamped
// when that makes an entity that was caught up fall behind (a new entity
// has settled nothing: any key puts it behind). Every expression of DO
// UPDATE reads the row as it was, so the CASEs see the old values.
const entityEnqueueSQL = `INSERT INTO entities (flow, entity, updated_at, pending, not_before, newest_key, behind_since)
	VALUES (?1, ?2, ?3, ?4, CASE WHEN ?4 > 0 THEN ?3 ELSE 0 END, ?5, CASE WHEN ?5 > '' THEN ?3 ELSE 0 END)
	ON CONFLICT (flow, entity) DO UPDATE SET pending = pending + ?4,
		not_before = CASE WHEN ?4 > 0 AND pending = 0 AND not_before < ?3 THEN ?3 ELSE not_before END,
		behind_since = CASE WHEN newest_key <= settled_key AND ?5 > settled_key THEN ?3 ELSE behind_since END,
		newest_key = max(newest_key, ?5)`

// EntityClaim leases ready entities in a transaction of their own.
func (s *Store) EntityClaim(ctx context.Context, p *store.EntityClaimParams) ([]*store.Lease, error) {
	var out []*store.Lease
	err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		var err error
		out, err = txn{tx}.EntitiesLease(ctx, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// WorkListLeased lists the keys of the leased entities' work on the
// writer (store.RouteTx): the events are the routing page's, read on a
// reader before the write transaction, and their bodies are not read
// again while the one writer is held.
func (a txn) WorkListLeased(ctx context.Context, ps []*store.WorkListPendingParams) ([][]*store.WorkItem, error) {
	out := make([][]*store.WorkItem, len(ps))
	for i, p := range ps {
		err := a.eachN(ctx, `SELECT id, flow, entity, order_key, replay_id, event_pk FROM work
			WHERE flow = ? AND entity = ? AND done_at IS NULL
			ORDER BY order_key, id`+limitSQL(p.Limit), []any{p.Flow, p.Entity}, p.Limit, func(sc scanner) error {
			w := &store.WorkItem{}
			out[i] = append(out[i], w)
			return sc.Scan(&w.ID, &w.Flow, &w.Entity, &w.OrderKey, &w.ReplayID, &w.Event.PK)
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// EntitiesLease leases ready entities (store.RouteTx) in one statement:
// the writer lock makes the choice and the leases one atomic step, so two
// claimers never lease one entity. The candidates are read in claim order
// up to limitSQL's literal (see there why the limit is not bound) and
// numbered, and only the first p.Limit (or as many as p.Slots grants)
// are leased. Each lease's token is the claim's own (store.LeaseToken) and the
// row's id: unique per lease and not guessable by another claimer.
// RETURNING keeps no order, so the leases are sorted back into claim
// order.
func (a txn) EntitiesLease(ctx context.Context, p *store.EntityClaimParams) ([]*store.Lease, error) {
	return p.Lease(func(limit int) ([]*store.Lease, error) {
		now := p.Now.UnixMicro()
		until := p.Now.Add(p.LeaseFor).UnixMicro()
		token, err := store.LeaseToken(p.Owner)
		if err != nil {
			return nil, fmt.Errorf("claim entities: %w", err)
		}
		var got []store.ClaimedEntity
		err = a.each(ctx, entityLeaseSQL(limit), []any{token, until, now, store.ClampLimit(limit)}, func(sc scanner) error {
			var nb int64
			l := &store.Lease{Until: time.UnixMicro(until).UTC()}
			if err := sc.Scan(&nb, &l.Flow, &l.Entity, &l.Token); err != nil {
				return err
			}
			got = append(got, store.ClaimedEntity{NotBefore: time.UnixMicro(nb), Lease: l})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("claim entities: %w", err)
		}
		return store.ClaimOrder(got), nil
	})
}

// entityLeaseSQL leases up to ?4 of the first limit ready entities
// (?1 the claim's token, ?2 the lease's end, ?3 now): the candidates come
// from entities_ready in claim order. Its text for each of limitSQL's
// size classes is made once: built per claim, it was an allocation on
// the one writer every time.
func entityLeaseSQL(limit int) string {
	return entityLeaseSQLs[bits.Len(uint(store.ClampLimit(limit)-1))]
}

// entityLeaseSQLs is entityLeaseSQL's text by size class: index i reads
// up to 1<<i candidates (limitSQL), up to store.ClampLimit's 1,000.
var entityLeaseSQLs = func() (out [11]string) {
	for i := range out {
		out[i] = entityLeaseText(1 << i)
	}
	return out
}()

func entityLeaseText(limit int) string {
	return `UPDATE entities SET lease_token = ?1 || '.' || rowid, lease_until = ?2, claimed_at = ?3
		WHERE rowid IN (SELECT r FROM (SELECT r, row_number() OVER (ORDER BY nb, f, e) AS n FROM (
			SELECT rowid AS r, not_before AS nb, flow AS f, entity AS e FROM entities
			WHERE pending > 0 AND lease_until <= ?3 AND not_before <= ?3
			ORDER BY not_before, flow, entity` + limitSQL(limit) + `)) WHERE n <= ?4)
		RETURNING not_before, flow, entity, lease_token`
}

// EntityLeaseFree frees the lease (store.ApplyTx); a NULL retry keeps
// not_before.
func (a txn) EntityLeaseFree(ctx context.Context, p *store.EntityReleaseParams) error {
	var retry any
	if !p.RetryAt.IsZero() {
		retry = p.RetryAt.UnixMicro()
	}
	_, err := a.tx.ExecContext(ctx, `UPDATE entities SET lease_token = '', lease_until = ?,
		not_before = coalesce(?, not_before) WHERE flow = ? AND entity = ? AND lease_token = ?`,
		leaseFree, retry, p.Lease.Flow, p.Lease.Entity, p.Lease.Token)
	return err
}

// WorkListPendingGroup lists each entity's pending work in turn: reads
// run on the read pool, beside the writer, and cost no round trip.
func (s *Store) WorkListPendingGroup(ctx context.Context, ps []*store.WorkListPendingParams) ([][]*store.WorkItem, error) {
	out := make([][]*store.WorkItem, len(ps))
	for i, p := range ps {
		items, err := s.WorkListPending(ctx, p)
		if err != nil {
			return nil, err
		}
		out[i] = items
	}
	return out, nil
}

// WorkListPending returns one entity's unsettled work in business order.
// SQLite compares TEXT with BINARY collation, i.e. byte order, like the
// COLLATE "C" columns in PostgreSQL.
func (s *Store) WorkListPending(ctx context.Context, p *store.WorkListPendingParams) ([]*store.WorkItem, error) {
	rows, err := s.readQuery(ctx, `SELECT `+routableColumns+`, w.id, w.flow, w.entity, w.order_key, w.replay_id
		FROM work w JOIN events e ON e.pk = w.event_pk `+firstDeliveryJoin+`
		WHERE w.flow = ? AND w.entity = ? AND w.done_at IS NULL
		ORDER BY w.order_key, w.id LIMIT ?`, p.Flow, p.Entity, store.ClampLimit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list pending work: %w", err)
	}
	defer rows.Close()
	var out []*store.WorkItem
	for rows.Next() {
		w := &store.WorkItem{}
		if err := scanRoutable(rows, &w.Event, &w.ID, &w.Flow, &w.Entity, &w.OrderKey, &w.ReplayID); err != nil {
			return nil, fmt.Errorf("list pending work: %w", err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list pending work: %w", err)
	}
	return out, nil
}

// ProjectionGet returns one entity's projection, or nil when it has none.
func (s *Store) ProjectionGet(ctx context.Context, p *store.ProjectionGetParams) (*store.Projection, error) {
	pr := &store.Projection{}
	var state string
	var applied sql.NullInt64
	var updated int64
	err := s.readQueryRow(ctx, `SELECT flow, entity, version, version_sort, state, applied_event_pk, updated_at, pending
		FROM entities WHERE flow = ? AND entity = ?`, p.Flow, p.Entity).
		Scan(&pr.Flow, &pr.Entity, &pr.Version, &pr.VersionSort, &state, &applied, &updated, &pr.Pending)
	if err != nil {
		return store.NoRow[store.Projection](err, sql.ErrNoRows, "get projection %s/%s", p.Flow, p.Entity)
	}
	pr.State = []byte(state)
	pr.AppliedEventPK = applied.Int64
	pr.UpdatedAt = time.UnixMicro(updated).UTC()
	return pr, nil
}

// effectListSQL is EffectList's query.
func effectListSQL(p *store.EffectListParams) (string, []any) {
	states := p.StateSet()
	f := cursor("f.id > ?", p.AfterID)
	// The selective filters: an entity, an owner, a class; and a set of
	// states that leaves out the bulk of finished effects (the exception
	// queue, say), read through effects_state. See filter.
	bulk := slices.Contains(states, store.EffectDone) || slices.Contains(states, store.EffectSuperseded)
	f.narrow = p.Entity != "" || p.Owner != "" || p.Class != "" || (len(states) > 0 && !bulk) || p.DeadlineMissed || p.Compensations
	stateCol := "f.state"
	if bulk || p.Entity != "" || p.Owner != "" || p.Class != "" {
		stateCol = "+f.state"
	}
	// An entity is looked up through the (flow, entity, ...) index in a
	// subquery of its own: beside the cursor, the planner would otherwise
	// take the flow's index, which also yields id order, and read the
	// whole flow to find the entity's few rows.
	f.cond(p.Entity == "" && p.Flow != "", f.broad("f.flow")+" = ?", p.Flow).
		cond(p.Entity != "" && p.Flow != "", "f.id IN (SELECT id FROM effects WHERE flow = ? AND entity = ?)", p.Flow, p.Entity).
		cond(p.Entity != "" && p.Flow == "", effectEntityAnyFlow, p.Entity).
		cond(len(states) > 0, stateCol+" IN (?"+strings.Repeat(", ?", max(len(states)-1, 0))+")", effectStates(states)...).
		eq(f.broad("f.destination"), p.Destination).
		// The literal repeats each partial index's predicate, so that the
		// index is provably usable with a bound parameter.
		cond(p.Owner != "", "f.owner = ? AND f.owner <> ''", p.Owner).
		cond(p.Class != "", "f.error_class = ? AND f.error_class <> ''", string(p.Class)).
		// effects_deadline_missed and effects_compensation hold only these
		// rows (few: the escalated and the compensations).
		cond(p.DeadlineMissed, "f.id IN (SELECT id FROM effects WHERE deadline_missed_at IS NOT NULL)").
		cond(p.Compensations, "f.id IN (SELECT id FROM effects WHERE compensates <> 0)").
		span(f.broad("f.created_at"), p.CreatedFrom, p.CreatedTo).span(f.broad("f.updated_at"), p.UpdatedFrom, p.UpdatedTo)
	where, args := f.sql(store.ClampLimit(p.Limit))
	// The page's ids are chosen first, reading nothing but ids, and the
	// columns fetched for those alone: the planner weighs an index by the
	// row it would have to read beside it, and with every column of the
	// ledger in the select it came to prefer reading the table in id order
	// over a selective index.
	cols := effectColumns
	if p.WithoutRequest {
		cols = effectColumnsWithoutRequest
	}
	return `SELECT ` + cols + ` FROM (SELECT f.id FROM effects f WHERE ` + where + ` ORDER BY f.id LIMIT ?) AS page
		JOIN effects f ON f.id = page.id JOIN events e ON e.pk = f.source_event_pk ORDER BY page.id`, args
}

// EffectList pages through the effect ledger in id order.
func (s *Store) EffectList(ctx context.Context, p *store.EffectListParams) ([]*store.Effect, error) {
	q, args := effectListSQL(p)
	rows, err := s.readQuery(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list effects: %w", err)
	}
	defer rows.Close()
	var out []*store.Effect
	for rows.Next() {
		f := &store.Effect{}
		if err := scanEffect(rows, f); err != nil {
			return nil, fmt.Errorf("list effects: %w", err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list effects: %w", err)
	}
	return out, nil
}

// effectEntityAnyFlow finds an entity's effects without their flow through
// the (flow, entity, ...) index: one probe per distinct flow, the flows
// enumerated by skipping through the index from one to the next (a handful,
// the configured ones), so no index on entity alone is needed on the
// pipeline's write path.
const effectEntityAnyFlow = `f.id IN (SELECT id FROM effects WHERE entity = ? AND flow IN (WITH RECURSIVE fl(n) AS (
		SELECT min(flow) FROM effects
		UNION ALL SELECT (SELECT min(flow) FROM effects WHERE flow > fl.n) FROM fl WHERE fl.n IS NOT NULL)
	SELECT n FROM fl WHERE n IS NOT NULL))`

// effectStates makes query arguments of states.
func effectStates(states []store.EffectState) []any {
	out := make([]any, len(states))
	for i, st := range states {
		out[i] = string(st)
	}
	return out
}

func (a txn) ReplayInsert(ctx context.Context, p *store.ReplayCreateParams) (int64, error) {
	var id int64
	err := a.tx.QueryRowContext(ctx, `INSERT INTO replays (created_at, actor, selection, items, planned, effect_floor)
		VALUES (?, ?, ?, 0, 0, (SELECT coalesce(max(id), 0) FROM effects)) RETURNING id`,
		p.Now.UnixMicro(), p.Actor, p.Selection).Scan(&id)
	return id, err
}

// WorkEnqueue enqueues the routes of each event in turn (enqueue).
func (a txn) WorkEnqueue(ctx context.Context, p *store.EnqueueParams) error {
	for i := 0; i < len(p.Items); {
		it := p.Items[i]
		var routes []store.Route
		for ; i < len(p.Items) && p.Items[i].EventPK == it.EventPK; i++ {
			routes = append(routes, p.Items[i].Route)
		}
		n, err := enqueue(ctx, a.tx, p.Now, store.RouteEvent{PK: it.EventPK, Source: it.Source, EventID: it.EventID}, routes, p.ReplayID, p.Actor)
		if err != nil {
			return fmt.Errorf("event %d: %w", it.EventPK, err)
		}
		if n > 0 && p.Pending != nil {
			p.Pending[it.EventPK] = true
		}
	}
	return nil
}

// ReplayItems counts through work_event.
func (a txn) ReplayItems(ctx context.Context, id int64, pks []int64) (int64, error) {
	list, err := jsonList(pks)
	if err != nil {
		return 0, err
	}
	var n int64
	err = a.tx.QueryRowContext(ctx, `UPDATE replays SET items = items + (SELECT count(*) FROM work
		WHERE event_pk IN (SELECT value FROM json_each(?2)) AND replay_id = ?1) WHERE id = ?1 RETURNING items`, id, list).Scan(&n)
	return n, err
}

func (a txn) ReplayPlanned(ctx context.Context, id int64) (int64, error) {
	var n int64
	err := a.tx.QueryRowContext(ctx, `UPDATE replays SET planned = 1 WHERE id = ? RETURNING items`, id).Scan(&n)
	return n, err
}

// ReplayCounts counts through work_replay, whose condition the query
// repeats so that SQLite may use it (replayWorkCountsSQL).
func (a txn) ReplayCounts(ctx context.Context, id int64) (*store.ReplayProgress, error) {
	out := &store.ReplayProgress{Settled: map[store.Disposition]int64{}}
	var floor int64
	err := a.tx.QueryRowContext(ctx, `SELECT planned, items, effect_floor FROM replays WHERE id = ?`, id).Scan(&out.Planned, &out.Items, &floor)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rows, err := a.tx.QueryContext(ctx, replayWorkCountsSQL, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var d string
		var n int64
		if err := rows.Scan(&d, &n); err != nil {
			return nil, err
		}
		out.Settled[store.Disposition(d)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	err = a.tx.QueryRowContext(ctx, replayEffectsCreatedSQL, id, floor).Scan(&out.EffectsCreated)
	return out, err
}

// The reads of ReplayCounts (TestListPlans pins their plans): a replay's
// work rows through work_replay, and the effects after its floor through
// the primary key, each matched to the replay's work through its unique key.
const (
	replayWorkCountsSQL = `SELECT disposition, count(*) FROM work
		WHERE replay_id = ?1 AND replay_id <> 0 AND disposition <> '' GROUP BY disposition`
	replayEffectsCreatedSQL = `SELECT count(*) FROM effects f WHERE f.id > ?2 AND EXISTS (SELECT 1 FROM work w
		WHERE w.event_pk = f.source_event_pk AND w.replay_id = ?1 AND w.flow = f.flow AND w.entity = f.entity)`
)

// WorkCount counts pending work items plus accepted events not yet routed.
func (s *Store) WorkCount(ctx context.Context) (int64, error) {
	var n int64
	if err := s.readQueryRow(ctx, `SELECT
		(SELECT count(*) FROM work WHERE done_at IS NULL) +
		(SELECT count(*) FROM events WHERE routed = 0 AND disposition = 'accepted')`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count work: %w", err)
	}
	return n, nil
}
