package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/store"
)

// SchemaPending names the embedded migrations this database has not
// applied, all of them when it has no schema, and applies none: verbs that
// only read or operate on the store refuse to run against a missing or
// older schema instead of migrating it behind the operator's back.
func (s *Store) SchemaPending(ctx context.Context) ([]string, error) {
	migs, err := store.LoadMigrations(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("check postgres schema: %w", err)
	}
	applied := map[int]bool{}
	var exists bool
	// to_regclass follows the search_path, as Migrate's unqualified
	// CREATE TABLE does.
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, fmt.Errorf("check postgres schema: %w", err)
	}
	if exists {
		rows, err := s.pool.Query(ctx, `SELECT version FROM schema_migrations`)
		if err != nil {
			return nil, fmt.Errorf("check postgres schema: %w", err)
		}
		var v int32
		if _, err := pgx.ForEachRow(rows, []any{&v}, func() error {
			applied[int(v)] = true
			return nil
		}); err != nil {
			return nil, fmt.Errorf("check postgres schema: %w", err)
		}
	}
	return store.PendingMigrations(migs, applied), nil
}
