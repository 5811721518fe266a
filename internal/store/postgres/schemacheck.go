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
	pending, err := store.SchemaPending(ctx, migrationFiles, func(ctx context.Context) (map[int]bool, error) {
		var exists bool
		// to_regclass follows the search_path, as Migrate's unqualified
		// CREATE TABLE does.
		if err := s.pool.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil || !exists {
			return nil, err
		}
		return appliedVersions(ctx, s.pool)
	})
	if err != nil {
		return nil, fmt.Errorf("check postgres schema: %w", err)
	}
	return pending, nil
}

// migrationTx is store.MigrationTx on Migrate's transaction.
type migrationTx struct{ tx pgx.Tx }

func (m migrationTx) MigrationsApplied(ctx context.Context) (map[int]bool, error) {
	if _, err := m.tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("create schema_migrations: %w", err)
	}
	return appliedVersions(ctx, m.tx)
}

func (m migrationTx) MigrationApply(ctx context.Context, mig store.Migration) error {
	if _, err := m.tx.Exec(ctx, mig.SQL); err != nil {
		return err
	}
	if _, err := m.tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, mig.Version, mig.Name); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	return nil
}

// appliedVersions reads schema_migrations.
func appliedVersions(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) (map[int]bool, error) {
	rows, err := q.Query(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return nil, err
	}
	applied := map[int]bool{}
	var v int32
	_, err = pgx.ForEachRow(rows, []any{&v}, func() error {
		applied[int(v)] = true
		return nil
	})
	return applied, err
}
