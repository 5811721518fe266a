package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/hookledger/hookledger/internal/store"
)

// SignalSnapshot measures the signals in one REPEATABLE READ, READ ONLY
// transaction: one snapshot, so that the signals agree with one another,
// and no locks, so ingest is never held up.
func (s *Store) SignalSnapshot(ctx context.Context, p *store.SignalSnapshotParams) (*store.SignalSnapshot, error) {
	var snap *store.SignalSnapshot
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		snap, err = store.MeasureSignals(ctx, signalReader{tx}, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("signal snapshot: %w", err)
	}
	return snap, nil
}

// signalReader runs the signal queries in the snapshot's transaction.
type signalReader struct{ tx pgx.Tx }

// signalSQL is the statement of each signal query.
var signalSQL = store.SignalSQL(postgresDialect)

// SignalRows runs one signal query (store.SignalReader).
func (r signalReader) SignalRows(ctx context.Context, q store.SignalQuery, args ...any) ([]store.SignalRow, error) {
	query, ok := signalSQL[q]
	if !ok {
		return nil, store.ErrUnknownSignalQuery
	}
	return r.rows(ctx, query, args...)
}

// rows reads (key, sub-key, count, oldest) rows.
func (r signalReader) rows(ctx context.Context, query string, args ...any) ([]store.SignalRow, error) {
	rows, err := r.tx.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.SignalRow, error) {
		var out store.SignalRow
		var oldest pgtype.Timestamptz
		if err := row.Scan(&out.Key, &out.Sub, &out.N, &oldest); err != nil {
			return out, err
		}
		if oldest.Valid && oldest.InfinityModifier == pgtype.Finite {
			out.Oldest = oldest.Time.UTC()
		}
		return out, nil
	})
}

// SignalHistoryFold upserts one bucket (store.SignalTx).
func (a txn) SignalHistoryFold(_ context.Context, p *store.SignalHistoryFoldParams) error {
	a.t.exec("fold signal history", `INSERT INTO signal_history AS h (name, resolution, bucket, value, status)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name, resolution, bucket) DO UPDATE SET
		value = GREATEST(h.value, excluded.value),
		status = CASE WHEN `+store.StatusRankSQL("excluded.status")+` > `+store.StatusRankSQL("h.status")+`
			THEN excluded.status ELSE h.status END`,
		p.Name, p.Resolution, p.Bucket, p.Value, p.Status)
	return nil
}

// SignalHistoryPrune deletes the expired buckets (store.SignalTx).
func (a txn) SignalHistoryPrune(_ context.Context, p *store.SignalHistoryPruneParams) error {
	a.t.exec("prune signal history", `DELETE FROM signal_history WHERE name = $1 AND resolution = $2 AND bucket < $3`,
		p.Name, p.Resolution, p.Before)
	return nil
}

// SignalHistoryList returns one signal's buckets in [From, To); a zero
// bound is open.
func (s *Store) SignalHistoryList(ctx context.Context, p *store.SignalHistoryListParams) ([]*store.SignalPoint, error) {
	if p.Resolution != store.ResolutionMinute && p.Resolution != store.ResolutionHour {
		return nil, fmt.Errorf("list signal history: %w: resolution %q", store.ErrInvalidArgument, p.Resolution)
	}
	rows, err := s.pool.Query(ctx, `SELECT bucket, value, status FROM signal_history
		WHERE name = $1 AND resolution = $2 AND ($3::timestamptz IS NULL OR bucket >= $3)
		AND ($4::timestamptz IS NULL OR bucket < $4) ORDER BY bucket`, p.Name, p.Resolution, nullTime(p.From), nullTime(p.To))
	if err != nil {
		return nil, fmt.Errorf("list signal history: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.SignalPoint, error) {
		pt := &store.SignalPoint{}
		err := r.Scan(&pt.Bucket, &pt.Value, &pt.Status)
		pt.Bucket = pt.Bucket.UTC()
		return pt, err
	})
	if err != nil {
		return nil, fmt.Errorf("list signal history: %w", err)
	}
	return out, nil
}
