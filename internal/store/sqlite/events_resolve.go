package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/hookledger/hookledger/internal/store"
)

// EventResolve closes a dead-lettered event by hand (see
// store.EventResolver). It runs in a transaction of its own on the writer,
// like the operators' effect actions: it is rare, and must not share the
// fate of a batch of pipeline writes.
func (s *Store) EventResolve(ctx context.Context, p *store.EventResolveParams) (*store.Event, error) {
	if err := store.CheckEventResolve(p); err != nil {
		return nil, fmt.Errorf("resolve event: %w", err)
	}
	what := fmt.Sprintf("resolve event %s/%s", p.Source, p.EventID)
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: begin: %w: %w", what, store.ErrUnavailable, err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after commit
	pk, err := resolveEvent(ctx, &wtx{Tx: tx, s: s}, p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("%s: commit: %w: %w", what, store.ErrUnavailable, err)
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

func resolveEvent(ctx context.Context, tx *wtx, p *store.EventResolveParams) (int64, error) {
	var pk int64
	var entity string
	var disposition store.Disposition
	err := tx.QueryRowContext(ctx, `SELECT pk, entity, disposition FROM events WHERE source = ? AND event_id = ?`,
		p.Source, p.EventID).Scan(&pk, &entity, &disposition)
	if errors.Is(err, sql.ErrNoRows) {
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
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM work WHERE event_pk = ? AND done_at IS NULL`, pk).Scan(&pending); err != nil {
		return 0, fmt.Errorf("count pending work: %w", err)
	}
	if pending > 0 {
		return 0, &store.EventStateError{Disposition: disposition, Pending: pending}
	}
	// Reason and done_at stay: why the item failed is the evidence the
	// note answers.
	rows, err := tx.QueryContext(ctx, `UPDATE work SET disposition = 'resolved'
		WHERE event_pk = ? AND disposition = 'dead_lettered' RETURNING flow, entity, order_key`, pk)
	if err != nil {
		return 0, fmt.Errorf("resolve work: %w", err)
	}
	var closed []store.ResolvedWork
	for rows.Next() {
		var w store.ResolvedWork
		if err := rows.Scan(&w.Flow, &w.Entity, &w.OrderKey); err != nil {
			rows.Close()
			return 0, fmt.Errorf("resolve work: %w", err)
		}
		closed = append(closed, w)
	}
	if err := rows.Close(); err != nil {
		return 0, fmt.Errorf("resolve work: %w", err)
	}
	store.SortResolvedWork(closed)
	// A resolved item is settled for revision_lag, as FlowApply counts an
	// applied one: the entity is no longer behind because of it. An older
	// key leaves settled_key as it is.
	for _, w := range closed {
		if _, err := tx.ExecContext(ctx, `UPDATE entities SET settled_key = max(settled_key, ?) WHERE flow = ? AND entity = ?`,
			w.OrderKey, w.Flow, w.Entity); err != nil {
			return 0, fmt.Errorf("settle %s/%s: %w", w.Flow, w.Entity, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE events SET disposition = 'resolved' WHERE pk = ?`, pk); err != nil {
		return 0, fmt.Errorf("set disposition: %w", err)
	}
	if _, err := insertAudit(ctx, tx, &store.AuditInsertParams{At: p.Now, Actor: p.Actor, Action: store.ActionEventResolved,
		Source: p.Source, EventID: p.EventID, Entity: entity, Detail: store.EventResolveDetail(p.Note, closed)}); err != nil {
		return 0, err
	}
	return pk, nil
}
