package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// SignalSnapshot measures the signals in one read transaction on the
// reader pool: one WAL snapshot, so that the signals agree with one
// another, and never the writer, so ingest is not held up.
func (s *Store) SignalSnapshot(ctx context.Context, p *store.SignalSnapshotParams) (*store.SignalSnapshot, error) {
	tx, err := s.reader.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("signal snapshot: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read only
	snap, err := store.MeasureSignals(ctx, signalReader{tx}, p)
	if err != nil {
		return nil, fmt.Errorf("signal snapshot: %w", err)
	}
	return snap, nil
}

// signalReader runs the signal queries in the snapshot's transaction.
type signalReader struct{ tx *sql.Tx }

// signalSQL is the statement of each signal query.
var signalSQL = store.SignalSQL(sqliteDialect)

// SignalRows runs one signal query (store.SignalReader); a time is
// stored as microseconds.
func (r signalReader) SignalRows(ctx context.Context, q store.SignalQuery, args ...any) ([]store.SignalRow, error) {
	query, ok := signalSQL[q]
	if !ok {
		return nil, store.ErrUnknownSignalQuery
	}
	for i, a := range args {
		if t, ok := a.(time.Time); ok {
			args[i] = t.UnixMicro()
		}
	}
	return r.rows(ctx, query, args...)
}

// rows reads (key, sub-key, count, oldest) rows.
func (r signalReader) rows(ctx context.Context, query string, args ...any) ([]store.SignalRow, error) {
	rows, err := r.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.SignalRow
	for rows.Next() {
		var row store.SignalRow
		var n, oldest sql.NullInt64
		if err := rows.Scan(&row.Key, &row.Sub, &n, &oldest); err != nil {
			return nil, err
		}
		row.N, row.Oldest = n.Int64, fromMicros(oldest)
		out = append(out, row)
	}
	return out, rows.Err()
}

// SignalHistoryFold upserts one bucket (store.SignalTx); a bucket is
// stored as microseconds.
func (a txn) SignalHistoryFold(ctx context.Context, p *store.SignalHistoryFoldParams) error {
	_, err := a.tx.ExecContext(ctx, `INSERT INTO signal_history (name, resolution, bucket, value, status)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT (name, resolution, bucket) DO UPDATE SET
		value = max(value, excluded.value),
		status = CASE WHEN `+store.StatusRankSQL("excluded.status")+` > `+store.StatusRankSQL("status")+`
			THEN excluded.status ELSE status END`,
		p.Name, p.Resolution, p.Bucket.UnixMicro(), p.Value, p.Status)
	return err
}

// SignalHistoryPrune deletes the expired buckets (store.SignalTx).
func (a txn) SignalHistoryPrune(ctx context.Context, p *store.SignalHistoryPruneParams) error {
	_, err := a.tx.ExecContext(ctx, `DELETE FROM signal_history WHERE name = ? AND resolution = ? AND bucket < ?`,
		p.Name, p.Resolution, p.Before.UnixMicro())
	return err
}

// SignalHistoryList returns one signal's buckets in [From, To); a zero
// bound is open.
func (s *Store) SignalHistoryList(ctx context.Context, p *store.SignalHistoryListParams) ([]*store.SignalPoint, error) {
	if p.Resolution != store.ResolutionMinute && p.Resolution != store.ResolutionHour {
		return nil, fmt.Errorf("list signal history: %w: resolution %q", store.ErrInvalidArgument, p.Resolution)
	}
	to := int64(1<<63 - 1)
	if !p.To.IsZero() {
		to = p.To.UnixMicro()
	}
	from := int64(-1 << 63)
	if !p.From.IsZero() {
		from = p.From.UnixMicro()
	}
	rows, err := s.readQuery(ctx, `SELECT bucket, value, status FROM signal_history
		WHERE name = ? AND resolution = ? AND bucket >= ? AND bucket < ? ORDER BY bucket`, p.Name, p.Resolution, from, to)
	if err != nil {
		return nil, fmt.Errorf("list signal history: %w", err)
	}
	defer rows.Close()
	var out []*store.SignalPoint
	for rows.Next() {
		pt := &store.SignalPoint{}
		var bucket int64
		if err := rows.Scan(&bucket, &pt.Value, &pt.Status); err != nil {
			return nil, fmt.Errorf("list signal history: %w", err)
		}
		pt.Bucket = time.UnixMicro(bucket).UTC()
		out = append(out, pt)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list signal history: %w", err)
	}
	return out, nil
}
