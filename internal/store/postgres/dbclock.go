package postgres

import (
	"context"
	"time"
)

// DatabaseNow reads the database server's clock. Several processes on one
// database judge leases and due times by it rather than by their hosts'
// clocks (clock.Synced measures their offset from it; docs/architecture.md,
// "The database's clock"). clock_timestamp() is the time of the reading
// itself: now() would be the start of the transaction, which a pooled
// connection may have begun earlier than the round trip being timed.
func (s *Store) DatabaseNow(ctx context.Context) (time.Time, error) {
	var at time.Time
	if err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&at); err != nil {
		return time.Time{}, s.unavailable("read the database clock", err)
	}
	return at.UTC(), nil
}
