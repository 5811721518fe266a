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
//   - routers lock the events they route (in pk order) before any entity,
//     and only events not yet routed;
//   - routers and replays lock entities in (flow, entity) order;
//   - FlowApply locks its one entity first (the fencing update) and an
//     event last, and only events that are already routed.

var _ store.Pipeline = (*Store)(nil)

// routableColumns selects a RoutableEvent from events e joined to its first
// delivery d (the lowest delivery id): the body, causation and hop the
// processor sees are those of the first receipt, whatever the retries sent.
const routableColumns = `e.pk, e.source, e.event_id, e.type, e.entity, e.account, e.occurred_at, e.received_at,
	d.causation_id, d.hop, d.body`

const firstDeliveryJoin = `JOIN deliveries d ON d.id = (SELECT min(id) FROM deliveries WHERE event_pk = e.pk)`

func scanRoutable(row pgx.Row, e *store.RoutableEvent, extra ...any) error {
	var occ *time.Time
	dest := append([]any{&e.PK, &e.Source, &e.EventID, &e.Type, &e.Entity, &e.Account, &occ, &e.ReceivedAt,
		&e.CausationID, &e.Hop, &e.Body}, extra...)
	if err := row.Scan(dest...); err != nil {
		return err
	}
	e.OccurredAt = fromNull(occ)
	e.ReceivedAt = e.ReceivedAt.UTC()
	return nil
}

// EventListUnrouted returns accepted events not yet routed, in pk order.
func (s *Store) EventListUnrouted(ctx context.Context, p *store.EventListUnroutedParams) ([]*store.RoutableEvent, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+routableColumns+` FROM events e `+firstDeliveryJoin+`
		WHERE NOT e.routed AND e.disposition = 'accepted' ORDER BY e.pk LIMIT $1`, store.ClampLimit(p.Limit))
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

// eventRef is what audit rows and dispositions need of an event.
type eventRef struct {
	pk          int64
	source      string
	eventID     string
	typ         string
	entity      string
	disposition store.Disposition
}

// routed is one route of one event, ready to enqueue.
type routed struct {
	ev    eventRef
	route store.Route
}

// EventRoute records the decisions in one transaction. Each event is
// claimed first by setting its routed flag under a row lock: a second
// router blocks on that lock, then finds the event routed and skips the
// decision as a whole, so concurrent routing creates no duplicate work.
func (s *Store) EventRoute(ctx context.Context, p *store.EventRouteParams) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		decisions := slices.Clone(p.Decisions)
		slices.SortStableFunc(decisions, func(a, b *store.RouteDecision) int { return cmp.Compare(a.EventPK, b.EventPK) })
		var claimed []eventRef
		var items []routed
		for _, d := range decisions {
			var ev eventRef
			err := tx.QueryRow(ctx, `UPDATE events SET routed = true WHERE pk = $1 AND NOT routed
				RETURNING pk, source, event_id, type, entity, disposition`, d.EventPK).
				Scan(&ev.pk, &ev.source, &ev.eventID, &ev.typ, &ev.entity, &ev.disposition)
			if errors.Is(err, pgx.ErrNoRows) {
				continue // already routed, or no such event
			}
			if err != nil {
				return fmt.Errorf("event %d: mark routed: %w", d.EventPK, err)
			}
			claimed = append(claimed, ev)
			if len(d.Routes) == 0 {
				if ev.disposition != store.DispositionAccepted {
					continue
				}
				if _, err := tx.Exec(ctx, `UPDATE events SET disposition = 'unrouted' WHERE pk = $1`, ev.pk); err != nil {
					return fmt.Errorf("event %d: set unrouted: %w", ev.pk, err)
				}
				if _, err := tx.Exec(ctx, insertAuditSQL, p.Now, "router", "disposition", ev.source, ev.eventID, ev.entity,
					fmt.Sprintf("accepted -> unrouted: no flow subscribes to type %q", ev.typ)); err != nil {
					return fmt.Errorf("event %d: %w", ev.pk, wrapErr("insert audit", err))
				}
				continue
			}
			for _, r := range d.Routes {
				items = append(items, routed{ev: ev, route: r})
			}
		}
		if _, err := enqueue(ctx, tx, p.Now, items, 0, "router"); err != nil {
			return err
		}
		for _, ev := range claimed {
			if err := settleEvent(ctx, tx, ev.pk, 0, p.Now, "router"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("route events: %w", err)
	}
	return nil
}

// enqueue creates the work rows of routes for one pass, in (flow, entity)
// order, and returns how many pending rows it inserted. Failed routes are
// inserted already settled as dead letters.
func enqueue(ctx context.Context, tx pgx.Tx, now time.Time, items []routed, replayID int64, actor string) (int, error) {
	slices.SortStableFunc(items, func(a, b routed) int {
		return cmp.Or(cmp.Compare(a.route.Flow, b.route.Flow), cmp.Compare(a.route.Entity, b.route.Entity))
	})
	inserted := 0
	for _, it := range items {
		r, ev := it.route, it.ev
		if _, err := tx.Exec(ctx, `INSERT INTO entities (flow, entity, updated_at) VALUES ($1, $2, $3)
			ON CONFLICT (flow, entity) DO NOTHING`, r.Flow, r.Entity, now); err != nil {
			return 0, fmt.Errorf("upsert entity %s/%s: %w", r.Flow, r.Entity, err)
		}
		if r.Failed != "" {
			tag, err := tx.Exec(ctx, `INSERT INTO work (flow, entity, event_pk, replay_id, order_key, created_at, done_at, disposition, reason)
				VALUES ($1, $2, $3, $4, $5, $6, $6, 'dead_lettered', $7) ON CONFLICT (flow, event_pk, replay_id) DO NOTHING`,
				r.Flow, r.Entity, ev.pk, replayID, r.OrderKey, now, r.Failed)
			if err != nil {
				return 0, fmt.Errorf("insert failed work for %s: %w", r.Flow, err)
			}
			if tag.RowsAffected() == 0 {
				continue
			}
			// A route that failed is still the entity's newest news: it
			// counts for revision_lag like any other (rare, so a statement
			// of its own).
			if _, err := tx.Exec(ctx, `UPDATE entities SET `+newestKeySet+` WHERE flow = $1 AND entity = $2`,
				r.Flow, r.Entity, now, r.OrderKey); err != nil {
				return 0, fmt.Errorf("newest key of %s/%s: %w", r.Flow, r.Entity, err)
			}
			if _, err := tx.Exec(ctx, insertAuditSQL, now, actor, "dead_lettered", ev.source, ev.eventID, r.Entity,
				fmt.Sprintf("flow %s entity %s: route failed: %s", r.Flow, r.Entity, r.Failed)); err != nil {
				return 0, wrapErr("insert audit", err)
			}
			continue
		}
		tag, err := tx.Exec(ctx, `INSERT INTO work (flow, entity, event_pk, replay_id, order_key, created_at)
			VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (flow, event_pk, replay_id) DO NOTHING`,
			r.Flow, r.Entity, ev.pk, replayID, r.OrderKey, now)
		if err != nil {
			return 0, fmt.Errorf("insert work for %s: %w", r.Flow, err)
		}
		if tag.RowsAffected() == 0 {
			continue
		}
		// An entity that becomes ready joins the back of the claim order
		// (not_before, then keys): first come, first served, so an entity
		// whose key sorts late is not starved by newer ones. A retry's
		// later not_before is kept. The same statement advances the
		// entity's newest routed key for revision_lag.
		if _, err := tx.Exec(ctx, `UPDATE entities SET pending = pending + 1,
			not_before = CASE WHEN pending = 0 AND not_before < $3 THEN $3 ELSE not_before END, `+newestKeySet+`
			WHERE flow = $1 AND entity = $2`, r.Flow, r.Entity, now, r.OrderKey); err != nil {
			return 0, fmt.Errorf("count pending %s/%s: %w", r.Flow, r.Entity, err)
		}
		inserted++
	}
	return inserted, nil
}

// newestKeySet advances an entity's newest routed order key ($4; $3 is
// now) and stamps behind_since when that makes an entity that was caught
// up fall behind. Every SET expression reads the row as it was before the
// UPDATE, so the CASE sees the old newest_key. The keys are COLLATE "C"
// columns, which the parameter takes on: byte order, as in SQLite.
const newestKeySet = `behind_since = CASE WHEN newest_key <= settled_key AND $4 > settled_key THEN $3 ELSE behind_since END,
	newest_key = GREATEST(newest_key, $4)`

// aggregate is the event disposition over the work rows of one pass.
func aggregate(ds []store.Disposition) store.Disposition {
	for _, d := range []store.Disposition{store.DispositionDeadLettered, store.DispositionApplied, store.DispositionDuplicate} {
		if slices.Contains(ds, d) {
			return d
		}
	}
	return store.DispositionStale
}

// settleEvent applies the aggregate rule once an event has no pending work:
// the disposition becomes the aggregate of the pass just settled, but only
// over accepted or dead_lettered (a replay repairs a dead letter and never
// downgrades an applied event). The event row is locked before counting:
// two flows settling their items of one event at once would otherwise each
// see the other's item pending and leave the event accepted forever. The
// lock is FOR NO KEY UPDATE, not FOR UPDATE: the effect inserts earlier in
// the same transaction hold FOR KEY SHARE on this row (their foreign key),
// and FOR UPDATE conflicts with another transaction's KEY SHARE, so two
// flows settling one event would deadlock. NO KEY UPDATE still serialises
// the settlers, and it is the level the disposition UPDATE takes anyway.
func settleEvent(ctx context.Context, tx pgx.Tx, eventPK, replayID int64, now time.Time, actor string) error {
	var ev eventRef
	if err := tx.QueryRow(ctx, `SELECT source, event_id, entity, disposition FROM events WHERE pk = $1 FOR NO KEY UPDATE`, eventPK).
		Scan(&ev.source, &ev.eventID, &ev.entity, &ev.disposition); err != nil {
		return fmt.Errorf("lock event %d: %w", eventPK, err)
	}
	var pending int64
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM work WHERE event_pk = $1 AND done_at IS NULL`, eventPK).Scan(&pending); err != nil {
		return fmt.Errorf("count pending work of event %d: %w", eventPK, err)
	}
	if pending > 0 {
		return nil
	}
	rows, err := tx.Query(ctx, `SELECT disposition FROM work WHERE event_pk = $1 AND replay_id = $2`, eventPK, replayID)
	if err != nil {
		return fmt.Errorf("aggregate event %d: %w", eventPK, err)
	}
	ds, err := pgx.CollectRows(rows, pgx.RowTo[store.Disposition])
	if err != nil {
		return fmt.Errorf("aggregate event %d: %w", eventPK, err)
	}
	if len(ds) == 0 {
		return nil
	}
	agg := aggregate(ds)
	if ev.disposition == agg || (ev.disposition != store.DispositionAccepted && ev.disposition != store.DispositionDeadLettered) {
		return nil
	}
	if _, err := tx.Exec(ctx, `UPDATE events SET disposition = $1 WHERE pk = $2`, agg, eventPK); err != nil {
		return fmt.Errorf("set disposition of event %d: %w", eventPK, err)
	}
	if _, err := tx.Exec(ctx, insertAuditSQL, now, actor, "disposition", ev.source, ev.eventID, ev.entity,
		fmt.Sprintf("%s -> %s", ev.disposition, agg)); err != nil {
		return wrapErr("insert audit", err)
	}
	return nil
}

// EntityClaim leases ready entities. SKIP LOCKED lets claimers in several
// processes run at once: each passes over rows another is claiming (or
// applying to) instead of waiting, and re-checks the lease on the rows it
// locks, so no entity is leased twice. The candidates are MATERIALIZED so
// the locking select runs exactly once. Tokens come from gen_random_uuid
// (built in since PostgreSQL 13), one per row.
func (s *Store) EntityClaim(ctx context.Context, p *store.EntityClaimParams) ([]*store.Lease, error) {
	rows, err := s.pool.Query(ctx, `WITH c AS MATERIALIZED (
			SELECT flow, entity FROM entities
			WHERE pending > 0 AND lease_until <= $1 AND not_before <= $1
			ORDER BY not_before, flow COLLATE "C", entity COLLATE "C"
			LIMIT $2 FOR UPDATE SKIP LOCKED)
		UPDATE entities e SET lease_token = $3 || ':' || replace(gen_random_uuid()::text, '-', ''), lease_until = $4
		FROM c WHERE e.flow = c.flow AND e.entity = c.entity
		RETURNING e.not_before, e.flow, e.entity, e.lease_token, e.lease_until`,
		p.Now, store.ClampLimit(p.Limit), p.Owner, p.Now.Add(p.LeaseFor))
	if err != nil {
		return nil, fmt.Errorf("claim entities: %w", err)
	}
	type claimed struct {
		notBefore time.Time
		lease     *store.Lease
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (claimed, error) {
		c := claimed{lease: &store.Lease{}}
		// -infinity (never deferred) sorts as the zero time.
		var nb pgtype.Timestamptz
		if err := r.Scan(&nb, &c.lease.Flow, &c.lease.Entity, &c.lease.Token, &c.lease.Until); err != nil {
			return c, err
		}
		if nb.InfinityModifier == pgtype.Finite {
			c.notBefore = nb.Time
		}
		c.lease.Until = c.lease.Until.UTC()
		return c, nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim entities: %w", err)
	}
	// RETURNING keeps no order: restore the claim order.
	slices.SortFunc(got, func(a, b claimed) int {
		return cmp.Or(a.notBefore.Compare(b.notBefore), cmp.Compare(a.lease.Flow, b.lease.Flow), cmp.Compare(a.lease.Entity, b.lease.Entity))
	})
	out := make([]*store.Lease, len(got))
	for i, c := range got {
		out[i] = c.lease
	}
	return out, nil
}

// EntityRelease frees a lease that the token still holds; a lease already
// lost to another worker is left alone and is not an error, because the
// releasing worker has nothing left to do either way.
func (s *Store) EntityRelease(ctx context.Context, p *store.EntityReleaseParams) error {
	if p.Lease == nil {
		return errors.New("release entity: no lease")
	}
	if _, err := s.pool.Exec(ctx, `UPDATE entities SET lease_token = '', lease_until = '-infinity',
		not_before = coalesce($1::timestamptz, not_before) WHERE flow = $2 AND entity = $3 AND lease_token = $4`,
		nullTime(p.RetryAt), p.Lease.Flow, p.Lease.Entity, p.Lease.Token); err != nil {
		return fmt.Errorf("release entity %s/%s: %w", p.Lease.Flow, p.Lease.Entity, err)
	}
	return nil
}

// WorkListPending returns one entity's unsettled work in business order
// (order_key is COLLATE "C": byte order, as in SQLite).
func (s *Store) WorkListPending(ctx context.Context, p *store.WorkListPendingParams) ([]*store.WorkItem, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+routableColumns+`, w.id, w.flow, w.entity, w.order_key, w.replay_id
		FROM work w JOIN events e ON e.pk = w.event_pk `+firstDeliveryJoin+`
		WHERE w.flow = $1 AND w.entity = $2 AND w.done_at IS NULL
		ORDER BY w.order_key, w.id LIMIT $3`, p.Flow, p.Entity, store.ClampLimit(p.Limit))
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

// FlowApply settles one work item in one pipelined transaction by the
// ledger's rules (store.RunFlowApply); any error rolls the whole of it
// back.
func (s *Store) FlowApply(ctx context.Context, p *store.FlowApplyParams) (*store.FlowApplyResult, error) {
	if p.Lease == nil {
		return nil, errors.New("flow apply: no lease")
	}
	var res *store.FlowApplyResult
	err := s.inPipe(ctx, func(t *pipeTx) error {
		var err error
		res, err = store.RunFlowApply(ctx, applyTx{t}, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("flow apply %s/%s work %d: %w", p.Lease.Flow, p.Lease.Entity, p.WorkID, err)
	}
	return res, nil
}

// ProjectionGet returns one entity's projection, or nil when it has none.
func (s *Store) ProjectionGet(ctx context.Context, p *store.ProjectionGetParams) (*store.Projection, error) {
	pr := &store.Projection{}
	var state string
	var applied *int64
	err := s.pool.QueryRow(ctx, `SELECT flow, entity, version, version_sort, state::text, applied_event_pk, updated_at, pending
		FROM entities WHERE flow = $1 AND entity = $2`, p.Flow, p.Entity).
		Scan(&pr.Flow, &pr.Entity, &pr.Version, &pr.VersionSort, &state, &applied, &pr.UpdatedAt, &pr.Pending)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get projection %s/%s: %w", p.Flow, p.Entity, err)
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
	f := &filter{}
	f.add("f.id > ?", p.AfterID)
	f.eq("f.flow", p.Flow)
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
	rows, err := s.pool.Query(ctx, `SELECT `+effectColumns+effectFrom+f.sql(store.ClampLimit(p.Limit)), f.args...)
	if err != nil {
		return nil, fmt.Errorf("list effects: %w", err)
	}
	out, err := collectEffects(rows)
	if err != nil {
		return nil, fmt.Errorf("list effects: %w", err)
	}
	return out, nil
}

// ReplayCreate records a replay and enqueues a new pass of work for its
// routes. The replays row counts the work items actually enqueued.
func (s *Store) ReplayCreate(ctx context.Context, p *store.ReplayCreateParams) (int64, error) {
	var id int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO replays (created_at, actor, selection, items) VALUES ($1, $2, $3, 0) RETURNING id`,
			p.Now, p.Actor, p.Selection).Scan(&id); err != nil {
			return fmt.Errorf("insert replay: %w", err)
		}
		var items []routed
		for _, d := range p.Decisions {
			for _, r := range d.Routes {
				if r.Failed == "" {
					items = append(items, routed{ev: eventRef{pk: d.EventPK}, route: r})
				}
			}
		}
		n, err := enqueue(ctx, tx, p.Now, items, id, p.Actor)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE replays SET items = $1 WHERE id = $2`, n, id); err != nil {
			return fmt.Errorf("count replay items: %w", err)
		}
		if _, err := tx.Exec(ctx, insertAuditSQL, p.Now, p.Actor, "replay", "", "", "",
			fmt.Sprintf("replay %d: %d work items for %s", id, n, p.Selection)); err != nil {
			return wrapErr("insert audit", err)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("create replay: %w", err)
	}
	return id, nil
}

// WorkCount counts pending work items plus accepted events not yet routed.
func (s *Store) WorkCount(ctx context.Context) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM work WHERE done_at IS NULL) +
		(SELECT count(*) FROM events WHERE NOT routed AND disposition = 'accepted')`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count work: %w", err)
	}
	return n, nil
}
