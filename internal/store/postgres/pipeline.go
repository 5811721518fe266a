package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/hookledger/hookledger/internal/store"
)

// Several processes share the database, so every read that a write depends
// on is fenced by a row lock. Lock order, to keep transactions from
// deadlocking one another:
//
//   - routers lock the route_queue rows of the events they route, or the
//     events themselves where an earlier version left them unrouted (in pk
//     order), before any entity;
//   - routers and replays lock entities in (flow, entity) order;
//   - FlowApply locks its one entity first (the fencing lock), then the
//     events of its items in pk order, and only events already routed.

// routableColumns selects a RoutableEvent from events e joined to its first
// delivery d (the lowest delivery id): the body, causation and hop the
// processor sees are those of the first receipt, whatever the retries sent.
const routableColumns = `e.pk, e.source, e.event_id, e.type, e.entity, e.account, e.occurred_at, e.received_at,
	d.causation_id, d.hop, d.body, d.content_type, e.trace_context`

// firstDeliveryJoin joins d, an event's first delivery: the first entry of
// its range of deliveries_event (event_pk, id), written so that no other
// plan fits: min(id) let the planner walk the primary key from the start
// until it met the event (a scan that grew with the table), and a scalar
// subquery let it hash-join a full scan of deliveries while statistics
// were missing.
const firstDeliveryJoin = `CROSS JOIN LATERAL (SELECT causation_id, hop, body, coalesce(headers->>'Content-Type', '') AS content_type FROM deliveries
	WHERE event_pk = e.pk ORDER BY event_pk, id LIMIT 1) d`

// Events wait for the router in two places (0015_route_queue): a pk in
// route_queue, where this version's inbox puts them, and routed = false in
// events (the events_unrouted index), where an earlier version's inbox
// left them. Routing takes both, the older kind first. A queued event is
// always accepted: nothing but the router changes an event's disposition
// before it is routed.
//
// unroutedPKs is the page of $1 pks waiting in either place, in pk order.
const unroutedPKs = `SELECT pk FROM ((SELECT pk FROM events WHERE NOT routed AND disposition = 'accepted' ORDER BY pk LIMIT $1)
		UNION ALL (SELECT pk FROM route_queue ORDER BY pk LIMIT $1)) u ORDER BY pk LIMIT $1`

// listUnroutedSQL is EventListUnrouted's page ($1 rows).
const listUnroutedSQL = `SELECT ` + routableColumns + ` FROM (` + unroutedPKs + `) p
	CROSS JOIN LATERAL (SELECT * FROM events WHERE pk = p.pk AND disposition = 'accepted' LIMIT 1) e
	` + firstDeliveryJoin + `
	ORDER BY e.pk`

// listPendingSQL is WorkListPending's page: flow $1, entity $2, $3 rows.
const listPendingSQL = `SELECT ` + routableColumns + `, w.id, w.flow, w.entity, w.order_key, w.replay_id
	FROM work w JOIN events e ON e.pk = w.event_pk ` + firstDeliveryJoin + `
	WHERE w.flow = $1 AND w.entity = $2 AND w.done_at IS NULL
	ORDER BY w.order_key, w.id LIMIT $3`

// listPendingGroupSQL is WorkListPendingGroup's pages: entity n of the
// arrays flows $1 and entities $2, at most $3[n] rows each, ordered by n
// and business order. Each join is a LATERAL read of one row or one
// entity's range, so the plan is index lookups whatever the planner knows
// (LIMIT 1 keeps the event's read from being flattened into a join the
// planner could hash).
const listPendingGroupSQL = `SELECT ` + routableColumns + `, w.id, w.flow, w.entity, w.order_key, w.replay_id, l.n
	FROM unnest($1::text[], $2::text[], $3::int[]) WITH ORDINALITY AS l(flow, entity, lim, n)
	CROSS JOIN LATERAL (SELECT * FROM work WHERE flow = l.flow AND entity = l.entity AND done_at IS NULL
		ORDER BY order_key, id LIMIT l.lim) w
	CROSS JOIN LATERAL (SELECT * FROM events WHERE pk = w.event_pk LIMIT 1) e
	` + firstDeliveryJoin + `
	ORDER BY l.n, w.order_key, w.id`

// listLeasedSQL is listPendingGroupSQL as routing's pipe runs it
// (WorkListLeased): a statement of its own text, so that the generic plan
// the pipe keeps for it is never one made outside a pipe (pipePlanSettings).
const listLeasedSQL = `/* routing's pipe */ ` + listPendingGroupSQL

func scanRoutable(row pgx.Row, e *store.RoutableEvent, extra ...any) error {
	var occ *time.Time
	dest := append([]any{&e.PK, &e.Source, &e.EventID, &e.Type, &e.Entity, &e.Account, &occ, &e.ReceivedAt,
		&e.CausationID, &e.Hop, &e.Body, &e.ContentType, &e.TraceContext}, extra...)
	if err := row.Scan(dest...); err != nil {
		return err
	}
	e.OccurredAt = fromNull(occ)
	e.ReceivedAt = e.ReceivedAt.UTC()
	return nil
}

// EventListUnrouted returns accepted events not yet routed, in pk order.
func (s *Store) EventListUnrouted(ctx context.Context, p *store.EventListUnroutedParams) ([]*store.RoutableEvent, error) {
	// The page is cut from the unrouted index in pk order before the join:
	// left to itself the planner may join every accepted event (a backlog
	// of thousands, most of them routed already) and sort them, which took
	// a second per page right after a burst, before statistics caught up.
	rows, err := s.pool.Query(ctx, listUnroutedSQL, store.ClampLimit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list unrouted events: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.RoutableEvent, error) {
		e := &store.RoutableEvent{}
		return e, scanRoutable(r, e)
	})
	if err != nil {
		return nil, fmt.Errorf("list unrouted events: %w", err)
	}
	return out, nil
}

// takeUnroutedSQL is EventRouteNext's page (at most $1 rows): the events
// an earlier version left unrouted (l), marked routed, then as many
// queued ones as the page has room for (q), their queue rows deleted; in
// both, rows another router holds are passed over (SKIP LOCKED), and the
// transaction rolls the marks and deletes back if routing fails.
const takeUnroutedSQL = `WITH l AS (UPDATE events ev SET routed = true
		FROM (SELECT pk FROM events WHERE NOT routed AND disposition = 'accepted'
			ORDER BY pk LIMIT $1 FOR UPDATE SKIP LOCKED) c
		WHERE ev.pk = c.pk RETURNING ev.pk),
	q AS (DELETE FROM route_queue WHERE pk = ANY(ARRAY(SELECT pk FROM route_queue
			ORDER BY pk LIMIT (SELECT $1 - count(*) FROM l) FOR UPDATE SKIP LOCKED)) RETURNING pk),
	p AS (SELECT pk FROM l UNION ALL SELECT pk FROM q)
	SELECT ` + routableColumns + `, e.disposition FROM p
	CROSS JOIN LATERAL (SELECT * FROM events WHERE pk = p.pk AND disposition = 'accepted' LIMIT 1) e
	` + firstDeliveryJoin + `
	ORDER BY e.pk`

// Shared: several processes may share a PostgreSQL database.
func (s *Store) Shared() bool { return true }

// EventsTake takes the page, marks or dequeues it and reads it in one
// statement (takeUnroutedSQL).
func (a txn) EventsTake(ctx context.Context, limit int) ([]*store.RoutableEvent, []store.RouteEvent, error) {
	var evs []*store.RoutableEvent
	var claimed []store.RouteEvent
	err := a.t.query(ctx, "take unrouted events", takeUnroutedSQL, []any{limit}, func(rows pgx.Rows) error {
		for rows.Next() {
			e := &store.RoutableEvent{}
			var disposition store.Disposition
			if err := scanRoutable(rows, e, &disposition); err != nil {
				return err
			}
			evs = append(evs, e)
			claimed = append(claimed, store.RouteEvent{PK: e.PK, Source: e.Source, EventID: e.EventID, Type: e.Type,
				Entity: e.Entity, Disposition: disposition})
		}
		return nil
	})
	return evs, claimed, err
}

// EventsClaim claims an event by deleting its queue row or, for one an
// earlier version left unrouted, by setting its routed flag, under a row
// lock; rows another router holds are skipped (SKIP LOCKED), so
// concurrent routing creates no duplicate work and never waits on
// another router.
func (a txn) EventsClaim(ctx context.Context, pks []int64) ([]store.RouteEvent, error) {
	var claimed []store.RouteEvent
	err := a.t.query(ctx, "mark routed", `WITH l AS (UPDATE events e SET routed = true
			FROM (SELECT pk FROM events WHERE pk = ANY($1) AND NOT routed ORDER BY pk FOR UPDATE SKIP LOCKED) c
			WHERE e.pk = c.pk RETURNING e.pk),
		q AS (DELETE FROM route_queue WHERE pk = ANY(ARRAY(SELECT pk FROM route_queue WHERE pk = ANY($1)
			ORDER BY pk FOR UPDATE SKIP LOCKED)) RETURNING pk)
		SELECT e.pk, e.source, e.event_id, e.type, e.entity, e.disposition
		FROM (SELECT pk FROM l UNION ALL SELECT pk FROM q) p JOIN events e ON e.pk = p.pk`, []any{pks}, func(rows pgx.Rows) error {
		for rows.Next() {
			var ev store.RouteEvent
			if err := rows.Scan(&ev.PK, &ev.Source, &ev.EventID, &ev.Type, &ev.Entity, &ev.Disposition); err != nil {
				return err
			}
			claimed = append(claimed, ev)
		}
		return nil
	})
	return claimed, err
}

// EventsStoredBy finds the keys' events in one statement, each by its
// unique (source, event_id) and then its delivery, answered by the
// key's place (n).
func (a txn) EventsStoredBy(ctx context.Context, keys []store.DeliveryKey) ([]*store.RoutableEvent, error) {
	out := make([]*store.RoutableEvent, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	sources, ids, requests, indexes := make([]string, len(keys)), make([]string, len(keys)), make([]string, len(keys)), make([]int32, len(keys))
	for i, k := range keys {
		sources[i], ids[i], requests[i], indexes[i] = k.Source, k.EventID, k.RequestID, int32(k.BatchIndex)
	}
	err := a.each(ctx, "find stored events", `SELECT `+routableColumns+`, k.n
		FROM unnest($1::text[], $2::text[], $3::text[], $4::int[]) WITH ORDINALITY AS k(source, event_id, request_id, batch_index, n)
		JOIN events e ON e.source = k.source AND e.event_id = k.event_id AND e.deliveries = 1
		CROSS JOIN LATERAL (SELECT causation_id, hop, body, coalesce(headers->>'Content-Type', '') AS content_type FROM deliveries
			WHERE event_pk = e.pk AND request_id = k.request_id AND batch_index = k.batch_index LIMIT 1) d`,
		[]any{sources, ids, requests, indexes}, func(row pgx.Row) error {
			ev := &store.RoutableEvent{}
			var n int64
			if err := scanRoutable(row, ev, &n); err != nil {
				return err
			}
			out[n-1] = ev
			return nil
		})
	return out, err
}

// EventsWaiting looks in both places an event waits for the router.
func (a txn) EventsWaiting(ctx context.Context, upTo int64, limit int) ([]int64, error) {
	var out []int64
	err := a.each(ctx, "find waiting events", `SELECT pk FROM (
		(SELECT pk FROM events WHERE NOT routed AND disposition = 'accepted' AND pk <= $2 ORDER BY pk LIMIT $1)
		UNION ALL (SELECT pk FROM route_queue WHERE pk <= $2 ORDER BY pk LIMIT $1)) u ORDER BY pk LIMIT $1`,
		[]any{store.ClampLimit(limit), upTo}, func(row pgx.Row) error {
			var pk int64
			err := row.Scan(&pk)
			out = append(out, pk)
			return err
		})
	return out, err
}

func (a txn) EventsWithoutPending(ctx context.Context, pks []int64) ([]int64, error) {
	var out []int64
	err := a.each(ctx, "find settled events", `SELECT pk FROM unnest($1::bigint[]) AS pk
		WHERE NOT EXISTS (SELECT 1 FROM work WHERE event_pk = pk AND done_at IS NULL) ORDER BY pk`, []any{pks},
		func(row pgx.Row) error {
			var pk int64
			err := row.Scan(&pk)
			out = append(out, pk)
			return err
		})
	return out, err
}

// enqueue queues the work rows of routes for one pass, in one statement:
// the pending work rows go in, then every entity of the page is created
// with its counters or, when it exists, locked and its counters raised by
// the rows actually inserted (a row swallowed by an existing one counts
// nothing). The entities are written in (flow, entity) byte order, the
// order every writer locks entities in; the work rows before them are new
// and lock nothing another writer waits for. A new entity is one insert
// instead of an insert and an update, and no statement only locks rows.
// Failed routes are inserted already settled as dead letters, one
// statement each (rare), after their entities exist. When pending is not
// nil, the events that got a pending row are added to it as the
// statement's answer arrives (at the transaction's next flush).
func enqueue(ctx context.Context, t *pipeTx, now time.Time, items []store.EnqueueItem, replayID int64, actor string, pending map[int64]bool) error {
	items = slices.Clone(items)
	slices.SortStableFunc(items, func(a, b store.EnqueueItem) int {
		return cmp.Or(cmp.Compare(a.Route.Flow, b.Route.Flow), cmp.Compare(a.Route.Entity, b.Route.Entity))
	})
	var flows, entities, keys []string
	var pks []int64
	var pairs [][2]string
	for _, it := range items {
		r := it.Route
		if pair := [2]string{r.Flow, r.Entity}; len(pairs) == 0 || pairs[len(pairs)-1] != pair {
			pairs = append(pairs, pair) // items are sorted: each pair once
		}
		if r.Failed != "" {
			// A route that failed is still the entity's newest news: it
			// counts for revision_lag like any other. The audit row is
			// written only when the dead letter is new. Rare: one
			// statement each, after the entities exist.
			continue
		}
		flows, entities, keys, pks = append(flows, r.Flow), append(entities, r.Entity), append(keys, r.OrderKey), append(pks, it.EventPK)
	}
	if len(pairs) == 0 {
		return nil
	}
	pf, pe := make([]string, len(pairs)), make([]string, len(pairs))
	for i, p := range pairs {
		pf[i], pe[i] = p[0], p[1]
	}
	// An entity that becomes ready joins the back of the claim order
	// (not_before, then keys): first come, first served, so an entity
	// whose key sorts late is not starved by newer ones; a retry's later
	// not_before is kept. The newest routed key advances for
	// revision_lag. A new entity gets the values the same rules give
	// from the column defaults. An existing entity that gains no row is
	// left as it is, but still locked (ON CONFLICT DO UPDATE locks the
	// rows its WHERE passes over).
	t.later("enqueue work", `WITH ins AS (INSERT INTO work (flow, entity, event_pk, replay_id, order_key, created_at)
			SELECT flow, entity, pk, $5, order_key, $3
			FROM unnest($1::text[], $2::text[], $4::bigint[], $6::text[]) WITH ORDINALITY AS u(flow, entity, pk, order_key, n)
			ORDER BY n
			ON CONFLICT (flow, event_pk, replay_id) DO NOTHING RETURNING flow, entity, order_key, event_pk),
		agg AS (SELECT flow, entity, count(*) AS n, max(order_key COLLATE "C") AS k FROM ins GROUP BY flow, entity),
		up AS (INSERT INTO entities AS en (flow, entity, updated_at, pending, not_before, behind_since, newest_key)
		SELECT p.flow, p.entity, $3, coalesce(agg.n, 0),
			CASE WHEN agg.n > 0 THEN $3 ELSE '-infinity' END,
			CASE WHEN agg.k > '' THEN $3 ELSE '-infinity' END,
			coalesce(agg.k, '')
		FROM unnest($7::text[], $8::text[]) AS p(flow, entity)
		LEFT JOIN agg ON agg.flow = p.flow AND agg.entity = p.entity
		ORDER BY p.flow COLLATE "C", p.entity COLLATE "C"
		ON CONFLICT (flow, entity) DO UPDATE SET pending = en.pending + excluded.pending,
			not_before = CASE WHEN en.pending = 0 AND en.not_before < $3 THEN $3 ELSE en.not_before END,
			behind_since = CASE WHEN en.newest_key <= en.settled_key AND excluded.newest_key > en.settled_key THEN $3 ELSE en.behind_since END,
			newest_key = GREATEST(en.newest_key, excluded.newest_key)
		WHERE excluded.pending > 0)
		SELECT DISTINCT event_pk FROM ins`,
		[]any{flows, entities, now, pks, replayID, keys, pf, pe}, func(rows pgx.Rows) error {
			for rows.Next() {
				var pk int64
				if err := rows.Scan(&pk); err != nil {
					return err
				}
				if pending != nil {
					pending[pk] = true
				}
			}
			return nil
		})
	for _, it := range items {
		r := it.Route
		if r.Failed == "" {
			continue
		}
		t.exec("insert failed work", `WITH ins AS (INSERT INTO work (flow, entity, event_pk, replay_id, order_key, created_at, done_at, disposition, reason)
				VALUES ($1, $2, $5, $6, $4, $3, $3, 'dead_lettered', $7) ON CONFLICT (flow, event_pk, replay_id) DO NOTHING RETURNING 1),
			up AS (UPDATE entities SET `+newestKeySet+` WHERE flow = $1 AND entity = $2 AND EXISTS (SELECT 1 FROM ins))
			INSERT INTO audit (at, actor, action, source, event_id, entity, detail)
			SELECT $3, $8, $12, $9, $10, $2, $11 WHERE EXISTS (SELECT 1 FROM ins)`,
			r.Flow, r.Entity, now, r.OrderKey, it.EventPK, replayID, r.Failed, actor, it.Source, it.EventID,
			store.RouteFailedDetail(r.Flow, r.Entity, r.Failed), store.ActionDeadLettered)
	}
	return nil
}

// newestKeySet advances an entity's newest routed order key ($4; $3 is
// now) and stamps behind_since when that makes an entity that was caught
// up fall behind. Every SET expression reads the row as it was before the
// UPDATE, so the CASE sees the old newest_key. The keys are COLLATE "C"
// columns, which the parameter takes on: byte order, as in SQLite.
const newestKeySet = `behind_since = CASE WHEN newest_key <= settled_key AND $4 > settled_key THEN $3 ELSE behind_since END,
	newest_key = GREATEST(newest_key, $4)`

// EntityClaim leases ready entities. SKIP LOCKED lets claimers in several
// processes run at once: each passes over rows another is claiming (or
// applying to) instead of waiting, and re-checks the lease on the rows it
// locks, so no entity is leased twice. The candidates are MATERIALIZED so
// the locking select runs exactly once. Tokens come from gen_random_uuid
// (built in since PostgreSQL 13), one per row.
func (s *Store) EntityClaim(ctx context.Context, p *store.EntityClaimParams) ([]*store.Lease, error) {
	return p.Lease(func(limit int) ([]*store.Lease, error) {
		rows, err := s.pool.Query(ctx, entityClaimSQL, entityClaimArgs(p, limit)...)
		if err != nil {
			return nil, fmt.Errorf("claim entities: %w", err)
		}
		got, err := pgx.CollectRows(rows, scanClaimedEntity)
		if err != nil {
			return nil, fmt.Errorf("claim entities: %w", err)
		}
		return store.ClaimOrder(got), nil
	})
}

// EntitiesLease is EntityClaim's statement inside another transaction
// (store.RouteTx): routing's, which leases what it made ready. With
// p.List, the same statement reads each leased entity's first p.List
// pending items into its lease (leaseListedSQL): listed by a statement
// of their own (WorkListLeased), they cost a lone webhook's routing a
// round trip more.
func (a txn) EntitiesLease(ctx context.Context, p *store.EntityClaimParams) ([]*store.Lease, error) {
	return p.Lease(func(limit int) ([]*store.Lease, error) {
		if p.List > 0 {
			return a.leaseListed(ctx, p, limit)
		}
		var got []store.ClaimedEntity
		err := a.t.query(ctx, "claim entities", entityClaimSQL, entityClaimArgs(p, limit), func(rows pgx.Rows) error {
			var err error
			got, err = pgx.CollectRows(rows, scanClaimedEntity)
			return err
		})
		if err != nil {
			return nil, err
		}
		return store.ClaimOrder(got), nil
	})
}

// entityClaimSQL leases up to $2 ready entities: entityReadySQL picks
// them (c), entityLeaseSQL leases them.
const entityClaimSQL = `WITH c AS MATERIALIZED (` + entityReadySQL + `)
	` + entityLeaseSQL

const (
	entityReadySQL = `SELECT flow, entity FROM entities
		WHERE pending > 0 AND lease_until <= $1 AND not_before <= $1
		ORDER BY not_before, flow COLLATE "C", entity COLLATE "C"
		LIMIT $2 FOR UPDATE SKIP LOCKED`
	entityLeaseSQL = `UPDATE entities e SET lease_token = $3 || ':' || replace(gen_random_uuid()::text, '-', ''), lease_until = $4, claimed_at = $1
	FROM c WHERE e.flow = c.flow AND e.entity = c.entity
	RETURNING e.not_before, e.flow, e.entity, e.lease_token, e.lease_until`
)

// leaseListedSQL is entityClaimSQL followed, for each entity it leases,
// by the first $5 of its pending items as listPendingGroupSQL reads them:
// one row per item, in business order within the entity, and one row
// with the item's columns NULL for an entity that has none (the lease is
// answered whatever its work). The work rows this transaction enqueued
// before are visible to it, as to any later statement.
const leaseListedSQL = `/* routing's pipe */ WITH c AS MATERIALIZED (` + entityReadySQL + `),
	l AS (` + entityLeaseSQL + `)
	SELECT l.not_before, l.flow, l.entity, l.lease_token, l.lease_until, i.*
	FROM l ` + leasedItemsSQL

// leasedPendingSQL is the first $5 pending items of a leased entity l,
// in business order.
const leasedPendingSQL = `SELECT * FROM work WHERE flow = l.flow AND entity = l.entity AND done_at IS NULL
	ORDER BY order_key, id LIMIT $5`

// leasedItemsSQL joins each lease l to its listed items with their
// events (i), a row with i's columns NULL for a lease without any, and
// orders the rows as the leases' listings are read.
const leasedItemsSQL = `LEFT JOIN LATERAL (SELECT ` + routableColumns + `, w.id, w.order_key, w.replay_id
		FROM (` + leasedPendingSQL + `) w
		CROSS JOIN LATERAL (SELECT * FROM events WHERE pk = w.event_pk LIMIT 1) e
		` + firstDeliveryJoin + `) i ON true
	ORDER BY l.flow, l.entity, i.order_key, i.id`

// leaseListed leases up to limit entities with their first p.List
// pending items (leaseListedSQL), in claim order. With p.ReadAhead, the
// same round trip reads what the settle's ReadGroup will (ahead.go).
func (a txn) leaseListed(ctx context.Context, p *store.EntityClaimParams, limit int) ([]*store.Lease, error) {
	var got []store.ClaimedEntity
	var ahead *groupAhead
	var proj *store.EntityRead // each row's projection, with ahead
	sql := leaseListedSQL
	if p.ReadAhead {
		sql, ahead, proj = leaseAheadSQL, &groupAhead{entities: map[[2]string]aheadEntity{}}, &store.EntityRead{}
	}
	a.t.beforeReads()
	a.t.later("claim entities", sql, append(entityClaimArgs(p, limit), int32(store.ClampLimit(p.List))), func(rows pgx.Rows) error {
		for rows.Next() {
			c, w, err := scanLeaseListed(rows, proj)
			if err != nil {
				return err
			}
			if n := len(got); n == 0 || got[n-1].Lease.Flow != c.Lease.Flow || got[n-1].Lease.Entity != c.Lease.Entity {
				got = append(got, c)
				if ahead != nil {
					ahead.entities[[2]string{c.Lease.Flow, c.Lease.Entity}] = aheadEntity{token: c.Lease.Token, until: c.Lease.Until, read: *proj}
				}
			}
			if w != nil {
				l := got[len(got)-1].Lease
				l.Pending = append(l.Pending, w)
			}
		}
		return rows.Err()
	})
	if ahead != nil {
		a.t.exec("lock listed events", lockListedEventsSQL)
		a.t.later("read listed work", readListedWorkSQL, nil, func(rows pgx.Rows) error {
			return scanBatchWork(rows, &ahead.work)
		})
	}
	if err := a.t.flush(ctx); err != nil {
		return nil, err
	}
	if ahead != nil && len(got) > 0 {
		ahead.statements = a.t.statements
		a.t.ahead = ahead
	}
	return store.ClaimOrder(got), nil
}

// scanLeaseListed reads a row of leaseListedSQL: the lease, and its item
// (nil where the row carries none). With proj, the row is leaseAheadSQL's,
// and proj gets the entity's projection.
func scanLeaseListed(row pgx.Row, proj *store.EntityRead) (store.ClaimedEntity, *store.WorkItem, error) {
	c := store.ClaimedEntity{Lease: &store.Lease{}}
	var nb pgtype.Timestamptz
	var (
		pk, id, replayID                                              *int64
		source, eventID, typ, entity, account, causation, contentType *string
		trace, orderKey                                               *string
		occurred, received                                            *time.Time
		hop                                                           *int
		body                                                          []byte
		state                                                         string
	)
	dests := []any{&nb, &c.Lease.Flow, &c.Lease.Entity, &c.Lease.Token, &c.Lease.Until,
		&pk, &source, &eventID, &typ, &entity, &account, &occurred, &received,
		&causation, &hop, &body, &contentType, &trace, &id, &orderKey, &replayID}
	if proj != nil {
		dests = append(dests, &proj.Version, &proj.VersionSort, &state, &proj.Pending)
	}
	if err := row.Scan(dests...); err != nil {
		return c, nil, err
	}
	if proj != nil {
		proj.State = []byte(state)
	}
	if nb.InfinityModifier == pgtype.Finite {
		c.NotBefore = nb.Time
	}
	c.Lease.Until = c.Lease.Until.UTC()
	if id == nil {
		return c, nil, nil
	}
	w := &store.WorkItem{ID: *id, Flow: c.Lease.Flow, Entity: c.Lease.Entity, OrderKey: *orderKey, ReplayID: *replayID,
		Event: store.RoutableEvent{PK: *pk, Source: *source, EventID: *eventID, Type: *typ, Entity: *entity, Account: *account,
			OccurredAt: fromNull(occurred), ReceivedAt: received.UTC(), CausationID: *causation, Hop: *hop, Body: body,
			ContentType: *contentType, TraceContext: *trace}}
	return c, w, nil
}

// entityClaimArgs is entityClaimSQL's arguments for p, leasing up to
// limit (what EntityClaimParams.Lease allows).
func entityClaimArgs(p *store.EntityClaimParams, limit int) []any {
	return []any{p.Now, store.ClampLimit(limit), p.Owner, p.Now.Add(p.LeaseFor)}
}

func scanClaimedEntity(r pgx.CollectableRow) (store.ClaimedEntity, error) {
	c := store.ClaimedEntity{Lease: &store.Lease{}}
	// -infinity (never deferred) sorts as the zero time.
	var nb pgtype.Timestamptz
	if err := r.Scan(&nb, &c.Lease.Flow, &c.Lease.Entity, &c.Lease.Token, &c.Lease.Until); err != nil {
		return c, err
	}
	if nb.InfinityModifier == pgtype.Finite {
		c.NotBefore = nb.Time
	}
	c.Lease.Until = c.Lease.Until.UTC()
	return c, nil
}

// EntityLeaseFree frees the lease (store.ApplyTx).
func (a txn) EntityLeaseFree(_ context.Context, p *store.EntityReleaseParams) error {
	a.t.exec("release entity", `UPDATE entities SET lease_token = '', lease_until = '-infinity',
		not_before = coalesce($1::timestamptz, not_before) WHERE flow = $2 AND entity = $3 AND lease_token = $4`,
		nullTime(p.RetryAt), p.Lease.Flow, p.Lease.Entity, p.Lease.Token)
	return nil
}

// WorkListPendingGroup reads several entities' pending work in one query.
func (s *Store) WorkListPendingGroup(ctx context.Context, ps []*store.WorkListPendingParams) ([][]*store.WorkItem, error) {
	rows, err := s.pool.Query(ctx, listPendingGroupSQL, listPendingGroupArgs(ps)...)
	if err != nil {
		return nil, fmt.Errorf("list pending work: %w", err)
	}
	defer rows.Close()
	out, err := scanPendingGroup(rows, len(ps))
	if err != nil {
		return nil, fmt.Errorf("list pending work: %w", err)
	}
	return out, nil
}

// WorkListLeased is WorkListPendingGroup in routing's transaction
// (store.RouteTx), which reads the work of the entities it leased.
func (a txn) WorkListLeased(ctx context.Context, ps []*store.WorkListPendingParams) ([][]*store.WorkItem, error) {
	var out [][]*store.WorkItem
	err := a.t.query(ctx, "list leased work", listLeasedSQL, listPendingGroupArgs(ps), func(rows pgx.Rows) error {
		var err error
		out, err = scanPendingGroup(rows, len(ps))
		return err
	})
	return out, err
}

func listPendingGroupArgs(ps []*store.WorkListPendingParams) []any {
	flows, entities, limits := make([]string, len(ps)), make([]string, len(ps)), make([]int32, len(ps))
	for i, p := range ps {
		flows[i], entities[i], limits[i] = p.Flow, p.Entity, int32(store.ClampLimit(p.Limit))
	}
	return []any{flows, entities, limits}
}

// scanPendingGroup reads listPendingGroupSQL's rows into each of the n
// entities' pages.
func scanPendingGroup(rows pgx.Rows, n int) ([][]*store.WorkItem, error) {
	out := make([][]*store.WorkItem, n)
	for rows.Next() {
		w := &store.WorkItem{}
		var i int64 // WITH ORDINALITY counts from 1
		if err := scanRoutable(rows, &w.Event, &w.ID, &w.Flow, &w.Entity, &w.OrderKey, &w.ReplayID, &i); err != nil {
			return nil, err
		}
		if i < 1 || int(i) > n {
			return nil, fmt.Errorf("row for entity %d of %d", i, n)
		}
		out[i-1] = append(out[i-1], w)
	}
	return out, rows.Err()
}

// WorkListPending returns one entity's unsettled work in business order
// (order_key is COLLATE "C": byte order, as in SQLite).
func (s *Store) WorkListPending(ctx context.Context, p *store.WorkListPendingParams) ([]*store.WorkItem, error) {
	rows, err := s.pool.Query(ctx, listPendingSQL, p.Flow, p.Entity, store.ClampLimit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("list pending work: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.WorkItem, error) {
		w := &store.WorkItem{}
		return w, scanRoutable(r, &w.Event, &w.ID, &w.Flow, &w.Entity, &w.OrderKey, &w.ReplayID)
	})
	if err != nil {
		return nil, fmt.Errorf("list pending work: %w", err)
	}
	return out, nil
}

// ProjectionGet returns one entity's projection, or nil when it has none.
func (s *Store) ProjectionGet(ctx context.Context, p *store.ProjectionGetParams) (*store.Projection, error) {
	pr := &store.Projection{}
	var state string
	var applied *int64
	err := s.pool.QueryRow(ctx, `SELECT flow, entity, version, version_sort, state::text, applied_event_pk, updated_at, pending
		FROM entities WHERE flow = $1 AND entity = $2`, p.Flow, p.Entity).
		Scan(&pr.Flow, &pr.Entity, &pr.Version, &pr.VersionSort, &state, &applied, &pr.UpdatedAt, &pr.Pending)
	if err != nil {
		return store.NoRow[store.Projection](err, pgx.ErrNoRows, "get projection %s/%s", p.Flow, p.Entity)
	}
	pr.State = []byte(state)
	if applied != nil {
		pr.AppliedEventPK = *applied
	}
	pr.UpdatedAt = pr.UpdatedAt.UTC()
	return pr, nil
}

// effectEntityAnyFlow finds an entity's effects without their flow through
// the (flow, entity, ...) index: one probe per distinct flow, the flows
// enumerated by skipping through the index from one to the next (a handful,
// the configured ones), so no index on entity alone is needed on the
// pipeline's write path.
const effectEntityAnyFlow = `f.flow IN (WITH RECURSIVE fl(n) AS (
		SELECT min(flow) FROM effects
		UNION ALL SELECT (SELECT min(flow) FROM effects WHERE flow > fl.n) FROM fl WHERE fl.n IS NOT NULL)
	SELECT n FROM fl WHERE n IS NOT NULL) AND f.entity = ?`

// EffectList pages through the effect ledger in id order.
func (s *Store) EffectList(ctx context.Context, p *store.EffectListParams) ([]*store.Effect, error) {
	q, args := effectListSQL(p)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list effects: %w", err)
	}
	out, err := collectEffects(rows)
	if err != nil {
		return nil, fmt.Errorf("list effects: %w", err)
	}
	return out, nil
}

// effectListSQL is EffectList's query and arguments.
func effectListSQL(p *store.EffectListParams) (string, []any) {
	f := &filter{}
	f.add("f.id > ?", p.AfterID)
	if p.Flow != "" {
		// effects_flow's predicate (0017_effects_flow_partial).
		f.add("f.flow = ? AND f.flow <> ''", p.Flow)
	}
	switch {
	case p.Entity != "" && p.Flow != "":
		f.add("f.entity = ?", p.Entity)
	case p.Entity != "":
		f.add(effectEntityAnyFlow, p.Entity)
	}
	if states := p.StateSet(); len(states) > 0 {
		names := make([]string, len(states))
		for i, st := range states {
			names[i] = string(st)
		}
		f.add("f.state = ANY(?)", names)
	}
	f.eq("f.destination", p.Destination)
	// The literals repeat each partial index's predicate, so that the index
	// is provably usable by a generic plan.
	if p.Owner != "" {
		f.add("f.owner = ? AND f.owner <> ''", p.Owner)
	}
	if p.Class != "" {
		f.add("f.error_class = ? AND f.error_class <> ''", string(p.Class))
	}
	// effects_deadline_missed and effects_compensation hold only these
	// rows (few: the escalated and the compensations).
	if p.DeadlineMissed {
		f.add("f.deadline_missed_at IS NOT NULL")
	}
	if p.Compensations {
		f.add("f.compensates <> 0")
	}
	f.span("f.created_at", p.CreatedFrom, p.CreatedTo)
	f.span("f.updated_at", p.UpdatedFrom, p.UpdatedTo)
	cols := effectColumns
	if p.WithoutRequest {
		cols = effectColumnsWithoutRequest
	}
	return `SELECT ` + cols + effectFrom + f.sql(store.ClampLimit(p.Limit)), f.args
}

func (a txn) ReplayInsert(ctx context.Context, p *store.ReplayCreateParams) (int64, error) {
	var id int64
	err := a.t.query(ctx, "insert replay", `INSERT INTO replays (created_at, actor, selection, items, planned, effect_floor)
		VALUES ($1, $2, $3, 0, false, (SELECT coalesce(max(id), 0) FROM effects)) RETURNING id`,
		[]any{p.Now, p.Actor, p.Selection}, func(rows pgx.Rows) error {
			if !rows.Next() {
				return errors.New("no replay id returned")
			}
			return rows.Scan(&id)
		})
	return id, err
}

// WorkEnqueue queues enqueue's one statement for the whole page.
func (a txn) WorkEnqueue(ctx context.Context, p *store.EnqueueParams) error {
	return enqueue(ctx, a.t, p.Now, p.Items, p.ReplayID, p.Actor, p.Pending)
}

// ReplayItems finds the pass's work rows through the events' index.
func (a txn) ReplayItems(ctx context.Context, id int64, pks []int64) (int64, error) {
	var n int64
	err := a.t.query(ctx, "count replay items", `UPDATE replays SET items = items + (SELECT count(*) FROM work
			WHERE event_pk = ANY($2) AND replay_id = $1) WHERE id = $1 RETURNING items`, []any{id, pks}, func(rows pgx.Rows) error {
		if !rows.Next() {
			return errors.New("replay vanished")
		}
		return rows.Scan(&n)
	})
	return n, err
}

func (a txn) ReplayPlanned(ctx context.Context, id int64) (int64, error) {
	var n int64
	err := a.t.query(ctx, "mark replay planned", `UPDATE replays SET planned = true WHERE id = $1 RETURNING items`, []any{id},
		func(rows pgx.Rows) error {
			if !rows.Next() {
				return errors.New("replay vanished")
			}
			return rows.Scan(&n)
		})
	return n, err
}

// ReplayCounts counts through work_replay, whose condition the query
// repeats so that a generic plan may use it; the effects after the floor
// are matched to the replay's work through its unique key.
func (a txn) ReplayCounts(ctx context.Context, id int64) (*store.ReplayProgress, error) {
	var out *store.ReplayProgress
	err := a.t.query(ctx, "read replay", `SELECT r.planned, r.items,
			(SELECT count(*) FROM effects f WHERE f.id > r.effect_floor AND EXISTS (SELECT 1 FROM work w
				WHERE w.event_pk = f.source_event_pk AND w.replay_id = r.id AND w.flow = f.flow AND w.entity = f.entity))
		FROM replays r WHERE r.id = $1`, []any{id}, func(rows pgx.Rows) error {
		if !rows.Next() {
			return nil
		}
		out = &store.ReplayProgress{Settled: map[store.Disposition]int64{}}
		return rows.Scan(&out.Planned, &out.Items, &out.EffectsCreated)
	})
	if err != nil || out == nil {
		return nil, err
	}
	err = a.t.query(ctx, "count replay work", `SELECT disposition, count(*) FROM work
		WHERE replay_id = $1 AND replay_id <> 0 AND disposition <> '' GROUP BY disposition`, []any{id}, func(rows pgx.Rows) error {
		for rows.Next() {
			var d string
			var n int64
			if err := rows.Scan(&d, &n); err != nil {
				return err
			}
			out.Settled[store.Disposition(d)] = n
		}
		return rows.Err()
	})
	return out, err
}

// WorkCount counts pending work items plus accepted events not yet routed.
func (s *Store) WorkCount(ctx context.Context) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM work WHERE done_at IS NULL) +
		(SELECT count(*) FROM events WHERE NOT routed AND disposition = 'accepted') +
		(SELECT count(*) FROM route_queue)`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count work: %w", err)
	}
	return n, nil
}
