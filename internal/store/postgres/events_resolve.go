package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/store"
)

// EventResolve closes a dead-lettered event by hand (see
// store.EventResolver).
func (s *Store) EventResolve(ctx context.Context, p *store.EventResolveParams) (*store.Event, error) {
	if err := store.CheckEventResolve(p); err != nil {
		return nil, fmt.Errorf("resolve event: %w", err)
	}
	what := fmt.Sprintf("resolve event %s/%s", p.Source, p.EventID)
	var pk int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		pk, err = resolveEvent(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	// Read back through EventList so the caller sees the event exactly as
	// the list shows it, routes included.
	res, err := s.EventList(ctx, &store.EventListParams{AfterPK: pk - 1, Limit: 1, WithRoutes: true})
	if err != nil {
		return nil, fmt.Errorf("%s: resolved, but reading it back failed: %w", what, err)
	}
	if len(res.Events) != 1 || res.Events[0].PK != pk {
		return nil, fmt.Errorf("%s: resolved, but reading it back found nothing: %w", what, store.ErrNotFound)
	}
	return res.Events[0], nil
}

func resolveEvent(ctx context.Context, tx pgx.Tx, p *store.EventResolveParams) (int64, error) {
	var pk int64
	var entity string
	var disposition store.Disposition
	// The event row is locked as settleEvent locks it (FOR NO KEY UPDATE,
	// for the same reason): a worker settling a replay of this event and
	// the resolve take turns, so the pending count below stays true until
	// commit.
	err := tx.QueryRow(ctx, `SELECT pk, entity, disposition FROM events WHERE source = $1 AND event_id = $2 FOR NO KEY UPDATE`,
		p.Source, p.EventID).Scan(&pk, &entity, &disposition)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("event: %w", store.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("read event: %w", err)
	}
	if disposition != store.DispositionDeadLettered {
		return 0, &store.EventStateError{Disposition: disposition}
	}
	// A replay of the event still in flight may yet repair it: closing it
	// by hand now would race the worker, so the operator waits for it.
	var pending int64
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM work WHERE event_pk = $1 AND done_at IS NULL`, pk).Scan(&pending); err != nil {
		return 0, fmt.Errorf("count pending work: %w", err)
	}
	if pending > 0 {
		return 0, &store.EventStateError{Disposition: disposition, Pending: pending}
	}
	// Reason and done_at stay: why the item failed is the evidence the
	// note answers.
	rows, err := tx.Query(ctx, `UPDATE work SET disposition = 'resolved'
		WHERE event_pk = $1 AND disposition = 'dead_lettered' RETURNING flow, entity, order_key`, pk)
	if err != nil {
		return 0, fmt.Errorf("resolve work: %w", err)
	}
	closed, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.ResolvedWork, error) {
		var w store.ResolvedWork
		err := r.Scan(&w.Flow, &w.Entity, &w.OrderKey)
		return w, err
	})
	if err != nil {
		return 0, fmt.Errorf("resolve work: %w", err)
	}
	// Sorted, so that concurrent resolves lock entity rows in one order.
	store.SortResolvedWork(closed)
	// A resolved item is settled for revision_lag, as FlowApply counts an
	// applied one: the entity is no longer behind because of it. An older
	// key leaves settled_key as it is.
	for _, w := range closed {
		if _, err := tx.Exec(ctx, `UPDATE entities SET settled_key = GREATEST(settled_key, $1) WHERE flow = $2 AND entity = $3`,
			w.OrderKey, w.Flow, w.Entity); err != nil {
			return 0, fmt.Errorf("settle %s/%s: %w", w.Flow, w.Entity, err)
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE events SET disposition = 'resolved' WHERE pk = $1`, pk); err != nil {
		return 0, fmt.Errorf("set disposition: %w", err)
	}
	if _, err := tx.Exec(ctx, insertAuditSQL, p.Now, p.Actor, store.ActionEventResolved, p.Source, p.EventID, entity,
		store.EventResolveDetail(p.Note, closed)); err != nil {
		return 0, wrapErr("insert audit", err)
	}
	return pk, nil
}
