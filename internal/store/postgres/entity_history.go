package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/store"
)

// EntityHistory reads the entity's work through work_entity (entity,
// event_pk) and orders it by order key: an entity's history is small next
// to the table, and sorting it costs less than one more index that every
// routed event would pay for.
func (s *Store) EntityHistory(ctx context.Context, p *store.EntityHistoryParams) ([]*store.EntityHistoryItem, error) {
	rows, err := s.pool.Query(ctx, `SELECT w.id, w.order_key, w.replay_id, w.disposition, w.reason, w.version_sort, w.done_at,
			e.pk, e.source, e.event_id, e.type, e.occurred_at, e.received_at
		FROM work w JOIN events e ON e.pk = w.event_pk
		WHERE w.entity = $1 AND w.flow = $2
		ORDER BY w.order_key, w.id LIMIT $3`, p.Entity, p.Flow, store.ClampLimit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("entity history %s/%s: %w", p.Flow, p.Entity, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.EntityHistoryItem, error) {
		it := &store.EntityHistoryItem{}
		var done, occ *time.Time
		err := r.Scan(&it.WorkID, &it.OrderKey, &it.ReplayID, &it.Disposition, &it.Reason, &it.VersionSort, &done,
			&it.EventPK, &it.Source, &it.EventID, &it.Type, &occ, &it.ReceivedAt)
		it.DoneAt, it.OccurredAt, it.ReceivedAt = fromNull(done), fromNull(occ), it.ReceivedAt.UTC()
		return it, err
	})
	if err != nil {
		return nil, fmt.Errorf("entity history %s/%s: %w", p.Flow, p.Entity, err)
	}
	return out, nil
}
