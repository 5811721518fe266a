package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/hookledger/hookledger/internal/store"
)

// The statements of EventResolve (store.ResolveTx): its transaction runs
// alone on the writer, so the event needs no lock.

func (a txn) EventLock(ctx context.Context, source, eventID string) (*store.ResolveEvent, bool, error) {
	ev := &store.ResolveEvent{}
	err := a.tx.QueryRowContext(ctx, `SELECT pk, entity, disposition FROM events WHERE source = ? AND event_id = ?`,
		source, eventID).Scan(&ev.PK, &ev.Entity, &ev.Disposition)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	return ev, err == nil, err
}

func (a txn) WorkPendingCount(ctx context.Context, eventPK int64) (int64, error) {
	var n int64
	err := a.tx.QueryRowContext(ctx, `SELECT count(*) FROM work WHERE event_pk = ? AND done_at IS NULL`, eventPK).Scan(&n)
	return n, err
}

func (a txn) WorkResolve(ctx context.Context, eventPK int64) ([]store.ResolvedWork, error) {
	var out []store.ResolvedWork
	err := a.each(ctx, `UPDATE work SET disposition = 'resolved'
		WHERE event_pk = ? AND disposition = 'dead_lettered' RETURNING flow, entity, order_key`, []any{eventPK},
		func(sc scanner) error {
			var w store.ResolvedWork
			err := sc.Scan(&w.Flow, &w.Entity, &w.OrderKey)
			out = append(out, w)
			return err
		})
	return out, err
}

func (a txn) EntitySettledKey(ctx context.Context, w store.ResolvedWork) error {
	_, err := a.tx.ExecContext(ctx, `UPDATE entities SET settled_key = max(settled_key, ?) WHERE flow = ? AND entity = ?`,
		w.OrderKey, w.Flow, w.Entity)
	return err
}
