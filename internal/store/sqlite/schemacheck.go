package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// SchemaPending names the embedded migrations this database has not
// applied, all of them when it has no schema, and applies none: verbs that
// only read or operate on the store refuse to run against a missing or
// older schema instead of migrating it behind the operator's back.
func (s *Store) SchemaPending(ctx context.Context) ([]string, error) {
	var pending []string
	err := s.readTx(ctx, func(tx *wtx) error {
		var err error
		pending, err = store.SchemaPending(ctx, migrationFiles, func(ctx context.Context) (map[int]bool, error) {
			var tables int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`).
				Scan(&tables); err != nil || tables == 0 {
				return nil, err
			}
			return appliedVersions(ctx, tx.Tx)
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("check sqlite schema: %w", err)
	}
	return pending, nil
}

// migrationTx is store.MigrationTx on the writer's transaction.
type migrationTx struct{ tx *sql.Tx }

func (m migrationTx) MigrationsApplied(ctx context.Context) (map[int]bool, error) {
	if _, err := m.tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT`); err != nil {
		return nil, fmt.Errorf("create schema_migrations: %w", err)
	}
	return appliedVersions(ctx, m.tx)
}

func (m migrationTx) MigrationApply(ctx context.Context, mig store.Migration) error {
	if _, err := m.tx.ExecContext(ctx, mig.SQL); err != nil {
		return err
	}
	if _, err := m.tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
		mig.Version, mig.Name, time.Now().UnixMicro()); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	return nil
}

// appliedVersions reads schema_migrations.
func appliedVersions(ctx context.Context, tx *sql.Tx) (map[int]bool, error) {
	rows, err := tx.QueryContext(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	applied := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		applied[v] = true
	}
	return applied, rows.Err()
}
