package sqlite

import (
	"context"
	"fmt"
	"io/fs"

	"github.com/hookledger/hookledger/internal/store"
)

// SchemaPending names the embedded migrations this database has not
// applied, all of them when it has no schema, and applies none: verbs that
// only read or operate on the store refuse to run against a missing or
// older schema instead of migrating it behind the operator's back.
func (s *Store) SchemaPending(ctx context.Context) ([]string, error) {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("check sqlite schema: %w", err)
	}
	migs, err := store.LoadMigrations(sub)
	if err != nil {
		return nil, fmt.Errorf("check sqlite schema: %w", err)
	}
	var tables int
	if err := s.reader.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`).
		Scan(&tables); err != nil {
		return nil, fmt.Errorf("check sqlite schema: %w", err)
	}
	applied := map[int]bool{}
	if tables > 0 {
		rows, err := s.reader.QueryContext(ctx, `SELECT version FROM schema_migrations`)
		if err != nil {
			return nil, fmt.Errorf("check sqlite schema: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				return nil, fmt.Errorf("check sqlite schema: %w", err)
			}
			applied[v] = true
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("check sqlite schema: %w", err)
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
