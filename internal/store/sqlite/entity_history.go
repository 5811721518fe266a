package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/hookledger/hookledger/internal/store"
)

// EntityHistory reads the entity's work through work_entity (entity,
// event_pk) and orders it by order key: an entity's history is small next
// to the table, and sorting it costs less than one more index that every
// routed event would pay for.
func (s *Store) EntityHistory(ctx context.Context, p *store.EntityHistoryParams) ([]*store.EntityHistoryItem, error) {
	rows, err := s.readQuery(ctx, `SELECT w.id, w.order_key, w.replay_id, w.disposition, w.reason, w.version_sort, w.done_at,
			e.pk, e.source, e.event_id, e.type, e.occurred_at, e.received_at
		FROM work w JOIN events e ON e.pk = w.event_pk
		WHERE w.entity = ? AND w.flow = ?
		ORDER BY w.order_key, w.id LIMIT ?`, p.Entity, p.Flow, store.ClampLimit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("entity history %s/%s: %w", p.Flow, p.Entity, err)
	}
	defer rows.Close()
	var out []*store.EntityHistoryItem
	for rows.Next() {
		it := &store.EntityHistoryItem{}
		var done, occ sql.NullInt64
		var received int64
		if err := rows.Scan(&it.WorkID, &it.OrderKey, &it.ReplayID, &it.Disposition, &it.Reason, &it.VersionSort, &done,
			&it.EventPK, &it.Source, &it.EventID, &it.Type, &occ, &received); err != nil {
			return nil, fmt.Errorf("entity history %s/%s: %w", p.Flow, p.Entity, err)
		}
		it.DoneAt, it.OccurredAt = fromMicros(done), fromMicros(occ)
		it.ReceivedAt = fromMicros(sql.NullInt64{Int64: received, Valid: true})
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("entity history %s/%s: %w", p.Flow, p.Entity, err)
	}
	return out, nil
}
