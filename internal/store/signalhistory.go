package store

import (
	"context"
	"fmt"
	"time"
)

// SignalTx is the statements of the signals' history.
type SignalTx interface {
	// SignalHistoryFold folds one signal's value and status into its
	// bucket: a new row, or the row there keeping the larger value and
	// the worse status (StatusRankSQL), so that concurrent recorders
	// (several serve processes) agree whatever their order.
	SignalHistoryFold(ctx context.Context, p *SignalHistoryFoldParams) error
	// SignalHistoryPrune deletes the signal's buckets of the resolution
	// that start before Before: a range of the primary key (name,
	// resolution, bucket).
	SignalHistoryPrune(ctx context.Context, p *SignalHistoryPruneParams) error
}

// SignalHistoryFoldParams is one bucket's share of a computation.
type SignalHistoryFoldParams struct {
	Name, Resolution string
	Bucket           time.Time
	Value            int64
	Status           string
}

// SignalHistoryPruneParams says which of a signal's buckets expired.
type SignalHistoryPruneParams struct {
	Name, Resolution string
	Before           time.Time
}

// How long each resolution of the history is kept.
const (
	historyKeepMinute = 24 * time.Hour
	historyKeepHour   = 30 * 24 * time.Hour
)

// SignalHistoryRecord folds one computation into the minute and hour
// buckets and prunes the expired ones, in one write transaction.
func (r *Rules) SignalHistoryRecord(ctx context.Context, p *SignalHistoryRecordParams) error {
	for _, pt := range p.Points {
		if statusRank(pt.Status) < 0 {
			return fmt.Errorf("record signal history: %s: %w: status %q", pt.Name, ErrInvalidArgument, pt.Status)
		}
	}
	now := p.Now.UTC()
	buckets := []struct {
		res            string
		bucket, before time.Time
	}{
		{ResolutionMinute, now.Truncate(time.Minute), now.Add(-historyKeepMinute)},
		{ResolutionHour, now.Truncate(time.Hour), now.Add(-historyKeepHour)},
	}
	err := r.db.InTx(ctx, TxWrite, func(ctx context.Context, tx Tx) error {
		for _, pt := range p.Points {
			for _, b := range buckets {
				if err := tx.SignalHistoryFold(ctx, &SignalHistoryFoldParams{Name: pt.Name, Resolution: b.res,
					Bucket: b.bucket, Value: pt.Value, Status: pt.Status}); err != nil {
					return fmt.Errorf("%s %s: %w", pt.Name, b.res, err)
				}
				if err := tx.SignalHistoryPrune(ctx, &SignalHistoryPruneParams{Name: pt.Name, Resolution: b.res,
					Before: b.before}); err != nil {
					return fmt.Errorf("prune %s %s: %w", pt.Name, b.res, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record signal history: %w", err)
	}
	return nil
}

// StatusRankSQL is statusRank in SQL, of the column col.
func StatusRankSQL(col string) string {
	return `CASE ` + col + ` WHEN 'alert' THEN 2 WHEN 'warn' THEN 1 ELSE 0 END`
}
