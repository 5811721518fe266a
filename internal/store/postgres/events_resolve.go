package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/store"
)

// The statements of EventResolve (store.ResolveTx).

// EventLock locks the event row as EventWork does (FOR NO KEY UPDATE, for
// the same reason): a worker settling a replay of this event and the
// resolve take turns, so the pending count stays true until commit.
func (a txn) EventLock(ctx context.Context, source, eventID string) (ev *store.ResolveEvent, found bool, err error) {
	err = a.t.query(ctx, "read event", `SELECT pk, entity, disposition FROM events WHERE source = $1 AND event_id = $2 FOR NO KEY UPDATE`,
		[]any{source, eventID}, func(rows pgx.Rows) error {
			if !rows.Next() {
				return nil
			}
			ev, found = &store.ResolveEvent{}, true
			return rows.Scan(&ev.PK, &ev.Entity, &ev.Disposition)
		})
	return ev, found, err
}

func (a txn) WorkPendingCount(ctx context.Context, eventPK int64) (n int64, err error) {
	err = a.t.query(ctx, "count pending work", `SELECT count(*) FROM work WHERE event_pk = $1 AND done_at IS NULL`,
		[]any{eventPK}, func(rows pgx.Rows) error {
			if !rows.Next() {
				return nil
			}
			return rows.Scan(&n)
		})
	return n, err
}

func (a txn) WorkResolve(ctx context.Context, eventPK int64) (out []store.ResolvedWork, err error) {
	err = a.each(ctx, "resolve work", `UPDATE work SET disposition = 'resolved'
		WHERE event_pk = $1 AND disposition = 'dead_lettered' RETURNING flow, entity, order_key`, []any{eventPK},
		func(row pgx.Row) error {
			var w store.ResolvedWork
			err := row.Scan(&w.Flow, &w.Entity, &w.OrderKey)
			out = append(out, w)
			return err
		})
	return out, err
}

func (a txn) EntitySettledKey(_ context.Context, w store.ResolvedWork) error {
	a.t.exec("settle entity", `UPDATE entities SET settled_key = GREATEST(settled_key, $1) WHERE flow = $2 AND entity = $3`,
		w.OrderKey, w.Flow, w.Entity)
	return nil
}
