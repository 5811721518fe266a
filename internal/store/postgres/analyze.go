package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// plannedTables are the tables whose statistics the pipeline's plans rest
// on: the ones every event adds rows to, and the routing queue, which a
// backlog grows.
var plannedTables = []string{"events", "deliveries", "work", "entities", "effects", "effect_attempts", "audit", "route_queue"}

// analyzeFloor: a table is analyzed once it holds twice this many rows,
// whatever its statistics say; an ANALYZE of a few hundred rows takes a
// millisecond, and a plan made for 20 rows already reads 200 badly.
const analyzeFloor = 100

// AnalyzeGrown analyzes each of hookledger's busy tables that holds more
// than twice the rows its statistics know of (and at least
// 2 × analyzeFloor), and returns the names of those it analyzed: a table
// another process is analyzing at the moment is left to it.
//
// Why: pgx prepares a statement once per connection, and PostgreSQL keeps
// its generic plan until the table's statistics change. A plan made while
// a table was nearly empty (a new install, a burst after a quiet night)
// reads it as if it still were: a sequential scan, or one key column of
// two, for every group of events. Autovacuum analyzes by the same measure
// but looks at most once a minute (autovacuum_naptime), and at 1,000
// events a second a table grows from a few rows to 60,000 in that minute,
// the whole time on plans for a few rows. Doubling bounds the analyses to
// one per doubling (about 13 up to a million rows), each a sample of
// 30,000 rows at most. A table with autovacuum switched off is left
// alone: its owner manages its statistics. Where the connecting role does
// not own a table, PostgreSQL skips it with a warning and nothing fails.
func (s *Store) AnalyzeGrown(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_stat_user_tables st ON st.relid = c.oid
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY($1)
			AND st.n_live_tup > 2 * greatest(c.reltuples, $2)
			AND NOT EXISTS (SELECT 1 FROM unnest(c.reloptions) o WHERE lower(o) ~ '^autovacuum_enabled=(false|off|no|0)$')
		ORDER BY c.relname`, plannedTables, analyzeFloor)
	if err != nil {
		return nil, fmt.Errorf("find grown tables: %w", err)
	}
	grown, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("find grown tables: %w", err)
	}
	var done []string
	for _, name := range grown {
		ok, err := s.analyzeOne(ctx, name)
		if err != nil {
			return done, fmt.Errorf("analyze %s: %w", name, err)
		}
		if ok {
			done = append(done, name)
		}
	}
	return done, nil
}

// analyzeLockKey is the first key of the advisory locks (one per table,
// the table's oid the second) that let one process at a time analyze a
// table.
const analyzeLockKey int32 = 0x686c6167 // "hlag"

// analyzeOne analyzes a table unless another process is analyzing it or
// has just done so. Every serve process runs AnalyzeGrown, and they see a
// table double at the same moment: two ANALYZEs of one table queue behind
// each other's lock and the second repeats the first's work. The lock is
// a transaction's (so it works through PgBouncer in transaction mode),
// and once it is held the growth is checked again, against the
// statistics an ANALYZE that committed meanwhile left.
func (s *Store) analyzeOne(ctx context.Context, name string) (bool, error) {
	var ok bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1, $2::regclass::oid::int)`,
			analyzeLockKey, pgx.Identifier{name}.Sanitize()).Scan(&ok); err != nil || !ok {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT st.n_live_tup > 2 * greatest(c.reltuples, $2)
			FROM pg_class c JOIN pg_stat_user_tables st ON st.relid = c.oid WHERE c.oid = $1::regclass`,
			pgx.Identifier{name}.Sanitize(), analyzeFloor).Scan(&ok); err != nil || !ok {
			return err
		}
		_, err := tx.Exec(ctx, `ANALYZE `+pgx.Identifier{name}.Sanitize())
		return err
	})
	return ok, err
}
