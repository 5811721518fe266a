package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// plannedTables are the tables whose statistics the pipeline's plans rest
// on: the ones every event adds rows to.
var plannedTables = []string{"events", "deliveries", "work", "entities", "effects", "effect_attempts", "audit"}

// analyzeFloor: a table is analyzed once it holds twice this many rows,
// whatever its statistics say; an ANALYZE of a few hundred rows takes a
// millisecond, and a plan made for 20 rows already reads 200 badly.
const analyzeFloor = 100

// AnalyzeGrown analyzes each of hookledger's busy tables that holds more
// than twice the rows its statistics know of (and at least
// 2 × analyzeFloor), and returns their names.
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
	for i, name := range grown {
		if _, err := s.pool.Exec(ctx, `ANALYZE `+pgx.Identifier{name}.Sanitize()); err != nil {
			return grown[:i], fmt.Errorf("analyze %s: %w", name, err)
		}
	}
	return grown, nil
}
