package postgres

import (
	"context"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/store"
)

// SchemaPending names the embedded migrations this database has not
// applied, all of them when it has no schema, and applies none: verbs that
// only read or operate on the store refuse to run against a missing or
// older schema instead of migrating it behind the operator's back.
func (s *Store) SchemaPending(ctx context.Context) ([]string, error) {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("check postgres schema: %w", err)
	}
	migs, err := store.LoadMigrations(sub)
	if err != nil {
		return nil, fmt.Errorf("check postgres schema: %w", err)
	}
	var exists bool
	// to_regclass follows the search_path, as Migrate's unqualified
	// CREATE TABLE does.
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, fmt.Errorf("check postgres schema: %w", err)
	}
	applied := map[int]bool{}
	if exists {
		rows, err := s.pool.Query(ctx, `SELECT version FROM schema_migrations`)
		if err != nil {
			return nil, fmt.Errorf("check postgres schema: %w", err)
		}
		versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return nil, fmt.Errorf("check postgres schema: %w", err)
		}
		for _, v := range versions {
			applied[int(v)] = true
		}
	}
	var pending []string
	for _, m := range migs {
		if !applied[m.Version] {
			pending = append(pending, m.Name)
		}
	}
	return pending, nil
}
